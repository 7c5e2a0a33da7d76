"""The rollout scheduler: pure and typed, no I/O.

Rules (kubeadm/etcd and Kubernetes ``maxUnavailable`` practice):

- control-plane (and head) nodes go first, one at a time, and only while every *other* control plane is
  Ready: etcd keeps its quorum;
- workers go in batches; the workers unavailable at once (the batch, plus workers that are not Ready or
  failed) never exceed ``max_unavailable`` (a count, or a percentage of the fleet's workers, rounded
  down, at least 1);
- a node that fails stays unavailable (it counts against the budget, and a failed control plane holds
  back the others); once ``failure_threshold`` nodes have failed the rollout stops.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

PERCENT_RE = re.compile(r"^(\d{1,3})%$")


@dataclass(frozen=True)
class RolloutPolicy:
    """How much of the fleet may be down at once, and when to stop."""

    max_unavailable: int | str = 1
    """Workers down at once: a count (>= 1) or a percentage of the workers, e.g. ``"25%"``."""
    failure_threshold: int = 1
    """The rollout stops once this many nodes have failed (>= 1)."""

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError(f"failure_threshold must be at least 1, not {self.failure_threshold}")
        max_unavailable_count(self.max_unavailable, 1)  # validates the form


def max_unavailable_count(value: int | str, workers: int) -> int:
    """``value`` as a count of workers: percentages round down, never below 1."""
    if isinstance(value, bool):
        raise ValueError(f"max_unavailable {value!r} is not a count or a percentage")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"max_unavailable must be at least 1, not {value}")
        return value
    match = PERCENT_RE.match(str(value).strip())
    if match is None or not 0 < int(match.group(1)) <= 100:
        raise ValueError(f"max_unavailable {value!r} is neither a count nor a percentage like '25%'")
    return max(1, math.floor(workers * int(match.group(1)) / 100))


@dataclass(frozen=True)
class RolloutNode:
    """One node of the fleet as the scheduler sees it."""

    name: str
    control_plane: bool = False
    ready: bool = True
    """Is it Ready now (Kubernetes Ready, or healthy when there is no Kubernetes)?"""
    needs_work: bool = True
    """False: the node is only counted (its readiness matters), nothing is done to it."""


class NodePhase(StrEnum):
    """A node's place in a rollout."""

    PENDING = "pending"
    ACTIVE = "active"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


#: Allowed moves of :class:`NodePhase`.
TRANSITIONS: dict[NodePhase, frozenset[NodePhase]] = {
    NodePhase.PENDING: frozenset({NodePhase.ACTIVE, NodePhase.SKIPPED}),
    NodePhase.ACTIVE: frozenset({NodePhase.DONE, NodePhase.FAILED}),
    NodePhase.DONE: frozenset(),
    NodePhase.FAILED: frozenset(),
    NodePhase.SKIPPED: frozenset(),
}


class InvalidPhase(ValueError):
    """A node was moved in a way :data:`TRANSITIONS` does not allow."""


@dataclass(frozen=True)
class Batch:
    """Nodes taken down together."""

    index: int
    nodes: tuple[str, ...]
    control_plane: bool

    def as_dict(self) -> dict[str, object]:
        return {"index": self.index, "nodes": list(self.nodes), "control_plane": self.control_plane}


@dataclass
class Schedule:
    """The batches, and the nodes no batch may take (with the reason)."""

    batches: list[Batch]
    blocked: dict[str, str] = field(default_factory=dict)
    budget: int = 1

    def batch_of(self) -> dict[str, int]:
        """Node -> index of its batch."""
        return {name: b.index for b in self.batches for name in b.nodes}

    def as_dict(self) -> dict[str, object]:
        return {
            "max_unavailable_workers": self.budget,
            "batches": [b.as_dict() for b in self.batches],
            "blocked": dict(self.blocked),
        }


