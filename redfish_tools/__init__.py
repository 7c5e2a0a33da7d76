"""Out-of-band layer: everything rackctl says to BMCs (iDRAC 9) over Redfish, on the DMTF library.

- :mod:`.connection` one BMC: session login/logout, TLS (CA, pinned fingerprint, explicit insecure),
  timeouts, bounded retries (never a blind POST retry), typed errors (:mod:`.errors`), <= 2 in flight.
- :mod:`.aio` the same rules on asyncio (DMTF ``redfish.aio``) for fleet-wide read-only discovery.
- :mod:`.resources` link following from the service root; OEM actions matched on their suffix.
- operations: :mod:`.discover`, :mod:`.power`, :mod:`.boot`, :mod:`.bios`, :mod:`.jobs`, :mod:`.lc`,
  :mod:`.scp`, :mod:`.firmware`, :mod:`.virtual_media`, :mod:`.tasks` (202 monitors, jobs).
- :mod:`.fleet` fan-out over many BMCs with per-node results and progress.
"""
