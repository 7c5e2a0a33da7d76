"""The triton stage: render and check every model repository and its Kubernetes manifests.

A cluster-wide stage: it needs the inventory's ``models:``, not the nodes' state, so it runs on any
node state (``--stages triton`` works before the cluster exists). The artefacts go under
``<state-dir>/triton``. Applying the manifests needs the kubernetes stage (not implemented yet): until
then the result says so and the stage reports what it rendered and checked.
"""

from __future__ import annotations

from bootstrap.journal.states import NodeState
from bootstrap.stages.base import (
    Lifecycle,
    NodeResult,
    PlannedAction,
    Stage,
    StageContext,
    StageResult,
    register_stage,
)
from bootstrap.triton.stage import run_triton_stage


@register_stage
class TritonStage(Stage):
    """Triton + TensorRT-LLM model repositories and manifests for the inventory's models."""

    name = "triton"
    description = "Render and check the Triton model repositories and their Kubernetes manifests"
    lifecycle = Lifecycle(NodeState.REGISTERED)

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        models = [m.name for m in ctx.inventory.models]
        if not models:
            return [PlannedAction(self.name, None, "nothing to do: no models declared", skip="no models")]
        return [PlannedAction(self.name, None, f"render + check repository and manifests of {m}") for m in models]

    def run(self, ctx: StageContext) -> StageResult:
        if not ctx.inventory.models:
            return StageResult(ok=True, message="no models declared in the inventory")
        load_check = bool(ctx.options.extra.get("triton_load_check", False))
        result = run_triton_stage(ctx.inventory, ctx.state_dir / "triton", load_check=load_check)
        problems = [p["message"] for c in result["checks"] for p in c["problems"]]
        problems += [p["message"] for m in result["manifests"] for p in m.get("problems", [])]
        message = (
            f"{len(ctx.inventory.models)} model(s) rendered and checked under {result['out_dir']}; "
            "applying them needs the kubernetes stage"
            if result["ok"]
            else "; ".join(problems[:5]) or "triton checks failed"
        )
        # the stage is cluster-wide: every selected node shares its outcome
        nodes = {n: NodeResult(n, ok=result["ok"], message="" if result["ok"] else message) for n in ctx.nodes}
        return StageResult(ok=result["ok"], nodes=nodes, message=message)
