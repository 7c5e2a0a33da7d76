"""Apply rendered manifests to a live cluster and watch Deployments roll out (the triton stage, with a kubeconfig).

:func:`apply_objects` applies with ``kubectl apply --server-side --field-manager=rackctl``: Namespaces first,
then the rest; an object whose kind the cluster does not serve (a ServiceMonitor without the Prometheus
operator's CRDs) is not sent and is reported by name with the reason. Each object is reported ``created``,
``changed`` or ``unchanged``: the object read before and after, compared without ``resourceVersion``,
``managedFields`` and ``status`` (a 1.20 API server bumps ``resourceVersion`` on some no-op applies, rewriting
only ``managedFields``; ``metadata.generation`` is compared, so a spec change that would roll a Deployment
shows).

:func:`watch_workloads` polls Deployments, DaemonSets and StatefulSets until each has rolled out as
``kubectl rollout status`` judges it (the controller observed the current generation; for a Deployment
updated, ready and available replicas all equal to the wanted count, no old replica left; for a DaemonSet
every scheduled pod updated and available; for a StatefulSet every replica updated and ready; for a Prometheus
or an Alertmanager, whose StatefulSet the Prometheus operator makes, the ``Available`` condition the operator
reports for the current generation) or the timeout passes; a workload not rolled out is reported with its counts
and its conditions, or, when it has no status at all, that no controller of its kind has observed it.
:func:`watch_rollouts` is the same for Deployments (the triton stage); the Helm installs
(:mod:`bootstrap.stages.helm_install`) watch every kind.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bootstrap.kube.api import LiveApi

#: The field manager every rackctl apply uses (visible in each object's ``managedFields``).
FIELD_MANAGER = "rackctl"
#: Where the CRDs of a group rackctl renders objects of come from (said when they are missing).
CRD_SOURCES = {
    "monitoring.coreos.com": "; kube-prometheus-stack installs the Prometheus operator's CRDs",
    "keda.sh": "; the keda chart installs KEDA's CRDs (a model with deployment.autoscaling adds it)",
}


def object_name(obj: dict[str, Any]) -> str:
    """``Kind/namespace/name`` (``Kind/name`` for cluster-scoped objects)."""
    meta = obj.get("metadata", {})
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')}/{where}{meta.get('name')}"


@dataclass
class ApplyReport:
    """What :func:`apply_objects` did: per object ``created``/``changed``/``unchanged``, and what it left out."""

    applied: dict[str, str] = field(default_factory=dict)
    not_applied: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return any(status != "unchanged" for status in self.applied.values())

    def summary(self) -> str:
        counts = {s: sum(1 for v in self.applied.values() if v == s) for s in ("created", "changed", "unchanged")}
        text = f"{len(self.applied)} object(s) applied (" + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + ")"
        if self.not_applied:
            text += "; not applied: " + "; ".join(f"{name} ({why})" for name, why in self.not_applied.items())
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"applied": self.applied, "not_applied": self.not_applied}


def unserved(api: LiveApi, objects: list[dict[str, Any]]) -> dict[str, str]:
    """The objects whose kind the cluster does not serve, each with why (the CRD is missing)."""
    served: dict[str, set[str]] = {}
    out = {}
    for obj in objects:
        version, kind = str(obj.get("apiVersion")), str(obj.get("kind"))
        if version not in served:
            served[version] = api.served_kinds(version)
        if kind not in served[version]:
            hint = CRD_SOURCES.get(version.split("/", maxsplit=1)[0], "")
            out[object_name(obj)] = f"the cluster serves no {kind} in {version}: its CRD is not installed{hint}"
    return out


#: What a write may move without the object changing: a 1.20 API server rewrites ``managedFields`` (and so
#: bumps ``resourceVersion``) on some no-op applies; ``status`` is the controllers'.
VOLATILE_METADATA = ("resourceVersion", "managedFields")


def content(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as the server has it, less what moves without a change (:data:`VOLATILE_METADATA`, status);
    ``metadata.generation`` stays, so a spec change shows."""
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in VOLATILE_METADATA}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def _contents(api: LiveApi, manifest: Path) -> dict[str, dict[str, Any]]:
    return {object_name(o): content(o) for o in api.get_manifest(manifest)}


def _apply_batch(api: LiveApi, objects: list[dict[str, Any]], workdir: Path, report: ApplyReport) -> None:
    if not objects:
        return
    manifest = workdir / f"batch-{len(report.applied)}.yaml"
    manifest.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    before = _contents(api, manifest)
    api.apply_server_side(manifest, field_manager=FIELD_MANAGER)
    after = _contents(api, manifest)
    for obj in objects:
        name = object_name(obj)
        status = "created" if name not in before else "unchanged" if before[name] == after.get(name) else "changed"
        report.applied[name] = status


