"""The bios stage: stage each node's per-role BIOS profile and its apply-on-reset job.

The Lifecycle Controller readiness gate, the registry validation and the job come from
``redfish_tools.bios``. Nothing reboots here: the job runs at the node's next boot (the provision stage
powers it on), unless ``rackctl bios apply --reboot`` is used. A node whose settings are rejected by the
BIOS registry fails with the attribute named.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bootstrap.oob import desired_bios, policy_for, targets_for
from bootstrap.stages.base import NodeResult, PlannedAction, Stage, StageContext, StageResult, register_stage
from redfish_tools.bios import apply_bios
from redfish_tools.fleet import run_fleet


@register_stage
class BiosStage(Stage):
    """Per-role BIOS profiles (UEFI, performance, virtualization, SR-IOV for GPU workers)."""

    name = "bios"
    description = "Stage each node's BIOS profile and its apply-on-reset job (no reboot)"

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        actions = []
        for hostname in ctx.nodes:
            node = ctx.node(hostname)
            profile = ctx.inventory.node_bios_profile(node) or "(none)"
            actions.append(PlannedAction(self.name, hostname, f"stage BIOS profile {profile}; applies at next boot"))
        return actions

    def run(self, ctx: StageContext) -> StageResult:
        inv = ctx.inventory
        nodes = [ctx.node(n) for n in ctx.nodes]
        wanted = {n.hostname: desired_bios(inv, n) for n in nodes}
        reboot = ctx.options.bios.reboot  # only `rackctl bios apply --reboot`
        targets = targets_for(inv, nodes)
        if ctx.options.insecure:  # `up --insecure`: an explicit opt-out of BMC certificate checks
            targets = [replace(t, insecure=True) for t in targets]

        def operation(conn: Any) -> Any:
            # one journalled step per node: a resumed run does not stage the profile twice
            with ctx.step(conn.target.name, "bios-profile") as step:
                if step.already_done:
                    return None
                outcome = apply_bios(conn, wanted[conn.target.name], reboot=reboot)
                if outcome.plan.problems:
                    raise BiosRejected("; ".join(outcome.plan.problems))
                step.detail = {"state": outcome.state, "job": outcome.job.id if outcome.job else None}
                return outcome

        out: dict[str, NodeResult] = {}
        for result in run_fleet(targets, operation, policy=policy_for(ctx.state_dir)):
            name = result.name
            if not result.ok:
                cause = (result.error or {}).get("message", "BIOS staging failed")
                out[name] = NodeResult(name, ok=False, message=cause)
            elif result.value is None:
                out[name] = NodeResult(name, ok=True, message="already staged in an earlier run")
            else:
                outcome = result.value
                message = f"BIOS {outcome.state}" + (
                    " (applies at the next boot)" if outcome.state == "scheduled" else ""
                )
                out[name] = NodeResult(
                    name, ok=True, message=message, changed=outcome.state != "unchanged", data=outcome.as_dict()
                )
            ctx.progress.node_done(self.name, name, out[name].ok, out[name].message)
        return StageResult.from_nodes(out)


class BiosRejected(RuntimeError):
    """The BIOS registry refused the profile (the message names the attributes)."""
