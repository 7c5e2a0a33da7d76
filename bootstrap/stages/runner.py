"""Run the bootstrap stages in order for the selected nodes, journalled and resumable.

Per stage and node the runner decides: run, skip (the node is past the stage, or the journal shows the
stage completed in the node's current epoch), or blocked (the node has not reached the state the stage
needs). A node past the stage runs it again where the stage's cluster-wide part has drifted from the
inventory (:meth:`~bootstrap.stages.base.Stage.cluster_drift`: a Helm release added or changed); the plan and
the progress say so. It stops at the first stage that is not implemented (exit 4), that fails on any node (exit 1,
after the other nodes finished that stage), or on Ctrl-C (exit 130); ``rackctl up`` again resumes.

Rendered, not applied: a stage whose result says it only rendered and validated (``applied`` false per
node, see :class:`~bootstrap.stages.base.Rendered`) is journalled ``rendered`` per node (the stage step's
status; never ``completed``, so the next ``up`` runs it again), moves no node, and is shown as
"rendered + validated, not applied: <why>" with its artefact directory. The run goes on: a later stage
that needs an applied predecessor and declares ``renders_when_blocked`` still renders for the nodes it
cannot apply to (``ctx.cannot_apply``). A run with such a stage and no failure ends ``not_applied``, exit 5
(``EXIT_NOT_APPLIED``): not a brought-up cluster.

Operator environment problems versus node failures: a stage may define ``check_environment(ctx)``, which
looks only at this machine (env vars, password files and their mode, CA bundles) and raises
``OperatorEnvironmentError``. The runner calls it for every selected stage, with the selected nodes the
stage does not skip, *before* any node is touched (before failed nodes are retried, before the destructive
prompt, before any node moves to a stage's ``during`` state). Such an error, or one a stage raises later,
ends the run with exit code 2, the run recorded ``failed`` with the problems, and no node transition:
nodes are marked ``failed`` only from a stage's per-node results (``NodeResult.ok`` false).

Every message leaving the runner (progress, journal, outcome, traceback files) goes through
``redfish_tools.secrets.redact``, which masks the registered secret values (BMC passwords, tokens).
"""

from __future__ import annotations

import errno
import os
import tempfile
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bootstrap.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_APPLIED,
    EXIT_NOT_IMPLEMENTED,
    EXIT_OK,
    InvalidInput,
    NotImplementedStage,
    Problem,
    RackctlError,
)
from bootstrap.fsutil import atomic_write_text
from bootstrap.inventory.environment_checks import OperatorEnvironmentError
from bootstrap.journal.run import journal_run
from bootstrap.journal.states import MAIN_LINE, NodeState, rank
from bootstrap.journal.store import JOURNAL_FILE, STAGE_STEP, STEP_RENDERED, Journal
from bootstrap.selection import check_stages, match_nodes
from bootstrap.stages.base import (
    NOT_APPLIED,
    STAGE_ORDER,
    NodeResult,
    NotAppliedReporter,
    NullProgress,
    PlannedAction,
    ProgressReporter,
    RunningTaskReporter,
    RunOptions,
    Stage,
    StageContext,
    StageInterrupted,
    StageResult,
    TaskReporter,
    get_stage,
)
from bootstrap.stages.insecure import insecure_warning
from redfish_tools.errors import RedfishError
from redfish_tools.secrets import redact


@dataclass
class Selection:
    """What one ``up`` or ``plan`` acts on."""

    stages: list[str]
    nodes: list[str]
    #: stages re-run even when the journal says they completed (``--from`` and later, or all with --force)
    forced: set[str] = field(default_factory=set)


@dataclass
class StageOutcome:
    """What happened to one stage in a run."""

    name: str
    # completed | rendered | skipped | failed | not_implemented | interrupted | cancelled | not_run
    status: str
    message: str = ""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: true when the stage ran and applied, false when it only rendered + validated, None when it did not run
    applied: bool | None = None
    #: where a rendered stage's artefacts are
    artefacts: str | None = None
    #: what a cluster-wide stage measured (``StageResult.data``); in the output only when there is some
    data: dict[str, Any] = field(default_factory=dict)
    #: the stage's own words without its failed nodes' (those are in ``nodes``): what the human view shows, so
    #: that each node's error is printed once (not in the JSON, whose ``message`` keeps everything)
    summary: str | None = None
    #: why the stage ran again on nodes already past it (:meth:`Stage.cluster_drift`); empty when it did not
    rerun: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "status": self.status,
            "applied": self.applied,
            "artefacts": self.artefacts,
            "message": self.message,
            "nodes": self.nodes,
        }
        return out | ({"data": self.data} if self.data else {}) | ({"rerun": self.rerun} if self.rerun else {})


