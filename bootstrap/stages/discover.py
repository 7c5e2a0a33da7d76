"""The discover stage: crawl every node's iDRAC, record the facts, check them against the inventory.

Read-only. A node whose BMC fails, or whose model, GPU count or service tag contradicts the inventory,
fails with that cause (fix the inventory or the cabling, then ``rackctl up`` retries it). MACs the
inventory lacks are offered as a diff (``rackctl discover --write`` applies it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bootstrap.oob import DISCOVER_POLICY, check_facts, mac_diff, policy_for, targets_for
from bootstrap.stages.base import NodeResult, PlannedAction, Stage, StageContext, StageResult, register_stage
from redfish_tools.discover import discover
from redfish_tools.fleet import run_fleet


@register_stage
class DiscoverStage(Stage):
    """Redfish discovery of the selected nodes (threaded fan-out, 1-2 requests in flight per BMC)."""

    name = "discover"
    description = "Read each node's hardware through its iDRAC and check it against the inventory"

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        return [
            PlannedAction(self.name, n, "read hardware over Redfish, compare with the inventory") for n in ctx.nodes
        ]

    def run(self, ctx: StageContext) -> StageResult:
        inv = ctx.inventory
        nodes = [ctx.node(n) for n in ctx.nodes]
        targets = targets_for(inv, nodes)
        if ctx.options.insecure:  # `up --insecure`: an explicit opt-out of BMC certificate checks
            targets = [replace(t, insecure=True) for t in targets]
        results = run_fleet(targets, discover, policy=policy_for(ctx.state_dir, DISCOVER_POLICY))
        out: dict[str, NodeResult] = {}
        for result in results:
            node = inv.node(result.name)
            if not result.ok or result.value is None or node is None:
                cause = (result.error or {}).get("message", "discovery failed")
                out[result.name] = NodeResult(result.name, ok=False, message=f"BMC: {cause}")
                ctx.progress.node_done(self.name, result.name, False, cause)
                continue
            facts = result.value
            ctx.record_facts(result.name, facts.as_dict())
            mismatches = check_facts(inv, node, facts)
            macs = mac_diff(inv, node, facts)
            data: dict[str, Any] = {"mismatches": mismatches, "mac_diff": macs, "requests": result.requests}
            if mismatches:
                cause = "; ".join(
                    f"{m['field']}: inventory {m['inventory']}, BMC reports {m['discovered']}" for m in mismatches
                )
                out[result.name] = NodeResult(result.name, ok=False, message=cause, data=data)
            else:
                note = f"{len(macs)} MAC(s) differ from the inventory: `rackctl discover --write`" if macs else ""
                out[result.name] = NodeResult(result.name, ok=True, message=note, data=data)
            ctx.progress.node_done(self.name, result.name, out[result.name].ok, out[result.name].message)
        return StageResult.from_nodes(out)
