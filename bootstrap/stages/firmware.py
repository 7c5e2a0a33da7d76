"""The firmware stage: check each node's BIOS and iDRAC versions against the inventory's baseline.

It uses the facts the discover stage recorded (no extra BMC traffic). A node below the baseline fails
with the versions named: updating it is the day-2 firmware rollout (``redfish_tools.firmware`` has
SimpleUpdate with its task; the rollout command is not built yet), so ``up`` stops there rather than run
the rest on old firmware. Without a baseline for a model, its nodes pass and the versions are reported.
"""

from __future__ import annotations

from bootstrap.inventory.profiles import version_tuple
from bootstrap.stages.base import NodeResult, PlannedAction, Stage, StageContext, StageResult, register_stage


@register_stage
class FirmwareStage(Stage):
    """Firmware baseline check (read-only)."""

    name = "firmware"
    description = "Check BIOS and iDRAC firmware against the inventory's baseline"

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        actions = []
        for hostname in ctx.nodes:
            model = ctx.node(hostname).model
            has = model in ctx.inventory.firmware.baseline
            what = f"compare with the {model} baseline" if has else f"no baseline for {model}: report versions"
            actions.append(PlannedAction(self.name, hostname, what))
        return actions

    def run(self, ctx: StageContext) -> StageResult:
        out: dict[str, NodeResult] = {}
        for hostname in ctx.nodes:
            out[hostname] = self._check(ctx, hostname)
            ctx.progress.node_done(self.name, hostname, out[hostname].ok, out[hostname].message)
        return StageResult.from_nodes(out)

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
                message="; ".join(behind) + " (update it, then `rackctl up` again)",
                data=found,
            )
        return NodeResult(hostname, ok=True, message="at or above the baseline", data=found)