@dataclass
class RunOutcome:
    """The result of ``rackctl up``."""

    run_id: int | None
    status: str  # completed | not_applied | failed | not_implemented | interrupted | cancelled
    exit_code: int
    message: str
    stages: list[StageOutcome]
    nodes: dict[str, str]
    #: said once per run: BMCs reached without TLS verification
    warnings: list[str] = field(default_factory=list)
    #: the problems of a stage that failed on bad input (each naming the field, the value and the fix)
    problems: list[dict[str, Any]] = field(default_factory=list)
    #: ``message`` without the failed nodes' errors (each said once, per node, by the human view; not in the JSON)
    summary: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def not_applied(self) -> list[str]:
        """The stages of this run that rendered and validated without applying."""
        return [s.name for s in self.stages if s.status == "rendered"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "run": self.run_id,
            "status": self.status,
            "exit_code": self.exit_code,
            "message": self.message,
            "not_applied": self.not_applied,
            "stages": [s.as_dict() for s in self.stages],
            "nodes": self.nodes,
            "warnings": self.warnings,
            **({} if self.ok or self.status == "not_applied" else {"error": self.message}),
            **({"errors": self.problems} if self.problems else {}),
        }


def select(
    inventory: Any,
    *,
    stages: Sequence[str] = (),
    limit: Sequence[str] = (),
    from_stage: str | None = None,
    force: bool = False,
) -> Selection:
    """Validate ``--stages``, ``--from`` and ``--limit`` (parsed by :mod:`bootstrap.selection`).

    Empty ``stages``/``limit`` mean every stage/node (the option was not given); unknown names are refused.
    """
    check_stages([*stages, *([from_stage] if from_stage else [])], STAGE_ORDER)
    nodes = match_nodes(inventory, limit)
    chosen = [s for s in STAGE_ORDER if not stages or s in stages]
    forced: set[str] = set(chosen) if force else set()
    if from_stage:
        start = STAGE_ORDER.index(from_stage)
        chosen = [s for s in chosen if STAGE_ORDER.index(s) >= start]
        forced |= set(chosen)
    if not chosen:
        raise InvalidInput(
            f"--stages {','.join(stages)} with --from {from_stage} selects no stage",
            problems=[
                Problem(
                    "--from", f"{from_stage!r} comes after every stage in --stages", "drop --from or widen --stages"
                )
            ],
        )
    return Selection(chosen, nodes, forced)


@dataclass(frozen=True)
class Decision:
    """Whether a stage runs on a node, and why not."""

    action: str  # run | skip | blocked
    reason: str = ""
    #: for ``blocked``: the state the node has not reached (``None`` when blocked for another reason)
    needs: NodeState | None = None
    #: for ``run``: the node is past the stage, which runs again for its cluster-wide drift
    again: bool = False


def decide(
    stage: Stage,
    node: str,
    state: NodeState,
    journal: Journal,
    forced: bool,
    *,
    options: RunOptions | None = None,
    drift: str | None = None,
) -> Decision:
    """Run, skip or blocked for ``stage`` on ``node`` in ``state`` (``options``: the run's, for a stage that
    settles nodes in maintenance when run with them; ``drift``: what the stage's cluster-wide part has not made
    as the inventory wants, which runs it again on a node past it)."""
    life = stage.get_lifecycle()
    if state is NodeState.MAINTENANCE:
        if options is not None and stage.settles_maintenance(options, journal, node):
            return Decision("run", "in maintenance: the stage settles it first")
        return Decision("skip", "in maintenance")
    if state is NodeState.FAILED:
        return Decision("blocked", "failed (it is retried from the state it failed in at the next run)")
    if not forced:
        if life.done_when is not None and rank(state) >= rank(life.done_when):
            return (
                Decision("run", f"already {state.value}; {drift}", again=True)
                if drift
                else Decision("skip", f"already {state.value}")
            )
        done = None if stage.reconciles else journal.stage_done(node, stage.name)
        if done is not None and drift:
            return Decision("run", f"completed in run {done.run}; {drift}", again=True)
        if done is not None:
            return Decision("skip", f"completed in run {done.run} at {done.at}")
    if rank(state) < rank(life.requires):
        return Decision(
            "blocked",
            f"node is {state.value}; stage {stage.name!r} needs {life.requires.value} (run the earlier stages first)",
            needs=life.requires,
        )
    return Decision("run")


