"""The triton stage: render and check every model repository and its manifests; deploy them to a live cluster.

A cluster-wide stage: it needs the inventory's ``models:``, not the nodes' state, so it runs on any
node state (``--stages triton`` works before the cluster exists). The artefacts go under
``<state-dir>/triton``. Without a cluster (no ``<state-dir>/kubeconfig``) the result is "rendered +
validated, not applied" (journalled ``rendered``, no node moves), and each node's reason names the earlier
stages the journal shows as not applied on it. Where a cluster exists, the manifests are deployed to it and
the rollouts watched (:mod:`bootstrap.stages.triton.deploy`): a model not ready in time fails the stage; all
ready, each model is smoke-tested through its Service and the API server's service proxy (a failed smoke fails
the stage; each pod's initContainer put its model repository in place). The stage is applied only then, with
every object applied; without a cluster it ends "rendered + validated, not applied".
"""

from __future__ import annotations

from bootstrap.inventory.served_models import ModelSpec
from bootstrap.journal.states import NodeState, rank
from bootstrap.kube import KUBECONFIG, Kubectl, cluster_for
from bootstrap.kube.service_proxy import service_path
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
from bootstrap.stages.triton.deploy import deploy
from bootstrap.stages.triton.smoke import PORT, http_service, smoke_entry
from bootstrap.triton.manifests import services
from bootstrap.triton.stage import run_triton_stage

#: Why nothing is deployed (shown as "rendered + validated, not applied: <why>").
WHY = (
    f"no cluster to deploy them to: no <state-dir>/{KUBECONFIG} (the kubernetes stage does not create the "
    "cluster yet: kubeadm init/join is not built); with the kubeconfig of an existing cluster the stage deploys "
    "them, watches the rollouts and smoke-tests each model"
)
#: What checks the stage's artefacts.
CHECKS = (
    "model repositories: every config.pbtxt parsed by Triton's protobuf, the ensemble complete",
    "manifests: kubernetes-validate --strict",
)


def smoke_action(spec: ModelSpec) -> str:
    """What the plan says the smoke of ``spec`` will do, once its Deployment is ready."""
    namespace, service = http_service(services(spec))
    asks = "generate and generate_stream" if spec.streaming else "generate (the model does not stream)"
    return (
        f"`rackctl triton smoke` of {spec.name} once its Deployment is ready: Service {namespace}/{service} through "
        f"the API server's service proxy ({service_path(namespace, service, PORT)}/), model {smoke_entry(spec)}, "
        f"{asks}; TTFT and latency recorded, a failed smoke fails the stage"
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
    description = (
        "Render + check the Triton model repositories and their Kubernetes manifests; where a cluster exists "
        "(<state-dir>/kubeconfig), apply them (each pod's initContainer copies its model repository), watch the "
        "rollouts and smoke-test each model through its Service"
    )
    lifecycle = Lifecycle(NodeState.REGISTERED)
    #: without a cluster it only renders; :meth:`applies_in` says when it applies
    applies = False
    #: the inventory's ``models:`` are converged on every ``up`` (applied server-side: unchanged objects stay)
    reconciles = True

    def applies_in(self, ctx: StageContext) -> bool:
        """It applies where a cluster exists (``<state-dir>/kubeconfig``) and models are declared."""
        return bool(ctx.inventory.models) and cluster_for(ctx.state_dir).deployed

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        models = [m.name for m in ctx.inventory.models]
        if not models:
            return [PlannedAction(self.name, None, "nothing to do: no models declared", skip="no models")]
        actions = [
            PlannedAction(
                self.name, None, f"render + check repository and manifests of {m}; {NOT_APPLIED}", applies=False
            )
            for m in models
        ]
        if cluster_for(ctx.state_dir).deployed:
            actions.append(
                PlannedAction(
                    self.name,
                    None,
                    f"kubectl apply --server-side --field-manager=rackctl of the manifests of {', '.join(models)} to "
                    f"the cluster of {ctx.state_dir / KUBECONFIG} (Namespace first; kinds without their CRD left "
                    f"out), then each Deployment watched until ready, up to {ctx.options.triton.rollout_timeout_s:g} s "
                    "(each pod's initContainer copies its model repository from ConfigMap <model>-repository); "
                    "a model whose new pod template is not ready by then is rolled back to the template and "
                    "repository it served",
                )
            )
            actions += [PlannedAction(self.name, None, smoke_action(spec)) for spec in ctx.inventory.models]
        return actions

    def run(self, ctx: StageContext) -> StageResult:
        if not ctx.inventory.models:
            return StageResult(ok=True, message="no models declared in the inventory: nothing to render or deploy")
        load_check = ctx.options.triton.load_check
        result = run_triton_stage(
            ctx.inventory, ctx.state_dir / "triton", load_check=load_check, state_dir=ctx.state_dir
        )
        if not result["ok"]:
            said = [p for c in result["checks"] for p in c["problems"]]
            said += [p for m in result["manifests"] for p in m.get("problems", [])]
            problems = [f"{p['message']} (fix: {p['fix']})" if p.get("fix") else p["message"] for p in said]
            message = "; ".join(problems[:5]) or "triton checks failed"
            # the stage is cluster-wide: every selected node shares its outcome
            return StageResult(
                ok=False, nodes={n: NodeResult(n, ok=False, message=message) for n in ctx.nodes}, message=message
            )
        checks = (*CHECKS, "tritonserver load check") if result["load_checks"] else CHECKS
        cluster = cluster_for(ctx.state_dir)
        if isinstance(cluster, Kubectl):  # a cluster exists: deploy to it
            return deploy(ctx, cluster, list(ctx.inventory.models), ctx.state_dir / "triton", checks)
        engines = "TensorRT-LLM engines: checked where they live (`rackctl triton check --path-map`)"
        rendered = Rendered(ctx.state_dir / "triton", checks, WHY, (engines,))
        message = f"{len(ctx.inventory.models)} model(s) rendered and checked under {result['out_dir']}"
        per_node = {n: node_why(ctx, n) for n in ctx.nodes}
        return StageResult.not_applied(ctx.nodes, rendered, message=message, why_per_node=per_node)
