"""Run the bootstrap stages in order for the selected nodes, journalled and resumable.

Per stage and node the runner decides: run, skip (the node is past the stage, or the journal shows the
stage completed in the node's current epoch), or blocked (the node has not reached the state the stage
needs). It stops at the first stage that is not implemented (exit 4), that fails on any node (exit 1,
after the other nodes finished that stage), or on Ctrl-C (exit 130); ``rackctl up`` again resumes.

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
    EXIT_NOT_IMPLEMENTED,
    EXIT_OK,
    InvalidInput,
    NotImplementedStage,
    Problem,
    RackctlError,
)
from bootstrap.fsutil import atomic_write_text
from bootstrap.inventory.environment_checks import OperatorEnvironmentError
from bootstrap.journal.states import MAIN_LINE, NodeState, rank
from bootstrap.journal.store import JOURNAL_FILE, STAGE_STEP, Journal
from bootstrap.selection import check_stages, match_nodes
from bootstrap.stages.base import (
    STAGE_ORDER,
    NodeResult,
    NullProgress,
    PlannedAction,
    ProgressReporter,
    RunOptions,
    Stage,
    StageContext,
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
    status: str  # completed | skipped | failed | not_implemented | interrupted | cancelled | not_run
    message: str = ""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message, "nodes": self.nodes}


@dataclass
class RunOutcome:
    """The result of ``rackctl up``."""

    run_id: int | None
    status: str  # completed | failed | not_implemented | interrupted | cancelled
    exit_code: int
    message: str
    stages: list[StageOutcome]
    nodes: dict[str, str]
    #: said once per run: BMCs reached without TLS verification
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "run": self.run_id,
            "status": self.status,
            "exit_code": self.exit_code,
            "message": self.message,
            "stages": [s.as_dict() for s in self.stages],
            "nodes": self.nodes,
            "warnings": self.warnings,
            **({} if self.ok else {"error": self.message}),
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


def decide(stage: Stage, node: str, state: NodeState, journal: Journal, forced: bool) -> Decision:
    """Run, skip or blocked for ``stage`` on ``node`` in ``state``."""
    life = stage.get_lifecycle()
    if state is NodeState.MAINTENANCE:
        return Decision("skip", "in maintenance")
    if state is NodeState.FAILED:
        return Decision("blocked", "failed (it is retried from the state it failed in at the next run)")
    if not forced:
        if life.done_when is not None and rank(state) >= rank(life.done_when):
            return Decision("skip", f"already {state.value}")
        done = journal.stage_done(node, stage.name)
        if done is not None:
            return Decision("skip", f"completed in run {done.run} at {done.at}")
    if rank(state) < rank(life.requires):
        return Decision(
            "blocked",
            f"node is {state.value}; stage {stage.name!r} needs {life.requires.value} (run the earlier stages first)",
        )
    return Decision("run")


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
        for name in selection.stages:
            stage = get_stage(name)
            forced = name in selection.forced
            reached = stops_at is None
            decisions = {n: decide(stage, n, projected[n], journal, forced) for n in selection.nodes}
            to_run = [n for n, d in decisions.items() if d.action == "run"]
            actions = [
                PlannedAction(name, n, d.action, skip=d.reason).as_dict()
                for n, d in decisions.items()
                if d.action != "run"
            ]
            if to_run:
                ctx = StageContext(name, inventory, to_run, journal, Path(state_dir), 0, options, forced=forced)
                actions = [a.as_dict() for a in stage.plan(ctx)] + actions
                if not stage.implemented and stops_at is None:
                    stops_at = name
                reaches = stage.get_lifecycle().reaches
                for n in to_run:
                    if reaches is not None and rank(projected[n]) < rank(reaches):
                        projected[n] = reaches
            stages_out.append(
                {
                    "name": name,
                    "description": stage.description,
                    "implemented": stage.implemented,
                    "destructive": stage.destructive,
                    "forced": forced,
                    "reached": reached,
                    "nodes_to_run": to_run,
                    "actions": actions,
                }
            )
        current = {n: (statuses[n].state.value if n in statuses else "unregistered") for n in selection.nodes}
    return {"ok": True, "stops_at": stops_at, "stages": stages_out, "nodes": current}


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
        self.progress: ProgressReporter = RedactingProgress(progress or NullProgress())
        self.command = command
        self._outcomes: list[StageOutcome] = []

    def run(self) -> RunOutcome:
        """Run the selected stages; never raises for a stage's failure (see :class:`RunOutcome`)."""
        ensure_writable_state_dir(self.state_dir)
        warning = insecure_warning(self.inventory, self.selection.nodes, forced=self.options.insecure)
        if warning:
            self.progress.log(f"warning: {warning}")
        note = f" [warning: {warning}]" if warning else ""
        with Journal(self.state_dir) as journal, journal.run_lock():
            run_id = journal.begin_run(self.command + (" --insecure" if self.options.insecure else ""))
            journal.register_nodes([n.hostname for n in self.inventory.nodes], run_id=run_id)
            self._outcomes = []
            try:
                self._check_environment(journal, run_id)
                self._retry_failed(journal, run_id)
                outcome = self._run_stages(journal, run_id)
            except RackctlError as exc:  # bad input or a refusal found mid-run: recorded, then shown
                journal.finish_run(run_id, "failed", _describe(exc) + note)
                raise
            except KeyboardInterrupt:
                current = self._outcomes[-1].name if self._outcomes else "before the first stage"
                if self._outcomes:
                    self._outcomes[-1].status = "interrupted"
                outcome = self._outcome(
                    journal,
                    run_id,
                    "interrupted",
                    EXIT_INTERRUPTED,
                    f"interrupted during {current}; run `rackctl up` again to resume",
                )
            journal.finish_run(run_id, outcome.status, outcome.message + note)
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
                if decide(stage, n, self._state_after_retry(journal, n), journal, forced).action != "skip"
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
            decisions = {n: decide(stage, n, journal.state(n), journal, forced) for n in self.selection.nodes}
            to_run = [n for n, d in decisions.items() if d.action == "run"]
            for node, d in decisions.items():
                if d.action != "run":
                    outcome.nodes[node] = {"status": d.action, "message": d.reason}
            blocked = [n for n, d in decisions.items() if d.action == "blocked"]
            if not to_run and not blocked:
                outcome.status, outcome.message = "skipped", "nothing to do"
                continue
            if to_run and not stage.implemented:
                return self._stop_not_implemented(journal, run_id, name)
            if to_run:
                stop = self._run_one(journal, run_id, stage, to_run, outcome)
                if stop is not None:
                    return stop
            if blocked:
                outcome.status = "failed"
                outcome.message = "; ".join(f"{n}: {decisions[n].reason}" for n in blocked)
                return self._outcome(
                    journal,
                    run_id,
                    "failed",
                    EXIT_FAILED,
                    f"stage {name!r} cannot run on {', '.join(blocked)}: {outcome.message}; the run stopped here",
                )
        done = ", ".join(o.name for o in self._outcomes if o.status in ("completed", "skipped"))
        return self._outcome(journal, run_id, "completed", EXIT_OK, f"completed: {done}")

    def _run_one(
        self, journal: Journal, run_id: int, stage: Stage, to_run: list[str], outcome: StageOutcome
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
        )
        if stage.destructive and not ctx.confirm(
            f"Stage {name!r} can destroy data on {len(to_run)} node(s): {', '.join(to_run)}. Continue?"
        ):
            outcome.status, outcome.message = "cancelled", "not confirmed"
            return self._outcome(
                journal, run_id, "cancelled", EXIT_FAILED, f"stopped before stage {name!r}: not confirmed"
            )
        self._enter_during(journal, run_id, stage, to_run, forced=ctx.forced)
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
            text = redact(getattr(exc, "message", None) or str(exc))
            outcome.status, outcome.message = "failed", text
            self.progress.stage_finished(name, False, text)
            code = getattr(exc, "exit_code", EXIT_FAILED)
            return self._outcome(journal, run_id, "failed", code, f"stage {name!r}: {text}")
        except Exception as exc:
            log = self._write_traceback(run_id, name)
            text = redact(f"{type(exc).__name__}: {exc}")
            outcome.status, outcome.message = "failed", f"stage crashed: {text} (traceback: {log})"
            self.progress.stage_finished(name, False, outcome.message)
            return self._outcome(journal, run_id, "failed", EXIT_FAILED, f"stage {name!r} crashed: {text}; see {log}")
        failed = self._apply_results(journal, run_id, stage, to_run, result, outcome=outcome)
        ok = result.ok and not failed
        outcome.status = "completed" if ok else "failed"
        per_node = "; ".join(f"{n}: {outcome.nodes[n]['message'] or 'failed'}" for n in failed)
        outcome.message = "; ".join(m for m in (redact(result.message), per_node) if m)
        self.progress.stage_finished(name, ok, outcome.message)
        if ok:
            return None
        where = f" on {', '.join(failed)}" if failed else ""
        return self._outcome(
            journal,
            run_id,
            "failed",
            EXIT_FAILED,
            f"stage {name!r} failed{where} ({outcome.message or 'no reason given'}); the run stopped "
            "here; fix the cause and run `rackctl up` again",
        )

    def _apply_results(
        self,
        journal: Journal,
        run_id: int,
        stage: Stage,
        to_run: list[str],
        result: Any,
        *,
        outcome: StageOutcome,
    ) -> list[str]:
        """Move nodes along the lifecycle and mark the stage done or failed per node."""
        failed: list[str] = []
        reaches = stage.get_lifecycle().reaches
        for node in to_run:
            res: NodeResult = result.nodes.get(node) or NodeResult(node, result.ok, result.message)
            message = redact(res.message)
            if res.ok:
                if reaches is not None:
                    self._advance(journal, run_id, node, reaches, stage.name)
                journal.record_step(run_id, node, stage.name, STAGE_STEP, status="completed", destructive=False)
                outcome.nodes[node] = {"status": "completed", "message": message, "changed": res.changed}
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
                outcome.nodes[node] = {"status": "failed", "message": message}
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


def _describe(exc: RackctlError) -> str:
    """An error's message and its problems on one line, redacted (for the journal and progress)."""
    return redact("; ".join([exc.message, *(str(p) for p in exc.problems)]))