def rerun_for_drift(decisions: dict[str, Decision]) -> list[str]:
    """The nodes a stage runs on again, past it, because of its cluster-wide drift."""
    return [n for n, d in decisions.items() if d.again]


def render_only_nodes(stage: Stage, decisions: dict[str, Decision], rendered_before: Sequence[str]) -> dict[str, str]:
    """Blocked nodes a ``renders_when_blocked`` stage still renders for, each with why it cannot apply there."""
    if not stage.renders_when_blocked:
        return {}
    after = f" ({', '.join(rendered_before)} {NOT_APPLIED})" if rendered_before else ""
    return {
        node: f"the {d.reason.split(';')[0]}; applying {stage.name} needs it {d.needs.value}{after}"
        for node, d in decisions.items()
        if d.action == "blocked" and d.needs is not None
    }


def plan(inventory: Any, state_dir: Path, selection: Selection, options: RunOptions | None = None) -> dict[str, Any]:
    """What ``up`` would do, stage by stage and node by node; reads the journal, writes nothing."""
    options = options or RunOptions()
    with Journal(state_dir, readonly=True) as journal:
        statuses = journal.nodes()
        projected: dict[str, NodeState] = {}
        for node in selection.nodes:
            status = statuses.get(node)
            if status is None:
                projected[node] = NodeState.REGISTERED
            elif status.state is NodeState.FAILED and status.failed_from is not None:
                projected[node] = status.failed_from  # up retries it from there
            else:
                projected[node] = status.state
        stages_out: list[dict[str, Any]] = []
        stops_at: str | None = None
        not_applied: list[str] = []
        for name in selection.stages:
            stage = get_stage(name)
            forced = name in selection.forced
            reached = stops_at is None
            drift = stage.cluster_drift(inventory, Path(state_dir), journal, options)
            decisions = {
                n: decide(stage, n, projected[n], journal, forced, options=options, drift=drift)
                for n in selection.nodes
            }
            cannot_apply = render_only_nodes(stage, decisions, not_applied)
            to_run = [n for n, d in decisions.items() if d.action == "run" or n in cannot_apply]
            actions = [
                PlannedAction(name, n, d.action, skip=d.reason).as_dict()
                for n, d in decisions.items()
                if d.action != "run" and n not in cannot_apply
            ]
            again = rerun_for_drift(decisions)
            if again:
                actions.insert(0, PlannedAction(name, None, f"run again on {', '.join(again)}: {drift}").as_dict())
            if to_run:
                ctx = StageContext(
                    name,
                    inventory,
                    to_run,
                    journal,
                    Path(state_dir),
                    0,
                    options,
                    forced=forced,
                    cannot_apply=cannot_apply,
                )
                actions = [a.as_dict() for a in stage.plan(ctx)] + actions
                if not stage.implemented and stops_at is None:
                    stops_at = name
                if stage.implemented and (not stage.applies_in(ctx) or cannot_apply):
                    not_applied.append(name)
                reaches = stage.get_lifecycle().reaches if stage.applies_in(ctx) else None
                for n in to_run:
                    if reaches is not None and n not in cannot_apply and rank(projected[n]) < rank(reaches):
                        projected[n] = reaches
            stages_out.append(
                {
                    "name": name,
                    "description": stage.description,
                    "implemented": stage.implemented,
                    "applies": stage.applies_in(ctx) if to_run else stage.applies,
                    "destructive": stage.destructive,
                    "forced": forced,
                    "reached": reached,
                    "nodes_to_run": to_run,
                    "not_applied_on": cannot_apply,
                    "actions": actions,
                }
            )
        current = {n: (statuses[n].state.value if n in statuses else "unregistered") for n in selection.nodes}
    return {"ok": True, "stops_at": stops_at, "not_applied": not_applied, "stages": stages_out, "nodes": current}


