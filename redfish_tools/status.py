"""What a node's BMC says of it right now: one typed read shared by ``rackctl status`` and ``rackctl bmc status``.

:class:`BmcStatus` is what ``rackctl`` shows of the ComputerSystem and the Manager (two fresh GETs, read
through :mod:`redfish_tools.views`); :func:`read_queue` adds the Lifecycle Controller's state and the
pending jobs, which only ``bmc status`` asks for (two more requests).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from redfish_tools.connection import BmcConnection
from redfish_tools.jobs import list_jobs
from redfish_tools.lc import lc_status
from redfish_tools.resources import Service
from redfish_tools.views import ComputerSystem, Manager


@dataclass(frozen=True)
class BmcStatus:
    """Power, health and identity of a node, and its BIOS and BMC firmware versions, as its BMC reports them."""

    power: str | None
    health: str | None  #: the system's health rollup (its own health when it has no rollup)
    model: str | None
    service_tag: str | None  #: Dell's service tag (the system's SKU)
    bios: str | None
    idrac: str | None  #: the manager's firmware version

    @classmethod
    def from_resources(cls, system_body: dict[str, Any], manager_body: dict[str, Any]) -> BmcStatus:
        system, manager = ComputerSystem.from_json(system_body), Manager.from_json(manager_body)
        return cls(
            power=system.power_state,
            health=system.health_rollup or system.health,
            model=system.model,
            service_tag=system.sku,
            bios=system.bios_version,
            idrac=manager.firmware_version,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BmcQueue:
    """The Lifecycle Controller's state and the jobs still pending in the BMC's queue."""

    lc: dict[str, Any]  #: ``LcStatus.as_dict()``, or ``{"ready": None, "error": why}`` when it could not be read
    pending_jobs: list[dict[str, Any]] = field(default_factory=list)


def read_status(conn: BmcConnection, svc: Service | None = None) -> BmcStatus:
    """The system and manager, read fresh (never from the connection's cache)."""
    svc = svc or Service(conn)
    return BmcStatus.from_resources(svc.system(fresh=True), svc.manager(fresh=True))


def read_queue(conn: BmcConnection, svc: Service | None = None) -> BmcQueue:
    """The Lifecycle Controller's state (informative: a failure to read it is reported, not raised) and the
    pending jobs."""
    svc = svc or Service(conn)
    try:
        lc = lc_status(conn, svc).as_dict()
    except Exception as exc:
        lc = {"ready": None, "error": getattr(exc, "message", str(exc))}
    return BmcQueue(lc, [j.as_dict() for j in list_jobs(conn, svc) if j.pending])
