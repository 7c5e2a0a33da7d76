"""BIOS settings: validate against the BIOS registry, stage in ``Bios/Settings``, apply with the reset job,
wait for it and read back which attributes did not take (read-only, dependent, locked)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.jobs import Job, create_settings_job, pending_job_for
from redfish_tools.lc import wait_lc_ready
from redfish_tools.power import set_power
from redfish_tools.resources import Service, link
from redfish_tools.tasks import TaskOutcome, wait_for

#: MessageIds meaning "a configuration job is already pending or running".
JOB_PENDING_IDS = {"LC068", "RAC0679", "SYS011"}
log = logging.getLogger("redfish_tools.bios")


@dataclass
class BiosChange:
    attribute: str
    current: Any
    desired: Any
    pending: Any = None


@dataclass
class BiosPlan:
    """What applying a BIOS profile would change on one node."""

    changes: list[BiosChange] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    pending_job: str | None = None

    @property
    def needed(self) -> bool:
        return bool(self.changes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "changes": [c.__dict__ for c in self.changes],
            "unchanged": self.unchanged,
            "problems": self.problems,
            "pending_job": self.pending_job,
            "needed": self.needed,
        }


@dataclass
class BiosResult:
    """Outcome of an apply: the plan, the job, and attributes that did not take with the reason."""

    plan: BiosPlan
    job: Job | None = None
    outcome: TaskOutcome | None = None
    state: str = "unchanged"  # unchanged | scheduled | applied | partially-applied
    not_applied: dict[str, str] = field(default_factory=dict)
    rebooted: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "plan": self.plan.as_dict(),
            "job": self.job.as_dict() if self.job else None,
            "outcome": self.outcome.as_dict() if self.outcome else None,
            "not_applied": self.not_applied,
            "rebooted": self.rebooted,
        }


class BiosView:
    """The BIOS resources of one system, found by links."""

    def __init__(self, conn: BmcConnection, svc: Service | None = None) -> None:
        self.conn = conn
        self.svc = svc or Service(conn)
        self.uri = link(self.svc.system(), "Bios")
        if not self.uri:
            raise E.NotFoundError("the system has no Bios link", bmc=conn.target.name, uri=self.svc.system_uri())

    def current(self) -> dict[str, Any]:
        return self.svc.get(self.uri, fresh=True)

    def settings_uri(self, bios: dict[str, Any]) -> str:
        return link(bios, "@Redfish.Settings", "SettingsObject") or self.uri.rstrip("/") + "/Settings"

    def pending(self, bios: dict[str, Any]) -> dict[str, Any]:
        return self.svc.get(self.settings_uri(bios), fresh=True).get("Attributes", {}) or {}

    def registry(self, bios: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Attribute name -> registry entry (``Type``, ``ReadOnly``, ``Value``…), plus ``__deps__``."""
        body = self._registry_body(bios)
        entries = body.get("RegistryEntries", {})
        attrs = {a["AttributeName"]: a for a in entries.get("Attributes", []) if "AttributeName" in a}
        attrs["__deps__"] = {"Dependencies": entries.get("Dependencies", [])}
        return attrs

    def _registry_body(self, bios: dict[str, Any]) -> dict[str, Any]:
        name = bios.get("AttributeRegistry")
        registries = self.svc.service_uri("Registries")
        if name and registries:
            for uri in self.svc.member_uris(registries):
                if uri.rstrip("/").rsplit("/", 1)[-1] == name:
                    for loc in self.svc.get(uri).get("Location", []):
                        target = loc.get("Uri")
                        if target:
                            return self.svc.get(target)
        body = self.conn.get(self.uri.rstrip("/") + "/BiosRegistry", missing_ok=True)
        if not body:
            raise E.NotFoundError("no BIOS attribute registry found", bmc=self.conn.target.name, uri=self.uri)
        return body


