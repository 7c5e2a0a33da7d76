"""The triton stage's live part: deploy the rendered manifests where a cluster already exists.

With ``<state-dir>/kubeconfig`` (:func:`bootstrap.kube.cluster_for`), each model's rendered manifests
(``<state-dir>/triton/<model>/k8s/*.yaml``, what ``rackctl triton render`` writes) are checked to roll
updates without dropping the service (:func:`bootstrap.triton.manifests.rolling_update_problems`), applied
server-side as rackctl (:func:`bootstrap.kube.apply.apply_objects`: Namespace first, kinds the
cluster lacks left out and named), then every model's Deployment is watched up to the timeout
(``up --triton-timeout``, ``RunOptions.triton.rollout_timeout_s``).

Outcome: a model not rolled out within the timeout fails the stage ("applied, not ready within T s: <why>"),
as does an apply the server refused. Where that apply changed the pod template of a Deployment that was
serving, the model is rolled back (:func:`rollback_objects`): its repository ConfigMap's previous data and
the previous pod template applied again as rackctl (for the template, what ``kubectl rollout undo`` does:
the Deployment controller scales the previous ReplicaSet back up; with the data, a previous pod that
restarts copies the repository it served), watched as long again, and said ("rolled back to the previous
pod template (weights W): ready"); the stage still fails. With ``maxUnavailable: 0`` the previous pods
served throughout. The manifests carry each model repository (ConfigMap
``<model>-repository``, copied by the pod's initContainer before Triton starts:
:mod:`bootstrap.triton.repository_volume`), so a ready rollout has its repository in place. Once every model
is ready, each is smoke-tested through its Service and the API server's service proxy
(:mod:`bootstrap.stages.triton.smoke`); a failed smoke fails the stage naming the model, the Service and the
error. TTFT, latencies and ok per model are in the stage's output (``smoke``) and the journal fact ``smoke``.
The stage is applied ("done") only when every object was applied, every model is ready with its repository
and every smoke answered; otherwise it ends rendered, not applied, naming what was left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bootstrap.errors import EnvironmentMissing
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.kube import Kubectl, KubeError
from bootstrap.kube.apply import (
    FIELD_MANAGER,
    ApplyReport,
    WorkloadRollout,
    apply_objects,
    object_name,
    watch_rollouts,
)
from bootstrap.stages.base import NodeResult, Rendered, StageContext, StageResult
from bootstrap.stages.triton.smoke import FACT, VIA, http_service, smoke_services
from bootstrap.triton.manifests import rolling_update_problems
from bootstrap.triton.repository_volume import carries_repository
from bootstrap.triton.weights_version import ANNOTATION, note_applied

#: What the live deploy still leaves undone (shown as "rendered + validated, not applied: <why>").
#: Said when a Deployment as written carries no repository (manifests written before rackctl shipped it).
NO_REPOSITORY = "model repositories not copied: the manifests carry no repository ConfigMap (render them again)"
MANIFESTS = ("deployment.yaml", "servicemonitor.yaml")
#: Written for a model with ``deployment.autoscaling`` only (its KEDA ScaledObject).
OPTIONAL_MANIFESTS = ("scaledobject.yaml",)


def model_objects(out_dir: Path, spec: ModelSpec) -> list[dict[str, Any]]:
    """The objects of one model's rendered manifests, as written."""
    objects = []
    for name in MANIFESTS + OPTIONAL_MANIFESTS:
        path = out_dir / spec.name / "k8s" / name
        if name in OPTIONAL_MANIFESTS and not path.is_file():
            continue
        objects += [o for o in yaml.safe_load_all(path.read_text()) if o]
    return objects


def _failed(ctx: StageContext, message: str, data: dict[str, Any], summary: str = "") -> StageResult:
    """The stage failed on the cluster: every selected node shares ``message`` (the stage is cluster-wide);
    ``summary``: the stage's own message, when it says more than the nodes' (what was applied)."""
    nodes = {n: NodeResult(n, ok=False, message=message, data=data) for n in ctx.nodes}
    return StageResult(ok=False, nodes=nodes, message=summary, data=data)