def apply_objects(api: LiveApi, objects: list[dict[str, Any]]) -> ApplyReport:
    """Apply ``objects`` server-side as rackctl: Namespaces first, then the others the cluster serves."""
    report = ApplyReport(not_applied=unserved(api, objects))
    sendable = [o for o in objects if object_name(o) not in report.not_applied]
    with tempfile.TemporaryDirectory(prefix="rackctl-apply-") as tmp:
        _apply_batch(api, [o for o in sendable if o.get("kind") == "Namespace"], Path(tmp), report)
        _apply_batch(api, [o for o in sendable if o.get("kind") != "Namespace"], Path(tmp), report)
    return report


#: The Prometheus operator's kinds whose pods it runs (a StatefulSet of its own): the resource to read each by.
OPERATED_KINDS = {
    "Prometheus": "prometheuses.monitoring.coreos.com",
    "Alertmanager": "alertmanagers.monitoring.coreos.com",
}
#: The workload kinds :func:`watch_workloads` judges.
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", *OPERATED_KINDS)


@dataclass
class WorkloadRollout:
    """Where one workload's rollout stands (a Deployment unless ``kind`` says otherwise)."""

    namespace: str
    name: str
    wanted: int = 0
    ready: int = 0
    done: bool = False
    why: str = "not read yet"
    kind: str = "Deployment"

    def message(self, timeout_s: float) -> str:
        if self.done:
            return f"deployed, ready {self.ready}/{self.wanted}"
        return f"applied, not ready within {timeout_s:g} s: {self.why}"


def _not_observed(kind: str, generation: int, observed: int) -> str:
    return (
        f"no {kind} controller has observed generation {generation} yet (observedGeneration {observed}; "
        "is kube-controller-manager running?)"
    )


def _conditions(status: dict[str, Any]) -> str:
    found = [
        f"{c.get('type')}={c.get('status')} ({c.get('reason', '')}: {c.get('message', '')})"
        for c in status.get("conditions") or []
    ]
    return "; ".join(found) or "none"


def _generations(obj: dict[str, Any]) -> tuple[int, int]:
    """``metadata.generation`` and ``status.observedGeneration``."""
    return int(obj.get("metadata", {}).get("generation", 0)), int(obj.get("status", {}).get("observedGeneration", 0))


def rollout_state(deployment: dict[str, Any] | None, namespace: str, name: str) -> WorkloadRollout:
    """Judge a Deployment as ``kubectl rollout status`` does; ``why`` says what is missing."""
    if deployment is None:
        return WorkloadRollout(namespace, name, why=f"Deployment {namespace}/{name} is not in the cluster")
    spec, status = deployment.get("spec", {}), deployment.get("status", {})
    wanted = int(spec.get("replicas", 1))
    generation, observed = _generations(deployment)
    counts = {k: int(status.get(f"{k}Replicas", 0)) for k in ("updated", "ready", "available")}
    total = int(status.get("replicas", 0))
    out = WorkloadRollout(namespace, name, wanted=wanted, ready=counts["ready"])
    if observed < generation:
        out.why = _not_observed("Deployment", generation, observed)
        return out
    out.done = (
        counts["updated"] == wanted and total == wanted and counts["available"] == wanted and counts["ready"] == wanted
    )
    out.why = (
        f"updated {counts['updated']}, ready {counts['ready']}, available {counts['available']} of {wanted} "
        f"replica(s), {total} in all; conditions: {_conditions(status)}"
    )
    return out


def daemonset_state(daemonset: dict[str, Any] | None, namespace: str, name: str) -> WorkloadRollout:
    """Judge a DaemonSet as ``kubectl rollout status`` does: every scheduled pod updated and available."""
    if daemonset is None:
        return WorkloadRollout(
            namespace, name, kind="DaemonSet", why=f"DaemonSet {namespace}/{name} is not in the cluster"
        )
    status = daemonset.get("status", {})
    generation, observed = _generations(daemonset)
    wanted = int(status.get("desiredNumberScheduled", 0))
    updated, available = int(status.get("updatedNumberScheduled", 0)), int(status.get("numberAvailable", 0))
    out = WorkloadRollout(namespace, name, wanted=wanted, ready=int(status.get("numberReady", 0)), kind="DaemonSet")
    if observed < generation:
        out.why = _not_observed("DaemonSet", generation, observed)
        return out
    out.done = updated == wanted and available == wanted
    out.why = (
        f"updated {updated}, ready {out.ready}, available {available} of {wanted} scheduled pod(s); "
        f"conditions: {_conditions(status)}"
    )
    return out