def validate_against_registry(desired: dict[str, Any], registry: dict[str, dict[str, Any]]) -> list[str]:
    """Problems with ``desired`` per the registry: unknown, read-only, wrong type, not an allowed value."""
    problems: list[str] = []
    for name, value in desired.items():
        entry = registry.get(name)
        if entry is None or name == "__deps__":
            problems.append(f"{name}: not a BIOS attribute of this system")
            continue
        if entry.get("ReadOnly"):
            problems.append(f"{name}: read-only on this system")
            continue
        kind = entry.get("Type")
        if kind == "Enumeration":
            allowed = [v.get("ValueName") for v in entry.get("Value", [])]
            if allowed and str(value) not in allowed:
                problems.append(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")
        elif kind == "Integer":
            try:
                number = int(value)
            except (TypeError, ValueError):
                problems.append(f"{name}: {value!r} is not an integer")
                continue
            low, high = entry.get("LowerBound"), entry.get("UpperBound")
            if (low is not None and number < low) or (high is not None and number > high):
                problems.append(f"{name}: {number} is outside {low}..{high}")
        elif kind == "Boolean" and not isinstance(value, bool) and str(value).lower() not in ("true", "false"):
            problems.append(f"{name}: {value!r} is not a boolean")
    return problems


def coerce(value: Any, entry: dict[str, Any] | None) -> Any:
    """Convert an inventory value (often a string) to the registry's type."""
    kind = (entry or {}).get("Type")
    if kind == "Integer":
        return int(value)
    if kind == "Boolean" and isinstance(value, str):
        return value.lower() == "true"
    return value


def plan_bios(conn: BmcConnection, desired: dict[str, Any], view: BiosView | None = None) -> BiosPlan:
    """Compare ``desired`` with the current and pending BIOS attributes; validate against the registry."""
    view = view or BiosView(conn)
    bios = view.current()
    current = bios.get("Attributes", {})
    pending = view.pending(bios)
    registry = view.registry(bios)
    plan = BiosPlan(problems=validate_against_registry(desired, registry))
    for name, value in desired.items():
        want = coerce(value, registry.get(name)) if name in registry else value
        if current.get(name) == want:
            plan.unchanged.append(name)
        else:
            plan.changes.append(BiosChange(name, current.get(name), want, pending.get(name)))
    job = pending_job_for(conn, view.settings_uri(bios), view.svc)
    plan.pending_job = job.id if job else None
    return plan


def apply_bios(
    conn: BmcConnection,
    desired: dict[str, Any],
    *,
    reboot: bool = False,
    timeout: float = 1800.0,
    poll: float = 1.0,
) -> BiosResult:
    """Stage ``desired``, make sure an apply-on-reset job exists, and (only with ``reboot``) reboot, wait for
    the job and read back. Without ``reboot`` the job stays Scheduled until the node next boots."""
    svc = Service(conn)
    view = BiosView(conn, svc)
    plan = plan_bios(conn, desired, view)
    if plan.problems:
        raise E.ValidationError(
            "BIOS settings rejected by the registry: " + "; ".join(plan.problems),
            bmc=conn.target.name,
            uri=view.uri,
        )
    result = BiosResult(plan=plan)
    if not plan.needed:
        return result
    bios = view.current()
    settings_uri = view.settings_uri(bios)
    wanted = {c.attribute: c.desired for c in plan.changes}
    staged = all(c.pending == c.desired for c in plan.changes)
    job = pending_job_for(conn, settings_uri, svc) if staged else None
    if job is None:
        wait_lc_ready(conn, svc)
        body: dict[str, Any] = {"Attributes": wanted}
        settings = svc.get(settings_uri, fresh=True)
        if "OnReset" in (settings.get("@Redfish.SettingsApplyTime", {}) or {}).get(
            "ApplyTime@Redfish.AllowableValues", []
        ) or "OnReset" in (bios.get("@Redfish.Settings", {}).get("SupportedApplyTimes") or []):
            body["@Redfish.SettingsApplyTime"] = {"ApplyTime": "OnReset"}
        job = _stage(conn, view, settings_uri, body, wanted, svc)
    result.job = job
    result.state = "scheduled"
    if not reboot:
        return result
    set_power(conn, "cycle")
    result.rebooted = True
    result.outcome = wait_for(conn, job.uri or f"{settings_uri}", timeout=timeout, poll=poll, raise_on_failure=False)
    after = view.current().get("Attributes", {})
    registry = view.registry(bios)
    for name, value in wanted.items():
        if after.get(name) != value:
            result.not_applied[name] = _why_not(name, registry, result.outcome)
    if result.outcome is not None and not result.outcome.ok and not result.not_applied:
        raise E.JobFailedError(
            f"BIOS job {job.id} ended {result.outcome.state}: {result.outcome.message}",
            bmc=conn.target.name,
            uri=job.uri,
            message_id=result.outcome.message_id,
        )
    result.state = "partially-applied" if result.not_applied else "applied"
    return result


def _stage(  # noqa: PLR0917 - the pieces apply_bios already has
    conn: BmcConnection, view: BiosView, settings_uri: str, body: dict[str, Any], wanted: dict[str, Any], svc: Service
) -> Job:
    """PATCH the settings and make sure their job exists; returns the job.

    A PATCH whose answer was lost is sent again by the engine; when the first one had already created the
    job, the iDRAC refuses the second (``SYS011``): then the staged values and the job are read back and,
    if they are ours, used as they are.
    """
    try:
        conn.patch(settings_uri, body)
    except E.InvalidRequestError as exc:
        if exc.message_id not in JOB_PENDING_IDS:
            raise
        pending = view.pending(view.current())
        job = pending_job_for(conn, settings_uri, svc)
        if job is not None and all(pending.get(k) == v for k, v in wanted.items()):
            log.info("%s: BIOS settings already staged with job %s (an earlier answer was lost)", exc.bmc, job.id)
            return job
        raise E.InvalidRequestError(
            "a configuration job is already pending on this iDRAC; let it run "
            "(rackctl bios apply --reboot) or clear the job queue first",
            bmc=exc.bmc,
            uri=exc.uri,
            status=exc.status,
            message_id=exc.message_id,
            extended_info=exc.extended_info,
        ) from None
    return create_settings_job(conn, settings_uri, svc)


def _why_not(name: str, registry: dict[str, dict[str, Any]], outcome: TaskOutcome | None) -> str:
    entry = registry.get(name, {})
    if entry.get("ReadOnly"):
        return "read-only"
    deps = registry.get("__deps__", {}).get("Dependencies", [])
    for dep in deps:
        spec = dep.get("Dependency", {})
        if spec.get("MapToAttribute") == name and spec.get("MapToProperty") in ("ReadOnly", "GrayOut"):
            conds = [
                f"{c.get('MapFromAttribute')} {c.get('MapFromCondition', 'EQU')} {c.get('MapFromValue')}"
                for c in spec.get("MapFrom", [])
            ]
            return "dependent: locked while " + " and ".join(conds) if conds else "dependent"
    if entry.get("GrayOut"):
        return "locked"
    if outcome and outcome.message:
        return f"not applied ({outcome.message})"
    return "not applied"
