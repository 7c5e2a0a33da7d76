"""Contract of the emulated iDRAC rack: what a test, a bench or ``rackctl lab`` asks of it.

An :class:`EmulatedRack` runs one emulated iDRAC 9 per :class:`EmulatedBmcSpec`, each on its own
loopback HTTPS port, with its own credentials, state, sessions, latency and faults. BMCs are sharded over
a few worker processes (``python -m rackctl_lab.idrac.worker``); every worker runs sushy-tools'
fake-driver Flask app in-process as the Redfish core (systems, power, boot override, NICs, managers)
and rackctl's iDRAC layer in front of it (Dell ids, sessions, BIOS and jobs, LC status, SCP, firmware,
virtual media, latency and faults).

What a client sees on every BMC (paths are the Dell ones; follow links from ``/redfish/v1``):

- ``/redfish/v1`` (no auth): ``Vendor: "Dell"``, ``Oem.Dell.ServiceTag``, ``Links.Sessions``.
- ``SessionService/Sessions``: POST ``{"UserName","Password"}`` -> 201, ``X-Auth-Token`` + ``Location``;
  DELETE the Location to log out. At most 8 sessions: the 9th login answers 400 with MessageId
  ``IDRAC.2.8.RAC0218``. Basic auth is accepted on every other path too (as on an iDRAC).
- ``Systems/System.Embedded.1`` (+ ``Processors`` with CPUs and GPUs, ``Memory``, ``EthernetInterfaces``
  with FQDD ids, ``Storage``, ``Bios``, ``Bios/Settings``, ``Bios/BiosRegistry``, ``VirtualMedia``,
  ``Actions/ComputerSystem.Reset``), ``Managers/iDRAC.Embedded.1`` (+ ``Jobs``, ``Oem/Dell/Jobs``,
  ``Oem/Dell/DellJobService``, ``Oem/Dell/DellLCService``, SCP actions, ``VirtualMedia``),
  ``Chassis/System.Embedded.1`` (+ ``PCIeDevices``), ``UpdateService`` (+ ``FirmwareInventory``,
  ``SimpleUpdate``), ``TaskService/Tasks/JID_...``, ``JobService/Jobs``.
- Collections accept ``$expand=*($levels=1)`` (also ``.`` and ``~``): members inlined in one answer.
- Errors are Redfish error bodies with ``@Message.ExtendedInfo[].MessageId`` (``SWC0700``, ``RAC0218``,
  ``LC068``, ``SUP029``, ``Base.1.12.*``...).
- Timing: power changes take ``power_delay_s``; jobs and tasks run ``job_seconds``; a BIOS job is
  Scheduled until the host next boots (power on / restart / cycle), then Running, then Completed with the
  values applied (read-only or dependency-locked attributes do not take; the job message names them).
- Boot override ``Once`` is honoured: cleared after the next boot; ``Oem.Rackctl.LastBootSource`` on the
  system tells which device that boot used (the lab's way to observe it).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rackctl_lab.idrac.rack import RackRunner
from rackctl_lab.idrac.spec import SUPPORTED_MODELS, BmcEndpoint, EmulatedBmcSpec, FaultSpec

__all__ = ["SUPPORTED_MODELS", "BmcEndpoint", "EmulatedBmcSpec", "EmulatedRack", "FaultSpec"]


class EmulatedRack:
    """A rack of emulated iDRACs on loopback; a context manager (``with EmulatedRack(...) as eps:``).

    ``processes`` worker processes share the BMCs (default: about one per 64 BMCs, at most twice the CPU
    count). ``workdir`` receives the lab CA, leaf certificates, worker configs (mode 0600) and logs.
    """

    def __init__(self, specs: list[EmulatedBmcSpec], workdir: Path, *, processes: int | None = None) -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError("EmulatedBmcSpec names must be unique")
        self.specs = list(specs)
        self.workdir = Path(workdir)
        self._runner = RackRunner(self.specs, self.workdir, processes=processes)

    def start(self, *, timeout_s: float = 120.0, detach: bool = False) -> list[BmcEndpoint]:
        """Start the workers; return when every BMC answers its service root over TLS.

        ``detach=True`` starts workers in their own session (they outlive this process; stop them by PID,
        as ``rackctl lab down`` does).
        """
        return self._runner.start(timeout_s=timeout_s, detach=detach)

    def stop(self) -> None:
        """Stop every worker by PID (TERM, then KILL), leaving nothing running."""
        self._runner.stop()

    @property
    def endpoints(self) -> list[BmcEndpoint]:
        """Endpoints of the running BMCs, in spec order."""
        return self._runner.endpoints

    @property
    def pids(self) -> list[int]:
        """PIDs of the worker processes."""
        return self._runner.pids

    def open_sessions(self, name: str) -> int:
        """Sessions currently open on that BMC (for leak checks)."""
        return int(self._runner.control(name, "GET", "sessions")["open_sessions"])

    def request_log(self, name: str) -> list[dict]:
        """Requests that BMC received, oldest first: ``method``, ``path``, ``query``, ``status``, ``time``,
        ``headers`` (Authorization, X-Auth-Token and Cookie removed), ``auth`` (basic/session/none),
        ``fault`` (the injected fault, if any). Never holds a password or token."""
        return list(self._runner.control(name, "GET", "requests")["requests"])

    def set_faults(self, name: str, faults: FaultSpec) -> None:
        """Replace that BMC's faults while it runs."""
        payload = asdict(faults)
        payload["fault_exempt_paths"] = list(faults.fault_exempt_paths)
        self._runner.control(name, "PUT", "faults", payload)

    def set_latency(self, name: str, latency_ms: int) -> None:
        """Replace that BMC's added latency while it runs."""
        self._runner.control(name, "PUT", "latency", {"latency_ms": latency_ms})

    def state(self, name: str) -> dict[str, Any]:
        """Emulator-side truth for assertions: ``power_state``, ``bios`` (current), ``bios_pending``,
        ``jobs``, ``firmware`` (name -> version), ``boot`` (override target/enabled, last boot source),
        ``virtual_media``, ``open_sessions``."""
        return dict(self._runner.control(name, "GET", "state"))

    def __enter__(self) -> list[BmcEndpoint]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return json.dumps({"bmcs": len(self.specs), "workdir": str(self.workdir)})
