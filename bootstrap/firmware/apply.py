"""The rolling firmware update: batches from :mod:`bootstrap.rollout`, per node through Redfish.

Per node (all journalled under stage ``firmware``, so a killed or stopped rollout resumes):

1. lifecycle ``maintenance`` (cause: the rollout and batch), cordon and drain through the :class:`NodeGate`;
2. the Lifecycle Controller Ready, the installed versions read;
3. the iDRAC first: SimpleUpdate at once, its job followed through the iDRAC's own reset, read back;
4. host components (BIOS, NIC, GPU, RAID...) staged ``OnReset`` in Dell's order, then one reboot, their
   jobs followed to the end;
5. BMC healthy (LC Ready) and the OS where rackctl has SSH access, versions read back against the targets;
6. uncordon, back from ``maintenance``.

One journal step per node and component (``update:<component>:<target>``): a completed step is never run
again; a step left started has its job id recorded, and a component whose version already reads at target
is not flashed. A job still in the iDRAC's queue for the component (Scheduled or Running) is followed
instead of starting another: nothing is flashed twice. A node that fails stays cordoned and in
``maintenance`` with the cause recorded; once ``failure_threshold`` nodes have failed no new batch starts.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from bootstrap.firmware.components import installed_versions, job_matches
from bootstrap.firmware.health import OsHealth
from bootstrap.firmware.plan import ComponentStep, FirmwarePlan, NodePlan, reached
from bootstrap.inventory.models import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal, StepHandle
from bootstrap.rollout import Batch, Rollout, RolloutNode
from bootstrap.rollout.gate import NodeGate
from bootstrap.rollout.report import (
    NodeOutcome,
    RolloutReport,
    end_reason,
    mark_unstarted,
    ready_for_rollout,
    run_batches,
)
from redfish_tools import errors as E
from redfish_tools.connection import BmcConnection, BmcTarget, ConnectionPolicy
from redfish_tools.firmware import firmware_inventory, install_from_repository, start_update, update_jobs
from redfish_tools.fleet import BmcResult, run_fleet
from redfish_tools.jobs import Job, wait_job
from redfish_tools.lc import wait_lc_ready
from redfish_tools.power import power_state, set_power
from redfish_tools.resources import Service
from redfish_tools.tasks import TaskOutcome

STAGE = "firmware"
#: The statuses of a step an earlier run left without an outcome.
OPEN = ("started", "interrupted")


class FirmwareUpdateFailed(E.RedfishError):
    """A node's firmware did not reach its targets (the message names each component and why)."""


@dataclass(frozen=True)
class ApplySettings:
    """Waiting: job and reboot timeouts, how often to poll."""

    poll_s: float = 5.0
    job_timeout_s: float = 3600.0
    lc_timeout_s: float = 900.0
    power_timeout_s: float = 900.0
    node_deadline_s: float = 4 * 3600.0


@dataclass
class FirmwareNodeOutcome(NodeOutcome):
    """What the rollout did on one node: the shared outcome plus each component's result (``records``:
    cordon, reboot, os, uncordon)."""

    components: list[dict[str, Any]] = field(default_factory=list)

    def details(self) -> dict[str, Any]:
        return {"components": self.components}


def open_steps(journal: Journal, node: str) -> dict[str, Any]:
    """The firmware steps of ``node`` (current epoch) whose latest record is no outcome: key -> record."""
    epoch = journal.status(node).epoch
    last = {s.step: s for s in journal.steps(node=node) if s.stage == STAGE and s.epoch == epoch}
    return {key: record for key, record in last.items() if record.status in OPEN}


def nothing_to_do(plan: NodePlan) -> str:
    """Why a node needs no work, in words (a downgrade not asked for named)."""
    if not plan.steps:
        return "no baseline for its model"
    above = [
        f"{s.component} {'/'.join(sorted(set(s.installed)))} > {s.target}"
        for s in plan.steps
        if s.action == "above-target"
    ]
    if above:
        return f"at or above the baseline; not downgraded ({', '.join(above)}): --allow-downgrade rolls back"
    return "at the baseline"


