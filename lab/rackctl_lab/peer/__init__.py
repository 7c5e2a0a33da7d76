"""Peers rackctl is compared with (tests and benchmarks): Ansible's ``community.general.redfish_info``."""
