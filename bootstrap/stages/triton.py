"""The triton stage: render and check every model repository and its Kubernetes manifests; deploys nothing yet.

A cluster-wide stage: it needs the inventory's ``models:``, not the nodes' state, so it runs on any
node state (``--stages triton`` works before the cluster exists). The artefacts go under
``<state-dir>/triton``. Deploying them needs the kubernetes and nvidia stages applied and a deploy step
that is not built: the result is "rendered + validated, not applied" (journalled ``rendered``, no node
moves), and each node's reason names the earlier stages the journal shows as not applied on it.
"""

from __future__ import annotations

from bootstrap.journal.states import NodeState, rank
from bootstrap.stages.base import (
    NOT_APPLIED,
    Lifecycle,
    NodeResult,
    PlannedAction,
    Rendered,
    Stage,
    StageContext,
    StageResult,
    register_stage,
)
from bootstrap.triton.stage import run_triton_stage

#: Why nothing is deployed (shown as "rendered + validated, not applied: <why>").
WHY = (
    "rackctl cannot deploy them yet: the deploy step (model repositories onto the volumes, kubectl apply, "
    "readiness and smoke) is not built, and it needs the kubernetes and nvidia stages applied"
)
#: What checks the stage's artefacts.
CHECKS = (
    "model repositories: every config.pbtxt parsed by Triton's protobuf, the ensemble complete",
    "manifests: kubernetes-validate --strict",
)


def node_why(ctx: StageContext, node: str) -> str:
    """The stage's reason, plus the earlier stages not applied on ``node`` (journal) or its state."""
    earlier = [r.stage for r in ctx.journal.not_applied(node) if r.stage != ctx.stage]
    if earlier:
        return f"{WHY}; {', '.join(earlier)} {NOT_APPLIED} on this node"
    state = ctx.state(node)
    if 0 <= rank(state) < rank(NodeState.READY):
        return f"{WHY}; the node is {state.value}, the deploy needs it ready"
    return WHY


@register_stage
class TritonStage(Stage):
    """Triton + TensorRT-LLM model repositories and manifests for the inventory's models."""

    name = "triton"
    description = "Render + check the Triton model repositories and their Kubernetes manifests (not deployed yet)"
    lifecycle = Lifecycle(NodeState.REGISTERED)
    applies = False

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        models = [m.name for m in ctx.inventory.models]
        if not models:
            return [PlannedAction(self.name, None, "nothing to do: no models declared", skip="no models")]
        return [
            PlannedAction(
                self.name, None, f"render + check repository and manifests of {m}; {NOT_APPLIED}", applies=False
            )
            for m in models
        ]

    def run(self, ctx: StageContext) -> StageResult:
        if not ctx.inventory.models:
            return StageResult(ok=True, message="no models declared in the inventory: nothing to render or deploy")
        load_check = bool(ctx.options.extra.get("triton_load_check", False))
        result = run_triton_stage(ctx.inventory, ctx.state_dir / "triton", load_check=load_check)
        if not result["ok"]:
            problems = [p["message"] for c in result["checks"] for p in c["problems"]]
            problems += [p["message"] for m in result["manifests"] for p in m.get("problems", [])]
            message = "; ".join(problems[:5]) or "triton checks failed"
            # the stage is cluster-wide: every selected node shares its outcome
            return StageResult(
                ok=False, nodes={n: NodeResult(n, ok=False, message=message) for n in ctx.nodes}, message=message
            )
        checks = (*CHECKS, "tritonserver load check") if result["load_checks"] else CHECKS
        engines = "TensorRT-LLM engines: checked where they live (`rackctl triton check --path-map`)"
        rendered = Rendered(ctx.state_dir / "triton", checks, WHY, (engines,))
        message = f"{len(ctx.inventory.models)} model(s) rendered and checked under {result['out_dir']}"
        per_node = {n: node_why(ctx, n) for n in ctx.nodes}
        return StageResult.not_applied(ctx.nodes, rendered, message=message, why_per_node=per_node)
