"""The firmware plan: per node and component, installed -> target, the order, reboots, and the batch.

Pure: the installed versions come in (read through Redfish by the CLI, or synthetic in the bench).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bootstrap.firmware.components import REBOOT, at_target, same_version
from bootstrap.inventory.models import Inventory, Node
from bootstrap.rollout import RolloutNode, RolloutPolicy, Schedule, plan_batches


@dataclass(frozen=True)
class ComponentStep:
    """One component of one node."""

    component: str
    installed: tuple[str, ...]
    target: str
    source: str | None
    """The image URI, ``repository:<url>``, or None (no source: the node cannot be brought to target)."""
    action: str
    """``update`` | ``downgrade`` (asked for) | ``at-target`` | ``above-target`` (a downgrade not asked
    for: left alone) | ``no-source`` | ``not-present``."""
    reboot: str
    """``idrac-reset`` | ``host-reboot``."""
    order: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "installed": list(self.installed),
            "target": self.target,
            "source": self.source,
            "action": self.action,
            "reboot": self.reboot if self.action in FLASHED else None,
            "order": self.order,
        }


#: The actions that flash the component.
FLASHED = ("update", "downgrade")


def reached(step: ComponentStep, installed: list[str] | None) -> bool:
    """Whether ``installed`` is where ``step`` goes: at or above its target, exactly it for a downgrade."""
    if step.action == "downgrade":
        return same_version(installed, step.target)
    return at_target(installed, step.target)


@dataclass
class NodePlan:
    """What one node needs."""

    node: str
    model: str
    role: str
    steps: list[ComponentStep] = field(default_factory=list)
    batch: int | None = None
    blocked: str | None = None
    error: str | None = None
    """The installed versions could not be read (the BMC did not answer...)."""

    @property
    def updates(self) -> list[ComponentStep]:
        return [s for s in self.steps if s.action in FLASHED]

    @property
    def needs_work(self) -> bool:
        return bool(self.updates)

    @property
    def reboots(self) -> list[str]:
        """What applying this node's updates takes, in order."""
        kinds = {s.reboot for s in self.updates}
        return [k for k in ("idrac-reset", "host-reboot") if k in kinds]

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "model": self.model,
            "role": self.role,
            "components": [s.as_dict() for s in self.steps],
            "reboots": self.reboots,
            "batch": self.batch,
            "blocked": self.blocked,
            "error": self.error,
        }


@dataclass
class FirmwarePlan:
    """The whole plan: nodes and the rollout schedule."""

    nodes: list[NodePlan]
    schedule: Schedule
    policy: RolloutPolicy

    def node(self, name: str) -> NodePlan:
        return next(n for n in self.nodes if n.node == name)

    @property
    def problems(self) -> list[str]:
        out = [f"{n.node}: {n.error}" for n in self.nodes if n.error]
        out += [
            f"{n.node}: {s.component} {'/'.join(s.installed) or '?'} is not at {s.target} and the baseline "
            "gives no image or repository for it"
            for n in self.nodes
            for s in n.steps
            if s.action == "no-source"
        ]
        return out

    @property
    def refused(self) -> list[str]:
        """The components above their target, left there (no ``--allow-downgrade``)."""
        return [
            f"{n.node}: {s.component} {'/'.join(sorted(set(s.installed)))} is above the baseline {s.target}: "
            "not downgraded (pass --allow-downgrade to roll it back)"
            for n in self.nodes
            for s in n.steps
            if s.action == "above-target"
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": {
                "max_unavailable": self.policy.max_unavailable,
                "failure_threshold": self.policy.failure_threshold,
            },
            "schedule": self.schedule.as_dict(),
            "nodes": [n.as_dict() for n in self.nodes],
            "problems": self.problems,
            "downgrades_refused": self.refused,
        }


def rollout_policy(inventory: Inventory) -> RolloutPolicy:
    """The inventory's rollout settings as the scheduler's policy."""
    settings = inventory.firmware.rollout
    return RolloutPolicy(settings.max_unavailable, settings.failure_threshold)


def action_for(have: tuple[str, ...], target: str, *, allow_downgrade: bool) -> str:
    """What to do with one component: nothing, update it, or (only when allowed) roll it back."""
    if not have:
        return "not-present"
    if same_version(list(have), target):
        return "at-target"
    if not at_target(list(have), target):
        return "update"
    return "downgrade" if allow_downgrade else "above-target"


def plan_node(
    inventory: Inventory, node: Node, installed: Mapping[str, list[str]] | None, *, allow_downgrade: bool = False
) -> NodePlan:
    """Per component of the node's model baseline: installed -> target, and what to do (a component above
    its target is rolled back only with ``allow_downgrade``)."""
    out = NodePlan(node.hostname, node.model, node.role.value)
    baseline = inventory.firmware.baseline.get(node.model)
    if baseline is None:
        return out
    if installed is None:
        out.error = "installed versions unknown"
        return out
    for order, (component, target) in enumerate(baseline.targets().items(), start=1):
        have = tuple(installed.get(component, []))
        action = action_for(have, target, allow_downgrade=allow_downgrade)
        source = inventory.firmware.image_uri(node.model, component)
        if source is None and baseline.repository is not None:
            source = f"repository:{baseline.repository.url}{baseline.repository.catalog}"
        if action in FLASHED and source is None:
            action = "no-source"
        out.steps.append(ComponentStep(component, have, target, source, action, REBOOT[component], order))
    return out


def plan_firmware(
    inventory: Inventory,
    nodes: list[Node],
    installed: Mapping[str, Mapping[str, list[str]] | None],
    *,
    ready: Mapping[str, bool] | None = None,
    errors: Mapping[str, str] | None = None,
    allow_downgrade: bool = False,
) -> FirmwarePlan:
    """The plan for ``nodes``: each node's components and the batch it falls in.

    ``ready`` (node -> Ready) defaults to every node Ready; the whole inventory's nodes count for
    readiness and for the percentage of max-unavailable, only ``nodes`` are worked on.
    """
    policy = rollout_policy(inventory)
    plans = []
    for node in nodes:
        plan = plan_node(inventory, node, installed.get(node.hostname), allow_downgrade=allow_downgrade)
        if errors and node.hostname in errors:
            plan.error = errors[node.hostname]
        plans.append(plan)
    by_name = {p.node: p for p in plans}
    readiness = ready or {}
    fleet = [
        RolloutNode(
            n.hostname,
            control_plane=n.is_control_plane,
            ready=readiness.get(n.hostname, True),
            needs_work=n.hostname in by_name and by_name[n.hostname].needs_work,
        )
        for n in inventory.nodes
    ]
    schedule = plan_batches(fleet, policy)
    batch_of = schedule.batch_of()
    for plan in plans:
        plan.batch = batch_of.get(plan.node)
        plan.blocked = schedule.blocked.get(plan.node)
    return FirmwarePlan(plans, schedule, policy)