def statefulset_state(statefulset: dict[str, Any] | None, namespace: str, name: str) -> WorkloadRollout:
    """Judge a StatefulSet as ``kubectl rollout status`` does: every replica ready and of the update revision."""
    if statefulset is None:
        return WorkloadRollout(
            namespace, name, kind="StatefulSet", why=f"StatefulSet {namespace}/{name} is not in the cluster"
        )
    spec, status = statefulset.get("spec", {}), statefulset.get("status", {})
    generation, observed = _generations(statefulset)
    wanted = int(spec.get("replicas", 1))
    ready, updated = int(status.get("readyReplicas", 0)), int(status.get("updatedReplicas", 0))
    out = WorkloadRollout(namespace, name, wanted=wanted, ready=ready, kind="StatefulSet")
    if observed < generation:
        out.why = _not_observed("StatefulSet", generation, observed)
        return out
    revised = status.get("updateRevision") == status.get("currentRevision") or updated == wanted
    out.done = ready == wanted and revised
    out.why = f"ready {ready}, updated {updated} of {wanted} replica(s); conditions: {_conditions(status)}"
    return out


def operated_state(kind: str, obj: dict[str, Any] | None, namespace: str, name: str) -> WorkloadRollout:
    """Judge a Prometheus or an Alertmanager as the Prometheus operator reports it: its ``Available`` condition
    ``True`` for the current generation (``Degraded``: some of its pods are not ready; ``False``: none is)."""
    if obj is None:
        return WorkloadRollout(namespace, name, kind=kind, why=f"{kind} {namespace}/{name} is not in the cluster")
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    wanted, ready = int(spec.get("replicas", 1)), int(status.get("availableReplicas", 0))
    out = WorkloadRollout(namespace, name, wanted=wanted, ready=ready, kind=kind)
    generation = int(obj.get("metadata", {}).get("generation", 0))
    found = [c for c in status.get("conditions") or [] if c.get("type") == "Available"]
    if not found or int(found[0].get("observedGeneration", 0)) < generation:
        out.why = (
            f"the Prometheus operator has not reported on generation {generation} of this {kind} yet "
            "(is the operator running?)"
        )
        return out
    out.done = found[0].get("status") == "True"
    out.why = f"available {ready} of {wanted} replica(s); conditions: {_conditions(status)}"
    return out


_JUDGES: dict[str, Callable[[dict[str, Any] | None, str, str], WorkloadRollout]] = {
    "Deployment": rollout_state,
    "DaemonSet": daemonset_state,
    "StatefulSet": statefulset_state,
    **{kind: functools.partial(operated_state, kind) for kind in OPERATED_KINDS},
}


def workload_state(kind: str, obj: dict[str, Any] | None, namespace: str, name: str) -> WorkloadRollout:
    """Judge one workload of a kind in :data:`WORKLOAD_KINDS`."""
    return _JUDGES[kind](obj, namespace, name)


def watch_workloads(
    api: LiveApi,
    workloads: list[tuple[str, str, str]],
    *,
    timeout_s: float,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[tuple[str, str, str], WorkloadRollout]:
    """Poll each ``(kind, namespace, name)`` workload until all rolled out or ``timeout_s`` passed."""
    deadline = clock() + timeout_s
    states: dict[tuple[str, str, str], WorkloadRollout] = {}
    while True:
        for kind, namespace, name in workloads:
            key = (kind, namespace, name)
            if key not in states or not states[key].done:
                found = api.get_object(OPERATED_KINDS.get(kind, kind.lower()), name, namespace)
                states[key] = workload_state(kind, found, namespace, name)
        if all(s.done for s in states.values()) or clock() >= deadline:
            return states
        sleep(min(poll_s, max(0.0, deadline - clock())))


def watch_rollouts(
    api: LiveApi,
    deployments: list[tuple[str, str]],
    *,
    timeout_s: float,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[tuple[str, str], WorkloadRollout]:
    """Poll each ``(namespace, name)`` Deployment until all rolled out or ``timeout_s`` passed."""
    states = watch_workloads(
        api,
        [("Deployment", ns, name) for ns, name in deployments],
        timeout_s=timeout_s,
        poll_s=poll_s,
        clock=clock,
        sleep=sleep,
    )
    return {(ns, name): state for (_, ns, name), state in states.items()}
