"""What every rolling update shares around the scheduler (``firmware apply``, the host path of ``driver
upgrade``): the batch loop, readiness, how nodes never started are marked, why the rollout ended, and the
report."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.rollout.gate import NodeGate
from bootstrap.rollout.scheduler import Batch, NodePhase, Rollout

#: the statuses of a node that ended well
FINISHED_OK = ("done", "nothing-to-do")


@dataclass
class NodeOutcome:
    """What a rollout did on one node; each kind of rollout adds its own fields (:meth:`details`)."""

    node: str
    status: str = "pending"
    """``done`` | ``nothing-to-do`` | ``failed`` | ``pending`` (never started) | ``blocked`` | ``interrupted``
    (cut by Ctrl-C mid-work; ``running`` while it is worked on)."""
    batch: int | None = None
    message: str = ""
    records: dict[str, str] = field(default_factory=dict)
    """What was done around the work (cordon, reboot, uncordon...), in words."""

    def details(self) -> dict[str, Any]:
        """The kind's own fields, between ``message`` and ``records`` in :meth:`as_dict`."""
        return {}

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "status": self.status,
            "batch": self.batch,
            "message": self.message,
            **self.details(),
            "records": self.records,
        }


OutcomeT = TypeVar("OutcomeT", bound=NodeOutcome)


@dataclass
class RolloutReport(Generic[OutcomeT]):
    """The end of one rollout: each node's outcome, the batches run, and whether and why it stopped."""

    nodes: list[OutcomeT]
    batches: list[Batch]
    stopped: bool
    reason: str

    @property
    def ok(self) -> bool:
        return all(n.status in FINISHED_OK for n in self.nodes)

    def header(self) -> dict[str, Any]:
        """Keys a kind of rollout adds after ``ok`` (none here)."""
        return {}

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            **self.header(),
            "stopped": self.stopped,
            "reason": self.reason,
            "batches": [b.as_dict() for b in self.batches],
            "nodes": [n.as_dict() for n in self.nodes],
        }


def ready_for_rollout(gate: NodeGate, journal: Journal, node: str) -> bool:
    """Ready for the scheduler: the gate says so, and the journal does not hold it in ``maintenance`` (a
    node an earlier rollout left out of service counts as down until it is worked on again)."""
    status = journal.nodes().get(node)
    return gate.ready(node) and (status is None or status.state is not NodeState.MAINTENANCE)


def run_batches(
    rollout: Rollout,
    outcomes: Mapping[str, NodeOutcome],
    run_batch: Callable[[Batch], Iterable[tuple[str, bool]]],
    on_event: Callable[[str, str, str], None],
) -> None:
    """Drive ``rollout`` to its end: each batch announced, its nodes' outcomes given the batch's index,
    ``run_batch`` runs it and answers ``(node, ok)`` per node, which the scheduler is told."""
    while (batch := rollout.next_batch()) is not None:
        on_event("batch", "", f"batch {batch.index}: {', '.join(batch.nodes)}")
        for name in batch.nodes:
            outcomes[name].batch = batch.index
        for name, ok in run_batch(batch):
            rollout.finish(name, ok, outcomes[name].message)


def mark_unstarted(rollout: Rollout, outcomes: Mapping[str, NodeOutcome]) -> None:
    """The nodes the rollout never started: ``blocked`` (with the scheduler's why) or ``pending``."""
    for name, phase in rollout.phase.items():
        if name in outcomes and phase == NodePhase.PENDING:
            outcome = outcomes[name]
            outcome.status = "blocked" if name in rollout.blocked else "pending"
            outcome.batch = None
            if rollout.stopped:
                outcome.message = "not started: the rollout stopped (failure threshold)"
            else:
                outcome.message = f"not started: {rollout.blocked.get(name, 'not scheduled')}"


def end_reason(rollout: Rollout, failed: Iterable[str], *, rerun: str, done: str, rerun_if_failed: bool) -> str:
    """Why the rollout ended, in words: stopped at the failure threshold, nodes failed (``failed``; with
    ``rerun`` named when ``rerun_if_failed``), nodes not scheduled, or ``done``."""
    if rollout.stopped:
        down = sorted(rollout.failures)
        return (
            f"stopped: {len(down)} node(s) failed ({', '.join(down)}), failure threshold "
            f"{rollout.policy.failure_threshold}; fix them and run {rerun} again to resume"
        )
    failures = sorted(failed)
    if failures:
        again = f"; fix them and run {rerun} again" if rerun_if_failed else ""
        return f"{len(failures)} node(s) failed: {', '.join(failures)}{again}"
    if rollout.pending:
        return f"{len(rollout.pending)} node(s) could not be scheduled"
    return done