def deploy(
    ctx: StageContext, cluster: Kubectl, specs: list[ModelSpec], out_dir: Path, checks: tuple[str, ...]
) -> StageResult:
    """Apply every model's manifests to ``cluster``, watch the rollouts, and report per model; ``checks``: what
    checked the rendered artefacts before."""
    timeout_s = ctx.options.triton.rollout_timeout_s
    per_model = {spec.name: model_objects(out_dir, spec) for spec in specs}
    deployments = {name: next(o for o in objs if o["kind"] == "Deployment") for name, objs in per_model.items()}
    unsafe = [p for dep in deployments.values() for p in rolling_update_problems(dep)]
    if unsafe:
        return _failed(ctx, "refused before applying (a rackctl bug): " + "; ".join(unsafe), {})
    keys = {name: (d["metadata"]["namespace"], d["metadata"]["name"]) for name, d in deployments.items()}
    reports: dict[str, ApplyReport] = {}
    try:
        serving = {name: _serving(cluster, objects) for name, objects in per_model.items()}
        for name, objects in per_model.items():
            reports[name] = apply_objects(cluster, objects)
            annotations = deployments[name]["spec"]["template"]["metadata"].get("annotations", {})
            note_applied(ctx.state_dir, name, annotations.get(ANNOTATION))  # its version stays on the nodes
            ctx.progress.log(f"triton: {name}: {reports[name].summary()}")
        rollouts = watch_rollouts(cluster, list(keys.values()), timeout_s=timeout_s)
        rollbacks = _roll_back(ctx, cluster, keys, rollouts, per_model, serving, timeout_s)
    except KubeError as exc:
        done = "; ".join(f"{n}: {r.summary()}" for n, r in reports.items())
        return _failed(ctx, f"deploy failed: {exc.message}" + (f" (before that: {done})" if done else ""), {})
    said = {name: rollouts[keys[name]].message(timeout_s) + rollbacks.get(name, "") for name in keys}
    lines = {name: f"{name}: {said[name]}; {reports[name].summary()}" for name in keys}
    verdicts = "; ".join(f"{name}: {said[name]}" for name in keys)
    data: dict[str, Any] = {
        "deploy": {name: {"ready": rollouts[keys[name]].done, **reports[name].as_dict()} for name in keys},
        "field_manager": FIELD_MANAGER,
    }
    for name, rollback in rollbacks.items():
        data["deploy"][name]["rolled_back"] = rollback.removeprefix("; ")
    summary = "; ".join(lines.values())
    if not all(r.done for r in rollouts.values()):
        applied = "; ".join(f"{name}: {reports[name].summary()}" for name in keys)
        return _failed(ctx, verdicts, data, summary=f"applied to the cluster ({cluster.reason}): {applied}")
    deployed = f"deployed to the cluster ({cluster.reason}, field manager {FIELD_MANAGER}): {summary}"
    targets = [(spec, *http_service(per_model[spec.name])) for spec in specs]
    try:
        smokes = smoke_services(cluster.kubeconfig, targets)
    except (KubeError, EnvironmentMissing) as exc:
        return _failed(ctx, f"smoke not run: {exc.message}", data, summary=deployed)
    data[FACT] = {s.model: s.as_fact() for s in smokes}
    for node in ctx.nodes:
        ctx.record_facts(node, {FACT: data[FACT]})
    for smoke in smokes:
        ctx.progress.log(f"triton: smoke {'ok' if smoke.ok else 'FAILED'}: {smoke.summary()}")
    failed = [s.failure() for s in smokes if not s.ok]
    if failed:
        return _failed(ctx, "; ".join(failed), data, summary=deployed)
    smoked = ", ".join(s.summary() for s in smokes)
    message = f"{len(specs)} model(s) {deployed}; each smoke-tested through its Service ({VIA}): {smoked}"
    undone = _left_undone(deployments, reports)
    if not undone:
        return StageResult.applied(ctx.nodes, message=message, data=data)
    rendered = Rendered(out_dir, (*checks, "the cluster's admission (kubectl apply --server-side)"), "; ".join(undone))
    result = StageResult.not_applied(ctx.nodes, rendered, message=message)
    result.data = data
    for res in result.nodes.values():
        res.data = data
    return result


