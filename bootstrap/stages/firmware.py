"""The firmware stage: check each node's firmware against the inventory's baseline; roll it out only when
asked (``rackctl up --apply-firmware``).

Without the flag (the default) it uses the facts the discover stage recorded (no extra BMC traffic): a node
with BIOS or iDRAC below the baseline fails with the versions named and the command that updates it
(``rackctl firmware apply``), so ``up`` stops there rather than run the rest on old firmware. Nothing is
ever flashed during ``up`` without the flag. With it, the stage runs the same rollout as ``rackctl
firmware apply`` (:mod:`bootstrap.firmware.apply`) on the stage's nodes, journalled in the run, through the
same Kubernetes gate (:class:`bootstrap.kube.ClusterGate`): with ``<state-dir>/kubeconfig`` each Kubernetes node
is cordoned and drained before its update and uncordoned after; without it the journal says "no Kubernetes:
not drained" (the first ``up`` runs before the cluster exists).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bootstrap.inventory.profiles import version_tuple
from bootstrap.journal.states import NodeState
from bootstrap.stages.base import (
    NodeResult,
    PlannedAction,
    RunOptions,
    Stage,
    StageContext,
    StageInterrupted,
    StageResult,
    register_stage,
)

if TYPE_CHECKING:
    from bootstrap.journal.store import Journal


def applying(ctx: StageContext) -> bool:
    """Whether this run was asked to flash (``up --apply-firmware``)."""
    return ctx.options.firmware.apply


@register_stage
class FirmwareStage(Stage):
    """Firmware baseline check (read-only), or the rollout with ``--apply-firmware``."""

    name = "firmware"
    description = "Check firmware against the inventory's baseline (roll it out with --apply-firmware)"

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        actions = []
        for hostname in ctx.nodes:
            model = ctx.node(hostname).model
            has = model in ctx.inventory.firmware.baseline
            if has and applying(ctx):
                what = f"roll out the {model} baseline (see `rackctl firmware plan`)"
                actions.append(PlannedAction(self.name, hostname, what, destructive=True))
                continue
            what = f"compare with the {model} baseline" if has else f"no baseline for {model}: report versions"
            actions.append(PlannedAction(self.name, hostname, what))
        return actions

    def settles_maintenance(self, options: RunOptions, journal: Journal, node: str) -> bool:
        """The rollout settles the nodes a stopped rollout left in maintenance before it schedules (the
        check without ``--apply-firmware`` leaves them alone, and so does it those another command left)."""
        if not options.firmware.apply:
            return False
        from bootstrap.firmware.apply import left_by_rollout  # noqa: PLC0415 - only when flashing

        return left_by_rollout(journal, node)

    def run(self, ctx: StageContext) -> StageResult:
        if applying(ctx):
            return self._roll_out(ctx)
        out: dict[str, NodeResult] = {}
        for hostname in ctx.nodes:
            out[hostname] = self._check(ctx, hostname)
            ctx.progress.node_done(self.name, hostname, out[hostname].ok, out[hostname].message)
        return StageResult.from_nodes(out)

    def _roll_out(self, ctx: StageContext) -> StageResult:
        from bootstrap.firmware.apply import ApplySettings, FirmwareRollout  # noqa: PLC0415 - only when flashing
        from bootstrap.firmware.health import OsHealth  # noqa: PLC0415
        from bootstrap.firmware.plan import plan_firmware  # noqa: PLC0415
        from bootstrap.firmware.read import read_installed  # noqa: PLC0415
        from bootstrap.kube import ClusterGate, cluster_for  # noqa: PLC0415
        from bootstrap.oob import policy_for, targets_for  # noqa: PLC0415

        inventory = ctx.inventory
        nodes = [ctx.node(h) for h in ctx.nodes]
        targets = targets_for(inventory, nodes)
        policy = policy_for(ctx.state_dir)
        installed, errors = read_installed(targets, policy, settle_s=180.0)
        plan = plan_firmware(inventory, nodes, installed, errors=errors)
        rollout = FirmwareRollout(
            inventory,
            plan,
            ctx.journal,
            ctx.run_id,
            {t.name: t for t in targets},
            gate=ClusterGate(cluster_for(ctx.state_dir)),
            conn_policy=policy,
            os_health=OsHealth(inventory, ctx.journal, ctx.options.environment),
            settings=ApplySettings(poll_s=ctx.options.firmware.poll_s),
            on_event=lambda _kind, node, text: ctx.progress.log(f"firmware {node}: {text}" if node else text),
        )
        try:
            report = rollout.run()
        except KeyboardInterrupt as exc:  # FleetInterrupted too: each node's result so far, then stop the run
            report = rollout.interrupted_report("`rackctl up --apply-firmware`")
            results = [NodeResult(n.node, ok=_ok(n.status), message=n.message, data=n.as_dict()) for n in report.nodes]
            raise StageInterrupted(StageResult.from_nodes(results, report.reason)) from exc
        out = {}
        for node in report.nodes:
            ok = _ok(node.status)
            status = ctx.journal.status(node.node)
            if not ok and status.state is NodeState.MAINTENANCE and status.left_from() is not None:
                # out of maintenance so that the runner records the failure (the journal keeps the steps)
                ctx.transition(node.node, status.left_from() or NodeState.REGISTERED, f"firmware: {node.message}")
            out[node.node] = NodeResult(node.node, ok=ok, message=node.message, data=node.as_dict())
            ctx.progress.node_done(self.name, node.node, ok, node.message)
        return StageResult.from_nodes(out, report.reason)

    def _check(self, ctx: StageContext, hostname: str) -> NodeResult:
        facts = ctx.journal.latest_facts(hostname).get("discover")
        if not facts:
            return NodeResult(hostname, ok=False, message="no discovered facts: run the discover stage first")
        found = {"bios": facts.get("bios_version"), "idrac": facts.get("idrac_version")}
        minimum = ctx.inventory.firmware.baseline.get(ctx.node(hostname).model)
        if minimum is None:
            return NodeResult(hostname, ok=True, message="no baseline", data=found)
        behind = []
        for part, label in (("bios", "BIOS"), ("idrac", "iDRAC")):
            want = getattr(minimum, part)
            have = found[part]
            if want and (not have or version_tuple(have) < version_tuple(want)):
                behind.append(f"{label} {have or 'unknown'} is below the baseline {want}")
        if behind:
            return NodeResult(
                hostname,
                ok=False,
                message="; ".join(behind)
                + " (roll it out: `rackctl firmware apply`, or `rackctl up --apply-firmware`; then `rackctl up` again)",
                data=found,
            )
        return NodeResult(hostname, ok=True, message="at or above the baseline", data=found)


def _ok(status: str) -> bool:
    """A node's rollout status that leaves it at the baseline."""
    return status in ("done", "nothing-to-do")
