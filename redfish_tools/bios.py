"""BIOS settings: validate against the BIOS registry, stage in ``Bios/Settings``, apply with the reset job,
wait for it and read back which attributes did not take (read-only, dependent, locked)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection
from redfish_tools.jobs import Job, create_settings_job, pending_job_for
from redfish_tools.lc import wait_lc_ready
from redfish_tools.power import set_power
from redfish_tools.resources import Service, link
from redfish_tools.tasks import TaskOutcome, wait_for
from redfish_tools.views import AttributeRegistry, Bios, BiosAttribute, RegistryFile

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

    def current(self) -> Bios:
        return Bios.from_json(self.svc.get(self.uri, fresh=True))

    def settings_uri(self, bios: Bios) -> str:
        return link(bios.raw, "@Redfish.Settings", "SettingsObject") or self.uri.rstrip("/") + "/Settings"

    def settings(self, bios: Bios) -> Bios:
        """The settings object: the values staged for the next apply (fresh read)."""
        return Bios.from_json(self.svc.get(self.settings_uri(bios), fresh=True))

    def pending(self, bios: Bios) -> Mapping[str, Any]:
        return self.settings(bios).attributes or {}

    def registry(self, bios: Bios) -> AttributeRegistry:
        """The system's BIOS attribute registry (attributes by name, dependencies)."""
        return AttributeRegistry.from_json(self._registry_body(bios))

    def _registry_body(self, bios: Bios) -> dict[str, Any]:
        name = bios.attribute_registry
        registries = self.svc.service_uri("Registries")
        if name and registries:
            for uri in self.svc.member_uris(registries):
                if uri.rstrip("/").rsplit("/", 1)[-1] == name:
                    for target in RegistryFile.from_json(self.svc.get(uri)).location_uris:
                        if target:
                            return self.svc.get(target)
        body = self.conn.get(self.uri.rstrip("/") + "/BiosRegistry", missing_ok=True)
        if not body:
            raise E.NotFoundError("no BIOS attribute registry found", bmc=self.conn.target.name, uri=self.uri)
        return body


def validate_against_registry(
    desired: dict[str, Any], registry: Mapping[str, BiosAttribute | dict[str, Any]]
) -> list[str]:
    """Problems with ``desired`` per the registry (its entries by attribute name, as views or as the
    registry's JSON): unknown, read-only, wrong type, not an allowed value."""
    problems: list[str] = []
    for name, value in desired.items():
        raw_entry = registry.get(name)
        if raw_entry is None:
            problems.append(f"{name}: not a BIOS attribute of this system")
            continue
        entry = raw_entry if isinstance(raw_entry, BiosAttribute) else BiosAttribute.from_json(raw_entry)
        if entry.read_only:
            problems.append(f"{name}: read-only on this system")
            continue
        kind = entry.type
        if kind == "Enumeration":
            allowed = list(entry.values)
            if allowed and str(value) not in allowed:
                problems.append(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")
        elif kind == "Integer":
            try:
                number = int(value)
            except (TypeError, ValueError):
                problems.append(f"{name}: {value!r} is not an integer")
                continue
            low, high = entry.lower_bound, entry.upper_bound
            if (low is not None and number < low) or (high is not None and number > high):
                problems.append(f"{name}: {number} is outside {low}..{high}")
        elif kind == "Boolean" and not isinstance(value, bool) and str(value).lower() not in ("true", "false"):
            problems.append(f"{name}: {value!r} is not a boolean")
    return problems


def coerce(value: Any, entry: BiosAttribute | None) -> Any:
    """Convert an inventory value (often a string) to the registry's type."""
    kind = entry.type if entry else None
    if kind == "Integer":
        return int(value)
    if kind == "Boolean" and isinstance(value, str):
        return value.lower() == "true"
    return value


def plan_bios(conn: BmcConnection, desired: dict[str, Any], view: BiosView | None = None) -> BiosPlan:
    """Compare ``desired`` with the current and pending BIOS attributes; validate against the registry."""
    view = view or BiosView(conn)
    bios = view.current()
    current = bios.attributes
    pending = view.pending(bios)
    registry = view.registry(bios).attributes
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
        settings = Bios.from_json(svc.get(settings_uri, fresh=True))
        if "OnReset" in (settings.apply_times_allowed or []) or "OnReset" in (bios.supported_apply_times or []):
            body["@Redfish.SettingsApplyTime"] = {"ApplyTime": "OnReset"}
        job = _stage(conn, view, settings_uri, body, wanted, svc)
    result.job = job
    result.state = "scheduled"
    if not reboot:
        return result
    set_power(conn, "cycle")
    result.rebooted = True
    result.outcome = wait_for(conn, job.uri or f"{settings_uri}", timeout=timeout, poll=poll, raise_on_failure=False)
    after = view.current().attributes
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


def _why_not(name: str, registry: AttributeRegistry, outcome: TaskOutcome | None) -> str:
    entry = registry.attributes.get(name) or BiosAttribute()
    if entry.read_only:
        return "read-only"
    for dep in registry.dependencies:
        if dep.map_to_attribute == name and dep.map_to_property in ("ReadOnly", "GrayOut"):
            conds = [f"{c.attribute} {c.condition} {c.value}" for c in dep.map_from]
            return "dependent: locked while " + " and ".join(conds) if conds else "dependent"
    if entry.gray_out:
        return "locked"
    if outcome and outcome.message:
        return f"not applied ({outcome.message})"
    return "not applied"
