"""What one emulated iDRAC is asked to be (:class:`EmulatedBmcSpec`, :class:`FaultSpec`) and how it is reached
(:class:`BmcEndpoint`). The rack (:mod:`rackctl_lab.idrac.api`) runs them; see its docstring for behaviour."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Models the emulator knows (hardware table in :mod:`rackctl_lab.idrac.hardware`).
SUPPORTED_MODELS = ("R660", "R760xa", "XE8640", "XE9680")


@dataclass
class FaultSpec:
    """Misbehaviour of one emulated iDRAC; all off by default. Rates are per request, 0.0-1.0.

    Faults are drawn from a per-BMC seeded RNG, so a run is reproducible for a given spec name.
    """

    status_503_rate: float = 0.0
    """Fraction of requests answered 503 with ``Retry-After: 1`` (no MessageId)."""
    timeout_rate: float = 0.0
    """Fraction of requests that hang ``hang_s`` seconds (past any sane read timeout), then drop."""
    swc0700_rate: float = 0.0
    """Fraction answered 503 with MessageId ``IDRAC.2.8.SWC0700`` "iDRAC is not ready"."""
    session_exhausted: bool = False
    """SessionService POST always answers 400 ``RAC0218`` (basic auth still works, as on a real iDRAC)."""
    reset_during_job: bool = False
    """When a job starts running the iDRAC "resets": for ``reset_s`` every connection is dropped
    without an answer and all sessions are lost (log in again afterwards)."""
    always_fail: bool = False
    """Every request (service root included) answers 500: a dead BMC."""
    hang_s: float = 30.0
    """How long a ``timeout_rate`` request hangs before the connection is dropped."""
    reset_s: float = 3.0
    """How long a ``reset_during_job`` reset lasts."""
    fault_exempt_paths: tuple[str, ...] = ()
    """Path prefixes never hit by the rate faults (e.g. to keep login deterministic in a test)."""
    lose_answer_rate: float = 0.0
    """Fraction of requests that change something (POST, PATCH, PUT, DELETE) the BMC carries out, then
    drops the connection without an answer: the state changed, the client never hears so."""
    lose_answer_paths: tuple[str, ...] = ()
    """Path prefixes whose changing requests are carried out and lose their answer, the first
    ``lose_answer_count`` of them (deterministic, unlike the rate)."""
    lose_answer_count: int = 1
    """How many answers ``lose_answer_paths`` lose after these faults are set (0: every one)."""

    fail_update_components: tuple[str, ...] = ()
    """Firmware components (``iDRAC``, ``BIOS``, ``NIC``, ``GPU``, ``RAID``) whose update jobs end ``Failed``
    (``SUP0518``), the version unchanged: the first ``fail_update_count`` of them after these faults are set."""
    fail_update_count: int = 1
    """How many update jobs ``fail_update_components`` fails (0: every one)."""

    def __post_init__(self) -> None:
        self.fault_exempt_paths = tuple(self.fault_exempt_paths)
        self.lose_answer_paths = tuple(self.lose_answer_paths)
        self.fail_update_components = tuple(self.fail_update_components)


@dataclass
class EmulatedBmcSpec:
    """One emulated iDRAC: the node it manages and how it behaves."""

    name: str
    """Node hostname (also the BMC's key in :class:`EmulatedRack` methods)."""
    model: str
    """``"R660" | "R760xa" | "XE8640" | "XE9680"``."""
    service_tag: str
    gpu_model: str | None
    """e.g. ``"NVIDIA L40S"``, ``"NVIDIA H100 80GB HBM3"``; None when the node has no GPU."""
    gpu_count: int
    nics: dict[str, str]
    """NIC FQDD (``"NIC.Embedded.1-1-1"``) -> MAC (``"aa:bb:cc:dd:ee:ff"``)."""
    username: str
    password: str
    latency_ms: int = 0
    """Added to every request (before it is answered)."""
    faults: FaultSpec = field(default_factory=FaultSpec)
    power_state: str = "Off"
    address: str = "127.0.0.1"
    """Loopback address the BMC listens on (any 127.0.0.0/8 address)."""
    port: int = 0
    """TCP port; 0 picks a free one (reported in :class:`BmcEndpoint`)."""
    power_delay_s: float = 0.5
    """Seconds a power transition takes (sushy's fake driver otherwise draws 1-11 s)."""
    job_seconds: float = 1.0
    """Seconds a running job or task takes to complete (BIOS, SCP, firmware)."""
    bios_version: str = "2.3.5"
    idrac_version: str = "7.10.30.00"
    vm_domain: str | None = None
    """Name of the lab's libvirt domain this BMC drives (power, boot device); None: no real host."""

    def to_json(self) -> dict[str, Any]:
        """Plain dict (for the worker's config file). Holds the password: the file is mode 0600."""
        data = asdict(self)
        data["faults"]["fault_exempt_paths"] = list(self.faults.fault_exempt_paths)
        data["faults"]["lose_answer_paths"] = list(self.faults.lose_answer_paths)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EmulatedBmcSpec:
        """Inverse of :meth:`to_json`."""
        data = dict(data)
        faults = dict(data.pop("faults", {}) or {})
        faults["fault_exempt_paths"] = tuple(faults.get("fault_exempt_paths", ()))
        return cls(faults=FaultSpec(**faults), **data)


@dataclass
class BmcEndpoint:
    """What a client needs to reach one emulated iDRAC."""

    name: str
    url: str
    """``"https://127.0.0.1:PORT"``."""
    ca_file: Path
    """The lab CA bundle (PEM); leaf certificates carry an IP SAN for the BMC's address."""
    fingerprint: str
    """SHA-256 of the leaf certificate (DER), ``"AA:BB:..."`` upper-case hex."""
    pid: int = 0
    """PID of the worker process serving this BMC."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ca_file"] = str(self.ca_file)
        return data