def ensure_writable_state_dir(state_dir: Path) -> None:
    """Refuse (exit 2) a state directory that cannot be written, before any BMC or node is contacted."""
    state_dir = Path(state_dir)
    journal = state_dir / JOURNAL_FILE
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=state_dir, prefix=".rackctl-write-check-"):
            pass
        if journal.exists() and not os.access(journal, os.W_OK):
            raise PermissionError(errno.EACCES, "the journal file is read-only", str(journal))
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.EACCES and exc.strerror:
            reason = exc.strerror
        raise InvalidInput(
            f"the state directory {state_dir} is not writable ({reason})",
            problems=[
                Problem(
                    "--state-dir",
                    f"{state_dir}: {reason}",
                    "pass --state-dir (or RACKCTL_STATE_DIR) a writable directory, or fix its permissions or "
                    "mount; a journal already there is intact and `rackctl journal show` still reads it",
                )
            ],
        ) from None


class RedactingProgress:
    """Wraps a reporter so that no message a stage reports shows a password or token."""

    def __init__(self, inner: ProgressReporter) -> None:
        self.inner = inner

    def stage_started(self, stage: str, nodes: Sequence[str]) -> None:
        self.inner.stage_started(stage, nodes)

    def node_done(self, stage: str, node: str, ok: bool, message: str = "") -> None:
        self.inner.node_done(stage, node, ok, redact(message))

    def stage_finished(self, stage: str, ok: bool, message: str = "") -> None:
        self.inner.stage_finished(stage, ok, redact(message))

    def log(self, message: str) -> None:
        self.inner.log(redact(message))

    def task_done(self, stage: str, node: str, task: str, status: str, done: int) -> None:
        if isinstance(self.inner, TaskReporter):
            self.inner.task_done(stage, node, redact(task), status, done)

    def task_started(self, stage: str, node: str, task: str, done: int) -> None:
        if isinstance(self.inner, RunningTaskReporter):
            self.inner.task_started(stage, node, redact(task), done)

    def stage_not_applied(self, stage: str, message: str) -> None:
        if isinstance(self.inner, NotAppliedReporter):
            self.inner.stage_not_applied(stage, redact(message))
        else:
            self.inner.stage_finished(stage, True, redact(message))


