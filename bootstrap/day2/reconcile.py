"""``rackctl apply``'s plan: the edited inventory against what ``apply`` last recorded, node by node.

Classes: ``new`` (not applied before: the whole pipeline, those nodes alone), ``removed`` (applied before,
gone from the inventory: drained and removed from Kubernetes when it is there, powered off through Redfish),
``changed`` (only the stages their changed sections need, :data:`CHANGE_STAGES`), ``unchanged`` (not
contacted) and ``adopted`` (known to the journal from ``up`` but never recorded by ``apply``: its current
configuration is recorded as the applied one, nothing is contacted) and ``forgotten`` (in the journal, never
recorded by ``apply``, gone from the inventory: its BMC is unknown, so it is only reported, with the way
to retire it by hand). Pure: reads only its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bootstrap.day2.snapshot import SECTIONS
from bootstrap.journal.states import NodeState
from bootstrap.stages.base import STAGE_ORDER

#: Which stages a change of a snapshot section needs (the map from inventory fields to stages).
CHANGE_STAGES: dict[str, tuple[str, ...]] = {
    "bmc": ("preflight", "discover"),  # address or login changed: reach it and re-read it
    "hardware": ("discover",),  # model or service tag: checked against the BMC again
    "firmware": ("firmware",),  # baseline (targets, images) of its model: rolled out by `rackctl firmware apply`
    "bios": ("bios",),  # profile or its attributes
    "interfaces": ("network",),  # interfaces, bonds, the networks they sit on
    "os": ("provision",),  # install method or disk: a reinstall, only through `rackctl redeploy`
    "kubernetes": ("kubernetes",),  # role, labels, taints
    "gpu": ("nvidia",),  # GPU selection, MIG profile
}
#: Sections ``apply`` never acts on by itself: it names the command that does.
NEEDS_COMMAND: dict[str, str] = {
    "firmware": "rackctl firmware apply --limit {node}",  # flashing is a rollout, in batches
    "os": "rackctl redeploy {node}",
}


@dataclass
class NodeChange:
    """What ``apply`` does with one node."""

    node: str
    kind: str  # new | removed | changed | unchanged | adopted | forgotten
    sections: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    #: changed sections apply does not act on, with the command that does
    deferred: dict[str, str] = field(default_factory=dict)
    diff: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "kind": self.kind,
            "sections": self.sections,
            "stages": self.stages,
            "deferred": self.deferred,
            "diff": self.diff,
            "state": self.state,
        }


@dataclass
class ReconcilePlan:
    """Every node's change, in inventory order (removed nodes last)."""

    changes: list[NodeChange]

    def of_kind(self, kind: str) -> list[NodeChange]:
        return [c for c in self.changes if c.kind == kind]

    @property
    def contacted(self) -> list[str]:
        """Nodes whose BMC or OS ``apply`` will contact."""
        return [c.node for c in self.changes if c.kind in ("new", "removed") or (c.kind == "changed" and c.stages)]

    def as_dict(self) -> dict[str, Any]:
        counts = {k: len(self.of_kind(k)) for k in ("new", "removed", "changed", "unchanged", "adopted", "forgotten")}
        return {"counts": counts, "nodes": [c.as_dict() for c in self.changes], "contacted": self.contacted}


def stages_for(sections: list[str]) -> list[str]:
    """The stages a set of changed sections needs, in run order (deferred sections left out)."""
    wanted = {s for sec in sections if sec not in NEEDS_COMMAND for s in CHANGE_STAGES[sec]}
    return [s for s in STAGE_ORDER if s in wanted]


def classify(
    desired: dict[str, dict[str, Any]],
    applied: dict[str, dict[str, Any]],
    journal_states: dict[str, NodeState],
) -> ReconcilePlan:
    """Compare ``desired`` (node -> snapshot, inventory order) with ``applied`` (node -> apply record)."""
    changes: list[NodeChange] = []
    for node, snap in desired.items():
        record = applied.get(node)
        state = journal_states.get(node)
        shown = state.value if state else None
        if record is None or record.get("removed"):
            kind = "adopted" if (record is None and state is not None and state is not NodeState.REGISTERED) else "new"
            changes.append(NodeChange(node, kind, state=shown))
            continue
        before = record.get("sections") or {}
        changed = [s for s in SECTIONS if before.get(s) != snap.get(s)]
        if not changed:
            changes.append(NodeChange(node, "unchanged", state=shown))
            continue
        deferred = {s: NEEDS_COMMAND[s].format(node=node) for s in changed if s in NEEDS_COMMAND}
        diff = {s: {"applied": before.get(s), "inventory": snap.get(s)} for s in changed}
        changes.append(NodeChange(node, "changed", changed, stages_for(changed), deferred, diff, shown))
    for node, record in applied.items():
        if node not in desired and not record.get("removed"):
            state = journal_states.get(node)
            changes.append(NodeChange(node, "removed", state=state.value if state else None))
    for node, state in journal_states.items():
        if node not in desired and node not in applied and state is not NodeState.MAINTENANCE:
            # installed by `up`, never applied, now gone from the inventory: its BMC is not known any more
            changes.append(NodeChange(node, "forgotten", state=state.value))
    return ReconcilePlan(changes)
