"""Out-of-band layer: everything rackctl says to BMCs (iDRAC 9) over Redfish."""
