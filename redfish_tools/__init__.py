"""Out-of-band layer: everything rackctl says to BMCs (iDRAC 9) over Redfish, on the DMTF library.

- :mod:`.connection` the one engine, for one BMC: session login/logout (basic auth on RAC0218), TLS (CA,
  pinned fingerprint, explicit insecure), timeouts and total deadlines (:mod:`.deadline`), one retry policy
  (never a blind POST retry), typed errors (:mod:`.errors`), <= 2 requests in flight; :mod:`.session_ledger`
  records open sessions so the next run closes those a killed one left.
- :mod:`.links` link objects and paged collections; :mod:`.resources` link following from the service
  root; OEM actions matched on their suffix.
- operations: :mod:`.discover`, :mod:`.power`, :mod:`.boot`, :mod:`.bios`, :mod:`.jobs`, :mod:`.lc`,
  :mod:`.scp`, :mod:`.firmware`, :mod:`.virtual_media`, :mod:`.tasks` (202 monitors, jobs).
- :mod:`.fleet` fan-out over many BMCs (threads, a global cap) with per-node results and progress.

Nothing here imports ``bootstrap``: the CLI and the stages use this package, never the reverse.
"""