def _serving(cluster: Kubectl, objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The live Deployment and ConfigMaps of one model's ``objects`` (what it serves before this run), by
    :func:`bootstrap.kube.apply.object_name`; those not in the cluster are left out."""
    live = {}
    for obj in objects:
        if obj["kind"] in {"Deployment", "ConfigMap"}:
            meta = obj["metadata"]
            found = cluster.get_object(obj["kind"].lower(), meta["name"], meta.get("namespace"))
            if found is not None:
                live[object_name(obj)] = found
    return live


def rollback_objects(
    rendered: list[dict[str, Any]], before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """What rackctl applies to put a model back where it was: the model's rendered Deployment with the pod
    template it served (what ``kubectl rollout undo`` does), and each rendered ConfigMap whose data this run
    changed (the repository the pod's initContainer copies) with its data as it was; nothing where the pod
    template is unchanged or there was no Deployment before. Whole objects, as rackctl applies them: a
    server-side apply of only the changed fields would give up rackctl's others (the selector, the
    strategy). ``before``/``after``: :func:`_serving` before and after this run's apply."""
    deployment = next((o for o in rendered if o["kind"] == "Deployment"), None)
    if deployment is None:
        return []
    key = object_name(deployment)
    if key not in before or before[key]["spec"]["template"] == after.get(key, {}).get("spec", {}).get("template"):
        return []
    out = []
    for obj in rendered:
        name = object_name(obj)
        if obj["kind"] != "ConfigMap" or name not in before:
            continue
        was = {k: before[name][k] for k in ("data", "binaryData") if before[name].get(k)}
        if was != {k: after.get(name, {})[k] for k in ("data", "binaryData") if after.get(name, {}).get(k)}:
            out.append({**{k: v for k, v in obj.items() if k not in ("data", "binaryData")}, **was})
    spec = {**deployment["spec"], "template": before[key]["spec"]["template"]}
    out.append({**deployment, "spec": spec})
    return out


def _roll_back(  # noqa: PLR0917 - one deploy's parts
    ctx: StageContext,
    cluster: Kubectl,
    keys: dict[str, tuple[str, str]],
    rollouts: dict[tuple[str, str], WorkloadRollout],
    per_model: dict[str, list[dict[str, Any]]],
    serving: dict[str, dict[str, dict[str, Any]]],
    timeout_s: float,
) -> dict[str, str]:
    """Roll each model not rolled out back to the repository and pod template it served before this run
    (where it had a Deployment and this run changed its template); per model, what was done (appended to
    its rollout's message)."""
    out: dict[str, str] = {}
    for name, key in keys.items():
        if rollouts[key].done:
            continue
        objects = rollback_objects(per_model[name], serving[name], _serving(cluster, per_model[name]))
        if not objects:
            continue
        template = objects[-1]["spec"]["template"]
        weights = template.get("metadata", {}).get("annotations", {}).get(ANNOTATION)
        ctx.progress.log(f"triton: {name}: not ready; rolling back to the previous pod template (weights {weights})")
        apply_objects(cluster, objects)
        back = watch_rollouts(cluster, [key], timeout_s=timeout_s)[key]
        note_applied(ctx.state_dir, name, weights)
        verdict = "ready" if back.done else f"not ready within {timeout_s:g} s either: {back.why}"
        out[name] = f"; rolled back to the previous pod template (weights {weights or 'unversioned'}): {verdict}"
    return out


def _left_undone(deployments: dict[str, dict[str, Any]], reports: dict[str, ApplyReport]) -> list[str]:
    """What keeps a deploy whose models are all ready and answering from being "done"."""
    undone = []
    if not all(carries_repository(d) for d in deployments.values()):
        undone.append(NO_REPOSITORY)
    left_out = [f"{name}: {obj} ({why})" for name, r in reports.items() for obj, why in r.not_applied.items()]
    if left_out:
        undone.append("objects not applied: " + "; ".join(left_out))
    return undone
