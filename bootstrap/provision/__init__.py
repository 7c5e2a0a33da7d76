"""Provisioning: the head node's boot services (dnsmasq, nginx, iPXE), the deploy ramdisk and the OS image."""
