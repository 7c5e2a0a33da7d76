"""One-time boot override (Pxe, UefiHttp, Hdd…): idempotent and confirmed by reading back."""

from __future__ import annotations

from dataclasses import dataclass

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.resources import Service
from redfish_tools.views import ComputerSystem

BOOT_TARGETS = ("Pxe", "UefiHttp", "Hdd", "Cd", "BiosSetup", "None")


@dataclass
class BootResult:
    """The override before and after; ``changed`` False when it already was as asked."""

    target: str
    enabled: str
    before: dict[str, str | None]
    after: dict[str, str | None]
    changed: bool

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def boot_override(conn: BmcConnection, svc: Service | None = None) -> dict[str, str | None]:
    """Current ``BootSourceOverrideTarget``/``Enabled``/``Mode`` (fresh read)."""
    svc = svc or Service(conn)
    return _override(ComputerSystem.from_json(svc.system(fresh=True)))


def _override(system: ComputerSystem) -> dict[str, str | None]:
    return {"target": system.boot_target, "enabled": system.boot_enabled, "mode": system.boot_mode}


def set_boot_once(conn: BmcConnection, target: str, *, enabled: str = "Once") -> BootResult:
    """Boot ``target`` at the next boot only (``enabled="Continuous"`` to keep it)."""
    svc = Service(conn)
    system_uri = svc.system_uri()
    system = ComputerSystem.from_json(svc.get(system_uri, fresh=True))
    allowed = system.boot_targets_allowed or list(BOOT_TARGETS)
    if target not in allowed:
        raise E.ValidationError(
            f"boot target {target!r} is not offered by this BMC (allowed: {', '.join(allowed)})",
            bmc=conn.target.name,
            uri=system_uri,
        )
    before = _override(system)
    if before["target"] == target and before["enabled"] == enabled:
        return BootResult(target, enabled, before, before, changed=False)
    conn.patch(system_uri, {"Boot": {"BootSourceOverrideTarget": target, "BootSourceOverrideEnabled": enabled}})
    after = boot_override(conn, svc)
    if after["target"] != target or after["enabled"] not in (enabled, "Continuous"):
        raise E.OperationNotConfirmed(
            f"boot override reads {after['target']}/{after['enabled']}, expected {target}/{enabled}",
            bmc=conn.target.name,
            uri=system_uri,
        )
    return BootResult(target, enabled, before, after, changed=True)
