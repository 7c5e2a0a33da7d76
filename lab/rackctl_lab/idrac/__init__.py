"""Emulated Dell iDRAC 9 BMCs: sushy-tools as the Redfish core, rackctl's iDRAC behaviour in front.

Public API (the contract with ``redfish_tools`` tests and benches) is in :mod:`rackctl_lab.idrac.api`.
"""

from rackctl_lab.idrac.api import BmcEndpoint, EmulatedBmcSpec, EmulatedRack, FaultSpec

__all__ = ["BmcEndpoint", "EmulatedBmcSpec", "EmulatedRack", "FaultSpec"]
