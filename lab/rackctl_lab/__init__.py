"""The lab: an emulated rack on one machine (emulated iDRACs, PXE-booting VMs)."""