class Runner:
    """Runs one ``rackctl up``."""

    def __init__(
        self,
        inventory: Any,
        state_dir: Path,
        selection: Selection,
        *,
        options: RunOptions | None = None,
        progress: ProgressReporter | None = None,
        command: str = "up",
    ) -> None:
        self.inventory = inventory
        self.state_dir = Path(state_dir)
        self.selection = selection
        self.options = options or RunOptions()
        self.progress = RedactingProgress(progress or NullProgress())
        self.command = command
        self._outcomes: list[StageOutcome] = []

    def run(self) -> RunOutcome:
        """Run the selected stages; never raises for a stage's failure (see :class:`RunOutcome`)."""
        ensure_writable_state_dir(self.state_dir)
        warning = insecure_warning(self.inventory, self.selection.nodes, forced=self.options.insecure)
        if warning:
            self.progress.log(f"warning: {warning}")
        note = f" [warning: {warning}]" if warning else ""
        command = self.command + (" --insecure" if self.options.insecure else "")

        def failed(exc: BaseException) -> str:  # bad input or a refusal found mid-run: recorded, then shown
            return _describe(exc) + note if isinstance(exc, RackctlError) else ""

        with Journal(self.state_dir) as journal, journal_run(journal, command, describe=failed) as run:
            run_id = run.id
            journal.register_nodes([n.hostname for n in self.inventory.nodes], run_id=run_id)
            self._outcomes = []
            try:
                self._check_environment(journal, run_id)
                self._retry_failed(journal, run_id)
                outcome = self._run_stages(journal, run_id)
            except KeyboardInterrupt as exc:
                current = self._outcomes[-1].name if self._outcomes else "before the first stage"
                resume = "run `rackctl up` again to resume"
                if self._outcomes:
                    self._outcomes[-1].status = "interrupted"
                    if isinstance(exc, StageInterrupted):  # the stage's own word: who was cut, how to resume
                        _report_interrupted(self._outcomes[-1], exc.result)
                        resume = self._outcomes[-1].message or resume
                outcome = self._outcome(
                    journal, run_id, "interrupted", EXIT_INTERRUPTED, f"interrupted during {current}; {resume}"
                )
            run.end(outcome.status, outcome.message + note)
            outcome.warnings = [warning] if warning else []
            return outcome

    # -- internals ---------------------------------------------------------------------------------
    def _check_environment(self, journal: Journal, run_id: int) -> None:
        """Run the environment checks of the selected stages for the nodes they may run on (not skipped:
        a node an earlier stage of this run brings along counts); nothing is touched yet."""
        for name in self.selection.stages:
            stage = get_stage(name)
            check = getattr(stage, "check_environment", None)
            if check is None or not stage.implemented:
                continue
            forced = name in self.selection.forced
            nodes = [
                n
                for n in self.selection.nodes
                if decide(stage, n, self._state_after_retry(journal, n), journal, forced, options=self.options).action
                != "skip"
            ]
            if not nodes:
                continue
            ctx = StageContext(
                name, self.inventory, nodes, journal, self.state_dir, run_id, self.options, self.progress, forced=forced
            )
            try:
                check(ctx)
            except OperatorEnvironmentError as exc:
                self.progress.stage_finished(name, False, _describe(exc))
                raise

    @staticmethod
    def _state_after_retry(journal: Journal, node: str) -> NodeState:
        """The node's state once :meth:`_retry_failed` has run (a failed node: the state it failed in)."""
        status = journal.status(node)
        if status.state is NodeState.FAILED and status.failed_from is not None:
            return status.failed_from
        return status.state

    def _retry_failed(self, journal: Journal, run_id: int) -> None:
        """Failed selected nodes go back to the state they failed in: this run retries them."""
        for node in self.selection.nodes:
            status = journal.status(node)
            if status.state is NodeState.FAILED and status.failed_from is not None:
                journal.transition(node, status.failed_from, f"retried by run {run_id}", run_id=run_id, force=False)

    def _run_stages(self, journal: Journal, run_id: int) -> RunOutcome:
        for name in self.selection.stages:
            stage = get_stage(name)
            outcome = StageOutcome(name, "not_run")
            self._outcomes.append(outcome)
            forced = name in self.selection.forced
            nodes = self.selection.nodes
            drift = stage.cluster_drift(self.inventory, self.state_dir, journal, self.options)
            decisions = {
                n: decide(stage, n, journal.state(n), journal, forced, options=self.options, drift=drift) for n in nodes
            }
            cannot_apply = render_only_nodes(stage, decisions, self._rendered_stages()) if stage.implemented else {}
            again = rerun_for_drift(decisions)
            if again:
                outcome.rerun = f"run again on {', '.join(again)}: {drift}"
                self.progress.log(f"{name}: {outcome.rerun}")
            to_run = [n for n, d in decisions.items() if d.action == "run" or n in cannot_apply]
            for node, d in decisions.items():
                if d.action != "run" and node not in cannot_apply:
                    outcome.nodes[node] = {"status": d.action, "ok": d.action != "blocked", "message": d.reason}
            blocked = [n for n, d in decisions.items() if d.action == "blocked" and n not in cannot_apply]
            if not to_run and not blocked:
                outcome.status, outcome.message = "skipped", "nothing to do"
                continue
            if to_run and not stage.implemented:
                return self._stop_not_implemented(journal, run_id, name)
            if to_run:
                stop = self._run_one(journal, run_id, stage, to_run, outcome, cannot_apply=cannot_apply)
                if stop is not None:
                    return stop
            if blocked:
                outcome.status = "failed"
                outcome.message = "; ".join(f"{n}: {decisions[n].reason}" for n in blocked)
                outcome.summary = ""
                final = self._outcome(
                    journal,
                    run_id,
                    "failed",
                    EXIT_FAILED,
                    f"stage {name!r} cannot run on {', '.join(blocked)}: {outcome.message}; the run stopped here",
                )
                final.summary = f"stage {name!r} cannot run on {', '.join(blocked)}; the run stopped here"
                return final
        done = ", ".join(o.name for o in self._outcomes if o.status in ("completed", "skipped"))
        rendered = self._rendered_stages()
        if rendered:
            return self._outcome(
                journal,
                run_id,
                "not_applied",
                EXIT_NOT_APPLIED,
                f"completed: {done or 'none'}; {NOT_APPLIED}: {', '.join(rendered)} (the cluster is not brought "
                "up; each stage says why and where its artefacts are)",
            )
        return self._outcome(journal, run_id, "completed", EXIT_OK, f"completed: {done}")

    def _rendered_stages(self) -> list[str]:
        """The stages of this run so far that rendered and validated without applying."""
        return [o.name for o in self._outcomes if o.status == "rendered"]

    def _run_one(
        self,
        journal: Journal,
        run_id: int,
        stage: Stage,
        to_run: list[str],
        outcome: StageOutcome,
        *,
        cannot_apply: dict[str, str],
    ) -> RunOutcome | None:
        """Run one implemented stage; returns a final outcome when the run must stop."""
        name = stage.name
        ctx = StageContext(
            name,
            self.inventory,
            to_run,
            journal,
            self.state_dir,
            run_id,
            self.options,
            self.progress,
            forced=name in self.selection.forced,
            cannot_apply=dict(cannot_apply),
        )
        if stage.destructive and not ctx.confirm(
            f"Stage {name!r} can destroy data on {len(to_run)} node(s): {', '.join(to_run)}. Continue?"
        ):
            outcome.status, outcome.message = "cancelled", "not confirmed"
            return self._outcome(
                journal, run_id, "cancelled", EXIT_FAILED, f"stopped before stage {name!r}: not confirmed"
            )
        applies = stage.applies_in(ctx)
        if applies:  # a stage that only renders moves no node, not even to its ``during`` state
            self._enter_during(journal, run_id, stage, [n for n in to_run if n not in cannot_apply], forced=ctx.forced)
        self.progress.stage_started(name, to_run)
        try:
            result = stage.run(ctx)
        except NotImplementedStage as exc:
            outcome.message = exc.message
            return self._stop_not_implemented(journal, run_id, name, detail=exc.message)
        except OperatorEnvironmentError as exc:  # this machine's problem: no node is marked failed
            outcome.status, outcome.message = "failed", _describe(exc)
            self.progress.stage_finished(name, False, outcome.message)
            raise
        except (RackctlError, RedfishError) as exc:  # a user-facing error: a message, no traceback
            text = (
                _describe(exc) if isinstance(exc, RackctlError) else redact(getattr(exc, "message", None) or str(exc))
            )
            outcome.status, outcome.message = "failed", text
            self.progress.stage_finished(name, False, text)
            code = getattr(exc, "exit_code", EXIT_FAILED)
            final = self._outcome(journal, run_id, "failed", code, f"stage {name!r}: {text}")
            final.summary = f"stage {name!r} failed (its error above); the run stopped here"
            if isinstance(exc, RackctlError):
                final.problems = [redact_problem(p) for p in exc.problems]
            return final
        except Exception as exc:
            log = self._write_traceback(run_id, name)
            text = redact(f"{type(exc).__name__}: {exc}")
            outcome.status, outcome.message = "failed", f"stage crashed: {text} (traceback: {log})"
            self.progress.stage_finished(name, False, outcome.message)
            final = self._outcome(journal, run_id, "failed", EXIT_FAILED, f"stage {name!r} crashed: {text}; see {log}")
            final.summary = f"stage {name!r} crashed (its error above); the run stopped here"
            return final
        failed = self._apply_results(
            journal,
            run_id,
            stage,
            to_run,
            result,
            outcome=outcome,
            cannot_apply=cannot_apply,
            applies=applies or stage.applies_behind_gate,
        )
        ok = result.ok and not failed
        per_node = _per_node_failures(outcome, failed)
        outcome.message = "; ".join(m for m in (redact(result.message), per_node) if m)
        outcome.summary = redact(result.message) if failed else None
        outcome.data = dict(getattr(result, "data", None) or {})
        not_applied = [n for n in to_run if outcome.nodes.get(n, {}).get("status") == STEP_RENDERED]
        if ok and not_applied:
            outcome.status, outcome.applied = "rendered", False
            outcome.artefacts = str(result.rendered.artefacts) if result.rendered is not None else None
            outcome.message = _not_applied_message(result, outcome, not_applied)
            self.progress.stage_not_applied(name, outcome.message)
            return None
        outcome.status = "completed" if ok else "failed"
        outcome.applied = True if ok else None
        self.progress.stage_finished(name, ok, outcome.message)
        if ok:
            return None
        where = f" on {', '.join(failed)}" if failed else ""
        final = self._outcome(
            journal,
            run_id,
            "failed",
            EXIT_FAILED,
            f"stage {name!r} failed{where} ({outcome.message or 'no reason given'}); the run stopped "
            "here; fix the cause and run `rackctl up` again",
        )
        if failed:
            final.summary = (
                f"stage {name!r} failed{where}; the run stopped here; fix the cause and run `rackctl up` again"
            )
        return final

    def _apply_results(
        self,
        journal: Journal,
        run_id: int,
        stage: Stage,
        to_run: list[str],
        result: Any,
        *,
        outcome: StageOutcome,
        cannot_apply: dict[str, str],
        applies: bool,
    ) -> list[str]:
        """Move nodes along the lifecycle and mark the stage done, rendered (not applied) or failed per node."""
        failed: list[str] = []
        reaches = stage.get_lifecycle().reaches
        rendered = getattr(result, "rendered", None)
        for node in to_run:
            res: NodeResult = result.nodes.get(node) or NodeResult(
                node, result.ok, result.message, applied=rendered is None
            )
            message = redact(res.message)
            # a node the stage could not apply to is never taken as applied, whatever the stage said
            if res.ok and (not res.applied or node in cannot_apply or not applies):
                why = message or cannot_apply.get(node) or (rendered.why if rendered else "") or "nothing applied"
                detail: dict[str, Any] = {"why": why}
                if rendered is not None:
                    detail |= {k: _redacted(v) for k, v in rendered.as_dict().items() if k != "why"}
                journal.record_step(
                    run_id, node, stage.name, STAGE_STEP, status=STEP_RENDERED, destructive=False, detail=detail
                )
                outcome.nodes[node] = {"status": STEP_RENDERED, "ok": True, "applied": False, "message": why}
            elif res.ok:
                if reaches is not None:
                    self._advance(journal, run_id, node, reaches, stage.name)
                journal.record_step(run_id, node, stage.name, STAGE_STEP, status="completed", destructive=False)
                outcome.nodes[node] = {
                    "status": "completed",
                    "ok": True,
                    "applied": True,
                    "message": message,
                    "changed": res.changed,
                }
            else:
                failed.append(node)
                cause = f"stage {stage.name} failed: {message or 'no reason given'}"
                if journal.state(node) is not NodeState.FAILED:
                    journal.transition(node, NodeState.FAILED, cause, run_id=run_id)
                journal.record_step(
                    run_id,
                    node,
                    stage.name,
                    STAGE_STEP,
                    status="failed",
                    destructive=False,
                    detail={"error": message},
                )
                outcome.nodes[node] = {"status": "failed", "ok": False, "message": message}
        return failed

    def _enter_during(self, journal: Journal, run_id: int, stage: Stage, nodes: list[str], *, forced: bool) -> None:
        """Move nodes to the stage's ``during`` state; past it, only a forced re-run may (a reimage)."""
        during = stage.get_lifecycle().during
        if during is None:
            return
        for node in nodes:
            current = journal.state(node)
            if rank(current) < rank(during):
                self._advance(journal, run_id, node, during, stage.name, verb="started")
            elif current is not during and forced:
                cause = f"stage {stage.name} re-run by run {run_id} (--force/--from)"
                journal.transition(node, during, cause, run_id=run_id, force=True)

    @staticmethod
    def _advance(
        journal: Journal, run_id: int, node: str, target: NodeState, stage: str, *, verb: str = "completed"
    ) -> None:
        """Walk ``node`` forward along the main line to ``target`` (no-op when at or past it)."""
        current = journal.state(node)
        if current not in MAIN_LINE or rank(current) >= rank(target):
            return
        for state in MAIN_LINE[rank(current) + 1 : rank(target) + 1]:
            journal.transition(node, state, f"stage {stage} {verb} (run {run_id})", run_id=run_id)

    def _stop_not_implemented(
        self,
        journal: Journal,
        run_id: int,
        name: str,
        detail: str = "",
    ) -> RunOutcome:
        done = [o.name for o in self._outcomes if o.status in ("completed", "skipped") and o.name != name]
        for o in self._outcomes:
            if o.name == name:
                o.status = "not_implemented"
                o.message = detail or f"stage {name!r} is not implemented yet"
        message = f"stage {name!r} is not implemented yet; the run stopped here; completed: {', '.join(done) or 'none'}"
        rendered = self._rendered_stages()
        if rendered:
            message += f"; {NOT_APPLIED}: {', '.join(rendered)}"
        return self._outcome(journal, run_id, "not_implemented", EXIT_NOT_IMPLEMENTED, message)

    def _outcome(
        self,
        journal: Journal,
        run_id: int,
        status: str,
        code: int,
        message: str,
    ) -> RunOutcome:
        stages = list(self._outcomes)
        names = {o.name for o in stages}
        stages += [StageOutcome(n, "not_run") for n in self.selection.stages if n not in names]
        nodes = {n: journal.state(n).value for n in self.selection.nodes}
        return RunOutcome(run_id, status, code, redact(message), stages, nodes)

    def _write_traceback(self, run_id: int, stage: str) -> Path:
        path = self.state_dir / "logs" / f"run-{run_id}-{stage}.traceback.txt"
        atomic_write_text(path, redact(traceback.format_exc()), mode=0o600)
        return path