class Rollout:
    """The scheduler as a state machine: ask :meth:`next_batch`, then report each of its nodes finished."""

    def __init__(self, nodes: Iterable[RolloutNode], policy: RolloutPolicy) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.policy = policy
        workers = sum(1 for n in self.nodes.values() if not n.control_plane)
        self.budget = max_unavailable_count(policy.max_unavailable, workers)
        self.phase = {
            name: (NodePhase.PENDING if n.needs_work else NodePhase.SKIPPED) for name, n in self.nodes.items()
        }
        self.messages: dict[str, str] = {}
        self.batches: list[Batch] = []
        self.blocked: dict[str, str] = {}

    # -- state -------------------------------------------------------------------------------------
    def _move(self, name: str, to: NodePhase) -> None:
        now = self.phase[name]
        if to not in TRANSITIONS[now]:
            raise InvalidPhase(f"node {name}: {now.value} -> {to.value} is not allowed")
        self.phase[name] = to

    def unavailable(self, name: str) -> bool:
        """Down now: being worked on, failed, or not Ready and not (yet) brought back by this rollout."""
        phase = self.phase[name]
        if phase in (NodePhase.ACTIVE, NodePhase.FAILED):
            return True
        return phase != NodePhase.DONE and not self.nodes[name].ready

    @property
    def failures(self) -> list[str]:
        return [n for n, p in self.phase.items() if p == NodePhase.FAILED]

    @property
    def stopped(self) -> bool:
        """The failure threshold is reached: start nothing more."""
        return len(self.failures) >= self.policy.failure_threshold

    @property
    def active(self) -> list[str]:
        return [n for n, p in self.phase.items() if p == NodePhase.ACTIVE]

    @property
    def pending(self) -> list[str]:
        return [n for n, p in self.phase.items() if p == NodePhase.PENDING]

    @property
    def finished(self) -> bool:
        return not self.pending and not self.active

    # -- scheduling --------------------------------------------------------------------------------
    def next_batch(self) -> Batch | None:
        """The next nodes to take down (now ACTIVE), or None: done, stopped, blocked or still busy."""
        if self.active or self.stopped:
            return None
        pending = self.pending
        self.blocked = {}
        cps = [n for n in pending if self.nodes[n].control_plane]
        if cps:
            # a not-Ready control plane is taken first: it is the one that must come back
            for name in sorted(cps, key=lambda n: (self.nodes[n].ready, n)):
                others_down = [
                    o for o in self.nodes if o != name and self.nodes[o].control_plane and self.unavailable(o)
                ]
                if not others_down:
                    return self._start([name], control_plane=True)
            down = sorted(o for o in self.nodes if self.nodes[o].control_plane and self.unavailable(o))
            for cp in cps:
                self.blocked[cp] = f"control plane(s) {', '.join(down)} not Ready: etcd quorum comes first"
            for name in pending:
                self.blocked.setdefault(name, "waits for the control planes, which go first")
            return None
        workers = [n for n in pending if not self.nodes[n].control_plane]
        if not workers:
            return None
        down = [n for n in self.nodes if not self.nodes[n].control_plane and self.unavailable(n)]
        room = self.budget - len(down)
        # workers already down cost nothing more when taken: take them first, then fill the room
        chosen = [n for n in workers if n in down]
        for name in workers:
            if room <= 0:
                break
            if name not in chosen:
                chosen.append(name)
                room -= 1
        if not chosen:
            for name in workers:
                self.blocked[name] = (
                    f"{len(down)} worker(s) down ({', '.join(sorted(down))}) already use max-unavailable {self.budget}"
                )
            return None
        return self._start(chosen, control_plane=False)

    def _start(self, names: Sequence[str], *, control_plane: bool) -> Batch:
        for name in names:
            self._move(name, NodePhase.ACTIVE)
        batch = Batch(len(self.batches) + 1, tuple(names), control_plane)
        self.batches.append(batch)
        return batch

    def finish(self, name: str, ok: bool, message: str = "") -> None:
        """Report an ACTIVE node done (``ok``) or failed."""
        self._move(name, NodePhase.DONE if ok else NodePhase.FAILED)
        if message:
            self.messages[name] = message

    def skip(self, name: str, message: str = "") -> None:
        """Take a PENDING node out of the rollout (nothing to do on it after all)."""
        self._move(name, NodePhase.SKIPPED)
        if message:
            self.messages[name] = message


def plan_batches(nodes: Iterable[RolloutNode], policy: RolloutPolicy) -> Schedule:
    """The whole schedule when every node succeeds (what ``plan`` shows)."""
    rollout = Rollout(nodes, policy)
    while (batch := rollout.next_batch()) is not None:
        for name in batch.nodes:
            rollout.finish(name, ok=True)
    blocked = {n: rollout.blocked.get(n, "not scheduled") for n in rollout.pending}
    return Schedule(rollout.batches, blocked, rollout.budget)