def step_key(step: ComponentStep) -> str:
    """The journal key of one component update."""
    return f"update:{step.component}:{step.target}"


def left_by_rollout(journal: Journal, node: str) -> bool:
    """``node``'s last move was a firmware rollout's (into ``maintenance``): a later rollout settles it."""
    history = journal.history(node)
    return bool(history) and history[-1].cause.startswith("firmware rollout")


class FirmwareRollout:
    """Runs a :class:`FirmwarePlan` batch by batch (see the module docstring)."""

    def __init__(
        self,
        inventory: Inventory,
        plan: FirmwarePlan,
        journal: Journal,
        run_id: int,
        targets: Mapping[str, BmcTarget],
        *,
        gate: NodeGate,
        conn_policy: ConnectionPolicy | None = None,
        os_health: OsHealth | None = None,
        settings: ApplySettings | None = None,
        on_event: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.inventory = inventory
        self.plan = plan
        self.journal = journal
        self.run_id = run_id
        self.targets = dict(targets)
        self.gate = gate
        self.settings = settings or ApplySettings()
        self.conn_policy = replace(conn_policy or ConnectionPolicy(), deadline_s=self.settings.node_deadline_s)
        self.os_health = os_health
        self.on_event = on_event or (lambda _kind, _node, _text: None)
        self.outcomes = {n.node: FirmwareNodeOutcome(n.node, batch=n.batch) for n in plan.nodes}
        self._lock = threading.Lock()
        self._repo_installed: set[str] = set()
        self._interrupted: set[str] = set()
        self._rollout: Rollout | None = None

    # -- the rollout -------------------------------------------------------------------------------
    def run(self) -> RolloutReport[FirmwareNodeOutcome]:
        """Roll out; returns the report (never raises for a node's failure)."""
        names = [n.node for n in self.plan.nodes]
        self.journal.register_nodes(names, run_id=self.run_id)
        selected = {n.node: n for n in self.plan.nodes}
        for plan in self.plan.nodes:
            if plan.error:
                self.outcomes[plan.node].status, self.outcomes[plan.node].message = "failed", plan.error
            # before readiness is read: a node an earlier run left in maintenance and now at the baseline
            # is released first, so the budget counts only the nodes really down now
            self._settle(plan)
            if not plan.needs_work and not plan.error:
                self.outcomes[plan.node].status = "nothing-to-do"
                self.outcomes[plan.node].message = nothing_to_do(plan)
        fleet = [
            RolloutNode(
                n.hostname,
                control_plane=n.is_control_plane,
                ready=self.ready(n.hostname),
                needs_work=n.hostname in selected
                and selected[n.hostname].needs_work
                and not selected[n.hostname].error,
            )
            for n in self.inventory.nodes
        ]
        rollout = self._rollout = Rollout(fleet, self.plan.policy)
        run_batches(rollout, self.outcomes, self._run_batch, self.on_event)
        return self._report(rollout)

    def _run_batch(self, batch: Batch) -> list[tuple[str, bool]]:
        """The batch's nodes through :func:`run_fleet` (at most 2 requests in flight per BMC)."""
        results = run_fleet(
            [self.targets[n] for n in batch.nodes],
            functools.partial(self._node, batch=batch),
            policy=self.conn_policy,
            progress=self._node_finished,
        )
        return [(result.name, result.ok) for result in results]

    def _settle(self, plan: NodePlan) -> None:
        """Close what an earlier (killed or interrupted) run left open, by what the BMC reads now: a component
        step left open that now reads at target; on a node that needs no work, every other step left open
        (a reboot, an OS check) and the ``maintenance`` it was left in."""
        if plan.error:
            return
        for step in plan.steps:
            last = self.journal.last_step(plan.node, STAGE, step_key(step))
            if step.action in ("at-target", "above-target") and last is not None and last.status in OPEN:
                detail = {**last.detail, "result": "already at target", "after": list(step.installed)}
                detail.pop("error", None)
                self.journal.record_step(
                    self.run_id, plan.node, STAGE, step_key(step), status="completed", destructive=True, detail=detail
                )
        if not plan.needs_work:
            for key, last in open_steps(self.journal, plan.node).items():
                detail = {**last.detail, "result": "closed: the node reads at the baseline (an earlier run's step)"}
                detail.pop("error", None)
                self.journal.record_step(
                    self.run_id, plan.node, STAGE, key, status="completed", destructive=True, detail=detail
                )
        status = self.journal.status(plan.node)
        if not plan.needs_work and status.state is NodeState.MAINTENANCE and left_by_rollout(self.journal, plan.node):
            with self._recorded(plan.node, "uncordon") as handle:
                handle.detail["gate"] = self.gate.uncordon(plan.node)
                self.outcomes[plan.node].records["uncordon"] = handle.detail["gate"]
            back = status.left_from() or NodeState.REGISTERED
            self.journal.transition(
                plan.node, back, "firmware rollout done: at the baseline (an earlier run's jobs)", run_id=self.run_id
            )

    def ready(self, node: str) -> bool:
        """Ready for the scheduler (:func:`ready_for_rollout`)."""
        return ready_for_rollout(self.gate, self.journal, node)

    def _node_finished(self, result: BmcResult[Any]) -> None:
        outcome = self.outcomes[result.name]
        if result.name in self._interrupted or (result.error or {}).get("kind") == "cancelled":
            outcome.status = "interrupted"
            outcome.message = "interrupted (Ctrl-C) mid-update; its iDRAC jobs go on, the next run follows them"
        elif result.ok:
            outcome.status = "done"
            outcome.message = outcome.message or "at the baseline"
        else:
            outcome.status = "failed"
            outcome.message = str((result.error or {}).get("message") or "failed")
        kind = {"done": "done", "interrupted": "stopped"}.get(outcome.status, "failed")
        self.on_event(kind, result.name, outcome.message)

    def interrupted_report(self, resume: str) -> RolloutReport[FirmwareNodeOutcome]:
        """After Ctrl-C stopped :meth:`run`: each node's result so far (``interrupted`` for those cut
        mid-update, ``pending`` for those never started), and ``resume`` named in the reason."""
        active = set(self._rollout.active) if self._rollout else set()
        for outcome in self.outcomes.values():
            if outcome.node in active and outcome.status == "pending":
                outcome.status = "interrupted"
                outcome.message = "interrupted (Ctrl-C) mid-update; the next run follows its iDRAC jobs"
            elif outcome.status == "pending":
                outcome.batch = None
                outcome.message = "not started: the rollout was interrupted (Ctrl-C)"
        nodes = [self.outcomes[n.node] for n in self.plan.nodes]
        cut = sorted(n.node for n in nodes if n.status == "interrupted")
        reason = "interrupted (Ctrl-C)" + (f" while {', '.join(cut)} updated" if cut else "")
        batches = self._rollout.batches if self._rollout else []
        return RolloutReport(nodes, batches, stopped=True, reason=f"{reason}; run {resume} again to resume")

    def _report(self, rollout: Rollout) -> RolloutReport[FirmwareNodeOutcome]:
        mark_unstarted(rollout, self.outcomes)
        reason = end_reason(
            rollout,
            rollout.failures,
            rerun="`rackctl firmware apply`",
            done="every selected node is at the baseline",
            rerun_if_failed=False,
        )
        nodes = [self.outcomes[n.node] for n in self.plan.nodes]
        return RolloutReport(nodes, rollout.batches, rollout.stopped, reason)

    # -- one node ----------------------------------------------------------------------------------
    def _step(self, node: str, key: str, *, again: bool = False) -> StepHandle:
        return self.journal.step(self.run_id, node, STAGE, key, destructive=True, force=again)

    @contextmanager
    def _recorded(self, node: str, key: str) -> Iterator[StepHandle]:
        """A step run again each time (cordon, reboot...); cut by Ctrl-C it is journalled ``interrupted``
        (for the next run to close), not ``failed``."""
        handle = self._step(node, key, again=True)
        handle.__enter__()
        try:
            yield handle
        except E.Cancelled:
            self._interrupted.add(node)
            handle.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
            raise
        except BaseException as exc:
            handle.__exit__(type(exc), exc, exc.__traceback__)
            raise
        handle.__exit__(None, None, None)

    def _node(self, conn: BmcConnection, batch: Batch) -> dict[str, Any]:
        try:
            return self._update_node(conn, batch)
        except FirmwareUpdateFailed:
            raise
        except Exception as exc:  # recorded, then the node's failure (never a crash of the rollout)
            text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            with self._recorded(conn.target.name, "uncordon") as step:
                step.detail["gate"] = f"left cordoned: {text}"
                self.outcomes[conn.target.name].records["uncordon"] = step.detail["gate"]
            raise

    def _update_node(self, conn: BmcConnection, batch: Batch) -> dict[str, Any]:
        name = conn.target.name
        plan = self.plan.node(name)
        outcome = self.outcomes[name]
        status = self.journal.status(name)
        if status.state is not NodeState.MAINTENANCE:
            self.journal.transition(
                name, NodeState.MAINTENANCE, f"firmware rollout, batch {batch.index}", run_id=self.run_id
            )
        with self._recorded(name, "cordon") as step:
            outcome.records["cordon"] = step.detail["gate"] = self.gate.cordon(name)
        svc = Service(conn)
        self._wait_lc(conn, svc)
        installed = installed_versions(firmware_inventory(conn, svc))
        problems: list[str] = []
        for step_plan in plan.updates:
            if step_plan.reboot == "idrac-reset":
                problems += self._idrac(conn, svc, step_plan, installed)
        host = [s for s in plan.updates if s.reboot == "host-reboot"]
        if host:
            installed = installed_versions(firmware_inventory(conn, svc))
            problems += self._host(conn, svc, host, installed)
        if problems:
            why = "interrupted" if name in self._interrupted else "firmware update failed"
            with self._recorded(name, "uncordon") as step:
                outcome.records["uncordon"] = step.detail["gate"] = f"left cordoned: {why}"
            raise FirmwareUpdateFailed("; ".join(problems), bmc=name)
        with self._recorded(name, "uncordon") as step:
            outcome.records["uncordon"] = step.detail["gate"] = self.gate.uncordon(name)
        left = self.journal.status(name).left_from() or NodeState.REGISTERED
        self.journal.transition(name, left, "firmware rollout done: at the baseline", run_id=self.run_id)
        outcome.message = f"{len(plan.updates)} component(s) at the baseline"
        return {"components": outcome.components}

    def _component(self, node: str, step: ComponentStep, **data: Any) -> None:
        with self._lock:
            self.outcomes[node].components.append(
                {"component": step.component, "target": step.target, "image": step.source, **data}
            )

    def _existing_job(self, conn: BmcConnection, svc: Service, step: ComponentStep, handle: StepHandle) -> Job | None:
        """A job of an earlier attempt to follow: the one the journal recorded, else one for the component
        still queued (a run killed between the POST and its record)."""
        jobs = update_jobs(conn, svc)
        recorded = (handle.previous.detail.get("job") if handle.previous else None) if handle.interrupted else None
        for job in jobs:
            if recorded and job.id == recorded and job.state != "Failed":
                return job
        for job in jobs:
            if job.pending and job_matches(step.component, job.name):
                return job
        return None

    def _start(self, conn: BmcConnection, svc: Service, step: ComponentStep, handle: StepHandle, when: str) -> str:
        """Follow an earlier job for this component, or start one; returns the job id (recorded)."""
        node = conn.target.name
        existing = self._existing_job(conn, svc, step, handle)
        if existing is not None:
            how = "from the repository" if node in self._repo_installed else "followed the job of an earlier run"
            job_id = existing.id
        elif step.source is not None and step.source.startswith("repository:"):
            job_id, how = self._repository_job(conn, svc, step), "from the repository"
        else:
            if step.source is None:
                raise FirmwareUpdateFailed(f"{step.component}: no image to flash", bmc=node)
            try:
                task = start_update(conn, step.source, apply_time=when)
            except E.TransportError:
                again = self._existing_job(conn, svc, step, handle)
                if again is None:
                    raise
                task = again.id
            job_id, how = task.rstrip("/").rsplit("/", 1)[-1], "started"
        handle.detail.update(job=job_id, image=step.source, how=how)
        self.journal.record_step(
            self.run_id, node, STAGE, handle.key, status="started", destructive=True, detail=dict(handle.detail)
        )
        return job_id

    def _repository_job(self, conn: BmcConnection, svc: Service, step: ComponentStep) -> str:
        """The job the node's repository (InstallFromRepository, called once per node) made for ``step``."""
        node = conn.target.name
        if node not in self._repo_installed:
            entry = self.inventory.node(node)
            baseline = self.inventory.firmware.baseline.get(entry.model) if entry else None
            if baseline is None or baseline.repository is None:
                raise FirmwareUpdateFailed(f"{step.component}: no repository for this model", bmc=node)
            install_from_repository(conn, baseline.repository.url, baseline.repository.catalog, svc)
            self._repo_installed.add(node)
        for job in update_jobs(conn, svc):
            if job.pending and job_matches(step.component, job.name):
                return job.id
        raise FirmwareUpdateFailed(
            f"{step.component}: the repository's catalog offers no update to {step.target} for this node", bmc=node
        )

    def _idrac(
        self, conn: BmcConnection, svc: Service, step: ComponentStep, installed: dict[str, list[str]]
    ) -> list[str]:
        node = conn.target.name
        handle = self._begin(node, step, installed)
        if handle is None:
            return []
        try:
            job_id = self._start(conn, svc, step, handle, "Immediate")
            self.on_event("job", node, f"{step.component} -> {step.target}: job {job_id}")
            done = self._wait_job(conn, svc, job_id)
            if not done.ok:
                raise FirmwareUpdateFailed(f"job {job_id} ended {done.state}: {done.message}", bmc=node)
            self._wait_lc(conn, svc)
            after = installed_versions(firmware_inventory(conn, svc)).get(step.component, [])
            if not reached(step, after):
                raise FirmwareUpdateFailed(f"job {job_id} completed but the version reads {after}", bmc=node)
        except E.RedfishError as exc:
            return [self._fail(node, step, handle, exc)]
        except Exception as exc:
            handle.__exit__(type(exc), exc, exc.__traceback__)
            raise
        handle.detail.update(result="updated", after=after)
        handle.__exit__(None, None, None)
        self._component(node, step, result="updated", job=job_id, after=after)
        return []

    def _begin(self, node: str, step: ComponentStep, installed: dict[str, list[str]]) -> StepHandle | None:
        """The component's journal step, entered; None when there is nothing to do (done earlier, or already at
        its target: recorded so)."""
        handle = self._handle(node, step, installed)
        if handle is None:
            return None
        handle.__enter__()
        if reached(step, installed.get(step.component)):
            handle.detail["result"] = "already at target"
            self._component(node, step, result="already at target")
            handle.__exit__(None, None, None)
            return None
        return handle

    def _handle(self, node: str, step: ComponentStep, installed: dict[str, list[str]]) -> StepHandle | None:
        """The journal step of one component, or None when it completed before and the BMC agrees. The live
        state decides: a step journalled done whose component reads off its target now (a board swap, a
        rollback) is run again."""
        handle = self._step(node, step_key(step))
        if not handle.already_done:
            return handle
        now = installed.get(step.component)
        if reached(step, now):
            self._component(node, step, result="done earlier")
            return None
        handle = self._step(node, step_key(step), again=True)
        handle.detail["again"] = f"journalled done, but reads {'/'.join(now or []) or 'nothing'}"
        return handle

    def _host(
        self, conn: BmcConnection, svc: Service, steps: list[ComponentStep], installed: dict[str, list[str]]
    ) -> list[str]:
        """Stage every host component, one reboot, follow the jobs, read back."""
        node = conn.target.name
        problems: list[str] = []
        staged: dict[str, tuple[ComponentStep, StepHandle, str]] = {}
        for step in steps:
            handle = self._begin(node, step, installed)
            if handle is None:
                continue
            try:
                job_id = self._start(conn, svc, step, handle, "OnReset")
                self.on_event("job", node, f"{step.component} -> {step.target}: job {job_id} (staged)")
                staged[step.component] = (step, handle, job_id)
            except E.RedfishError as exc:
                problems.append(self._fail(node, step, handle, exc))
        if not staged:
            return problems
        try:
            self._reboot(conn, svc, staged)
        except E.RedfishError as exc:
            for step, handle, _job in staged.values():
                problems.append(self._fail(node, step, handle, exc))
            return problems
        try:
            after = installed_versions(firmware_inventory(conn, svc))
        except E.Cancelled as exc:
            return problems + [self._fail(node, step, handle, exc) for step, handle, _job in staged.values()]
        for component, (step, handle, job_id) in staged.items():
            try:
                outcome = self._wait_job(conn, svc, job_id)
            except E.Cancelled as exc:
                problems.append(self._fail(node, step, handle, exc))
                continue
            if not outcome.ok:
                bad = FirmwareUpdateFailed(f"job {job_id} ended {outcome.state}: {outcome.message}", bmc=node)
                problems.append(self._fail(node, step, handle, bad))
                continue
            now = after.get(component, [])
            if not reached(step, now):
                bad = FirmwareUpdateFailed(f"job {job_id} completed but the version reads {now}", bmc=node)
                problems.append(self._fail(node, step, handle, bad))
                continue
            handle.detail.update(result="updated", after=now)
            handle.__exit__(None, None, None)
            self._component(node, step, result="updated", job=job_id, after=now)
        return problems

    def _wait_lc(self, conn: BmcConnection, svc: Service) -> None:
        """Wait for the Lifecycle Controller to be Ready."""
        wait_lc_ready(conn, svc, timeout=self.settings.lc_timeout_s, poll=self.settings.poll_s)

    def _wait_job(self, conn: BmcConnection, svc: Service, job_id: str) -> TaskOutcome:
        """Follow job ``job_id`` to its end (a failed job is returned, not raised)."""
        return wait_job(
            conn, job_id, svc, timeout=self.settings.job_timeout_s, poll=self.settings.poll_s, raise_on_failure=False
        )

    def _fail(self, node: str, step: ComponentStep, handle: StepHandle, exc: E.RedfishError) -> str:
        if isinstance(exc, E.Cancelled):  # Ctrl-C: its job (if any) goes on on the iDRAC; the next run follows it
            self._interrupted.add(node)
            handle.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
            self._component(node, step, result="interrupted", job=handle.detail.get("job"))
            return f"{step.component}: interrupted"
        handle.__exit__(type(exc), exc, None)
        self._component(node, step, result="failed", error=exc.reason)
        return f"{step.component}: {exc.reason}"

    def _reboot(
        self, conn: BmcConnection, svc: Service, staged: dict[str, tuple[ComponentStep, StepHandle, str]]
    ) -> None:
        """One reboot applies every staged job (skipped when none is still waiting for it), then wait for the
        jobs, the BMC and the OS."""
        node = conn.target.name
        outcome = self.outcomes[node]
        ids = {job_id for _s, _h, job_id in staged.values()}
        waiting = [j for j in update_jobs(conn, svc) if j.id in ids and j.state == "Scheduled"]
        with self._recorded(node, "reboot") as step:
            if waiting:
                before = power_state(conn, svc)
                action = "on" if before == "Off" else "graceful-restart"
                result = set_power(conn, action, timeout=self.settings.power_timeout_s, poll=self.settings.poll_s)
                text = f"{'powered on' if action == 'on' else 'rebooted'} to apply {len(waiting)} staged job(s)"
                self.on_event("reboot", node, text)
                step.detail.update(action=action, before=result.before, after=result.after)
            else:
                text = "no reboot: the staged jobs already ran"
            outcome.records["reboot"] = step.detail["what"] = text
        for job_id in sorted(ids):
            self._wait_job(conn, svc, job_id)
        self._wait_lc(conn, svc)
        with self._recorded(node, "os-health") as step:
            try:
                text = self.os_health.wait(node) if self.os_health else "no SSH access: OS not checked"
            except TimeoutError as exc:
                raise FirmwareUpdateFailed(str(exc), bmc=node) from exc
            outcome.records["os"] = step.detail["what"] = text