def _not_applied_message(result: Any, outcome: StageOutcome, nodes: list[str]) -> str:
    """ "rendered + validated, not applied: <why>" for a stage, with its own message and artefact dir."""
    rendered = getattr(result, "rendered", None)
    whys = sorted({outcome.nodes[n]["message"] for n in nodes})
    why = rendered.why if rendered is not None and len(whys) > 1 else "; ".join(whys)
    if rendered is not None and len(whys) > 1:
        tails = {n: outcome.nodes[n]["message"].removeprefix(rendered.why).lstrip("; ") for n in nodes}
        why += "; per node: " + "; ".join(f"{n}: {tail}" for n, tail in tails.items() if tail)
    parts = [redact(result.message), f"{NOT_APPLIED}: {why}"]
    if outcome.artefacts:
        parts.append(f"artefacts: {outcome.artefacts}")
    return "; ".join(p for p in parts if p)


#: a node's status in a stage Ctrl-C stopped, from what the stage said of it (its own word kept as ``detail``)
INTERRUPTED_STATUS = {"done": "completed", "nothing-to-do": "completed", "pending": "not_run"}


def _report_interrupted(outcome: StageOutcome, result: StageResult) -> None:
    """Each node's result so far in the outcome of a stage Ctrl-C stopped (the journal records no step for
    them: the next run reads each node again and resumes)."""
    outcome.message = redact(result.message)
    for node, res in result.nodes.items():
        said = str(res.data.get("status") or ("completed" if res.ok else "failed"))
        outcome.nodes[node] = {
            "status": INTERRUPTED_STATUS.get(said, said),
            "ok": res.ok,
            "detail": said,
            "message": redact(res.message),
        }


def _per_node_failures(outcome: StageOutcome, failed: list[str]) -> str:
    """The failed nodes' messages, each message once with the nodes that share it (a cluster-wide stage fails
    every node with the same words)."""
    by_message: dict[str, list[str]] = {}
    for node in failed:
        by_message.setdefault(outcome.nodes[node]["message"] or "failed", []).append(node)
    return "; ".join(f"{', '.join(nodes)}: {message}" for message, nodes in by_message.items())


def _redacted(value: Any) -> Any:
    """A string, or each string of a list, through the one redaction."""
    if isinstance(value, list):
        return [redact(v) if isinstance(v, str) else v for v in value]
    return redact(value) if isinstance(value, str) else value


def redact_problem(problem: Problem) -> dict[str, Any]:
    """A problem as data, its texts redacted."""
    return {k: redact(v) if isinstance(v, str) else v for k, v in problem.as_dict().items()}


def _describe(exc: RackctlError) -> str:
    """An error's message and its problems on one line, redacted (for the journal and progress)."""
    return redact("; ".join([exc.message, *(str(p) for p in exc.problems)]))
