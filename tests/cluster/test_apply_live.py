"""Node labels/taints and Triton manifests applied to a real kube-apiserver 1.37.2 through ``kubectl``.

Real parts: the API server (tests/cluster/apiserver.py), the ``kubectl`` on PATH (the Google Cloud CLI's
v1.32 client), :class:`bootstrap.kube.Kubectl`. No kubelet, scheduler or controller-manager runs: where
the Deployment controller and the kubelet would write a Deployment's status, the test writes it through the
status subresource and says so (:func:`tests.kube_objects.mark_deployment_ready`).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from bootstrap.cluster.render import render_cluster
from bootstrap.inventory import load_inventory
from bootstrap.kube import Kubectl
from bootstrap.kube.apply import FIELD_MANAGER, apply_objects, content, rollout_state, watch_rollouts
from bootstrap.kube.node_labels import MANAGED_LABELS, MANAGED_TAINTS, Wanted, apply_labels, wanted_from_file
from bootstrap.stages.kubernetes.labels import labels_text
from bootstrap.triton.manifests import build_manifests, deployment, rolling_update_problems
from tests import crds as generated_crds
from tests.cluster.apiserver_apply import apply_crds
from tests.kube_objects import MERGE, KubeObjects, crd_absent, mark_deployment_ready
from tests.triton.conftest import make_spec

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"
SERVICEMONITOR_CRD = "servicemonitors.monitoring.coreos.com"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _taints(node: dict[str, Any]) -> list[str]:
    return sorted(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in node["spec"].get("taints") or [])


def test_rendered_labels_file_gives_role_model_gpu_product_and_the_operator_labels() -> None:
    wanted = wanted_from_file(labels_text(render_cluster(load_inventory(EXAMPLE))))
    gpu = wanted["gpu-xe9680-01"].labels
    assert gpu["rackctl.io/role"] == "worker" and gpu["rackctl.io/model"] == "XE9680"
    assert gpu["rackctl.io/gpu-type"] == "H100-SXM" and gpu["rackctl.io/gpu-count"] == "8"
    assert gpu["node-role.kubernetes.io/worker"] == ""
    assert wanted["head-01"].labels["rackctl.io/role"] == "head"
    assert "rackctl.io/gpu-type" not in wanted["head-01"].labels


def test_labels_and_taints_applied_idempotent_owned_ones_removed_user_ones_kept(
    kube: KubeObjects, kubeconfig: Path
) -> None:
    node = _name("lt-gpu")
    kube.node(node, labels={"owner": "alice"})  # a user's label, there before rackctl
    user_taint = {"key": "maintenance", "value": "disk", "effect": "PreferNoSchedule"}
    kube.call("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": [user_taint]}}, headers=MERGE)
    api = Kubectl(kubeconfig, timeout_s=30)
    first = Wanted({"rackctl.io/role": "worker", "rack": "r1", "tier": "gold"}, [GPU_TAINT])

    out = apply_labels(api, node, first)
    assert out.joined and out.changes == [
        "set rack=r1",
        "set rackctl.io/role=worker",
        "set tier=gold",
        "taint nvidia.com/gpu=present:NoSchedule added",
    ]
    assert out.message.startswith("labels/taints applied: set rack=r1")
    got = kube.get_node(node)
    labels = got["metadata"]["labels"]
    assert {k: labels[k] for k in ("rack", "tier", "rackctl.io/role", "owner")} == {
        "rack": "r1",
        "tier": "gold",
        "rackctl.io/role": "worker",
        "owner": "alice",
    }
    assert got["metadata"]["annotations"][MANAGED_LABELS] == "rack,rackctl.io/role,tier"
    assert got["metadata"]["annotations"][MANAGED_TAINTS] == "nvidia.com/gpu:NoSchedule"
    assert _taints(got) == ["maintenance=disk:PreferNoSchedule", "nvidia.com/gpu=present:NoSchedule"]

    version = got["metadata"]["resourceVersion"]
    again = apply_labels(api, node, first)
    assert again.changes == [] and again.message.startswith("labels/taints applied: unchanged (3 labels, 1 taints")
    assert kube.get_node(node)["metadata"]["resourceVersion"] == version  # nothing written

    kube.call("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {"team": "infer"}}}, headers=MERGE)
    second = Wanted({"rackctl.io/role": "worker", "rack": "r2"}, [])  # tier and the GPU taint left the inventory
    out = apply_labels(api, node, second)
    assert out.changes == [
        "set rack=r2",
        "removed tier (no longer in the inventory)",
        "taint nvidia.com/gpu=present:NoSchedule removed",
    ]
    got = kube.get_node(node)
    labels = got["metadata"]["labels"]
    assert "tier" not in labels and labels["rack"] == "r2"
    assert labels["owner"] == "alice" and labels["team"] == "infer"  # user labels left alone
    assert labels["kubernetes.io/hostname"] == node  # the kubelet's too
    assert _taints(got) == ["maintenance=disk:PreferNoSchedule"]  # the user's taint stays
    assert got["metadata"]["annotations"][MANAGED_TAINTS] == ""


def test_a_node_changed_between_read_and_patch_is_read_again_not_overwritten(
    kube: KubeObjects, kubeconfig: Path
) -> None:
    """A concurrent writer (the test, through the API) changes the Node right after rackctl read it: the patch
    carries the stale resourceVersion, the server refuses it (409), rackctl reads again and keeps the change."""
    node = _name("lt-race")
    kube.node(node)

    class RacedKubectl(Kubectl):
        reads = 0

        def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
            found = super().get_object(kind, name, namespace)
            self.reads += 1
            if self.reads == 1:  # someone else labels the Node meanwhile
                kube.call("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {"rack": "r9"}}}, headers=MERGE)
            return found

    api = RacedKubectl(kubeconfig, timeout_s=30)
    out = apply_labels(api, node, Wanted({"rackctl.io/role": "worker"}, [GPU_TAINT]))
    assert api.reads == 2 and out.joined
    got = kube.get_node(node)
    assert got["metadata"]["labels"]["rack"] == "r9" and got["metadata"]["labels"]["rackctl.io/role"] == "worker"
    assert "nvidia.com/gpu=present:NoSchedule" in _taints(got)


def test_a_node_the_cluster_does_not_know_is_reported_not_joined(kube: KubeObjects, kubeconfig: Path) -> None:
    node = _name("lt-absent")
    out = apply_labels(Kubectl(kubeconfig, timeout_s=30), node, Wanted({"a": "b"}, []))
    assert (out.joined, out.message) == (False, f"not joined: Node {node} not in the cluster")
    assert not kube.node_exists(node)


def _model_objects(namespace: str, name: str = "m") -> list[dict[str, Any]]:
    spec = make_spec(name=name, deployment={"namespace": namespace, "gpu_product": "NVIDIA-L40S"})
    files = build_manifests(spec)
    return [*files["deployment.yaml"], *files["servicemonitor.yaml"]]


def test_manifests_applied_server_side_as_rackctl_once_the_missing_crd_reported(
    kube: KubeObjects, kube_apiserver: Any, kubeconfig: Path
) -> None:
    namespace = _name("lt-triton")
    kube.namespaces.add(namespace)
    objects = _model_objects(namespace)
    api = Kubectl(kubeconfig, timeout_s=30)
    with crd_absent(kube_apiserver, SERVICEMONITOR_CRD):
        report = apply_objects(api, objects)
        monitor = f"ServiceMonitor/{namespace}/triton-m"
        assert list(report.not_applied) == [monitor]
        assert "the cluster serves no ServiceMonitor in monitoring.coreos.com/v1" in report.not_applied[monitor]
        assert set(report.applied.values()) == {"created"}
        assert next(iter(report.applied)) == f"Namespace/{namespace}"  # Namespace first
        assert sorted(report.applied) == sorted(
            [
                f"Namespace/{namespace}",
                f"ConfigMap/{namespace}/m-launcher",
                f"ConfigMap/{namespace}/m-repository",
                f"Deployment/{namespace}/triton-m",
                f"Service/{namespace}/triton-m",
                f"Service/{namespace}/triton-m-metrics",
                f"PodDisruptionBudget/{namespace}/triton-m",
            ]
        )
        dep = kube.call("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/triton-m")
        assert {m["manager"] for m in dep["metadata"]["managedFields"]} == {FIELD_MANAGER}
        assert dep["metadata"]["managedFields"][0]["operation"] == "Apply"
        paths = [
            f"/apis/apps/v1/namespaces/{namespace}/deployments/triton-m",
            f"/api/v1/namespaces/{namespace}/configmaps/m-launcher",
            f"/api/v1/namespaces/{namespace}/configmaps/m-repository",
            f"/api/v1/namespaces/{namespace}/services/triton-m",
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/triton-m",
        ]
        before = {path: content(kube.call("GET", path)) for path in paths}
        versions = {path: kube.call("GET", path)["metadata"]["resourceVersion"] for path in paths}

        again = apply_objects(api, objects)
        assert set(again.applied.values()) == {"unchanged"} and not again.changed, again.applied
        assert again.summary().startswith("7 object(s) applied (7 unchanged); not applied: ServiceMonitor/")
        # Content, labels and the Deployment's generation as before (no rollout triggered); the server wrote
        # nothing: every resourceVersion as before. (1.37.2 bumps a PersistentVolumeClaim's resourceVersion on a
        # no-op server-side apply, measured here; the model's objects hold no claim any more.)
        assert {path: content(kube.call("GET", path)) for path in paths} == before
        assert {path: kube.call("GET", path)["metadata"]["resourceVersion"] for path in paths} == versions
        assert before[paths[0]]["metadata"]["generation"] == 1

        # With the CRD installed (the Prometheus operator's, generated from its Go types), it is applied too.
        apply_crds(kube_apiserver, [generated_crds.service_monitor()])
        third = apply_objects(api, objects)
        assert third.not_applied == {} and third.applied[monitor] == "created"


def test_rollout_ready_once_the_status_says_so_and_not_ready_with_its_reason(
    kube: KubeObjects, kubeconfig: Path
) -> None:
    namespace = _name("lt-roll")
    kube.namespaces.add(namespace)
    api = Kubectl(kubeconfig, timeout_s=30)
    apply_objects(api, _model_objects(namespace, "a") + _model_objects(namespace, "b")[1:])
    # Stands in for the Deployment controller and the kubelet: model a's replica runs and passes readiness.
    mark_deployment_ready(kube, namespace, "triton-a")
    states = watch_rollouts(api, [(namespace, "triton-a"), (namespace, "triton-b")], timeout_s=2, poll_s=0.5)
    a, b = states[namespace, "triton-a"], states[namespace, "triton-b"]
    assert (a.done, a.message(2)) == (True, "deployed, ready 1/1")
    assert not b.done
    assert b.message(2) == (
        "applied, not ready within 2 s: no Deployment controller has observed generation 1 yet "
        "(observedGeneration 0; is kube-controller-manager running?)"
    )


def test_rollout_state_names_the_conditions_when_the_controller_saw_it() -> None:
    dep = {
        "metadata": {"generation": 2},
        "spec": {"replicas": 2},
        "status": {
            "observedGeneration": 2,
            "replicas": 3,
            "updatedReplicas": 1,
            "readyReplicas": 2,
            "availableReplicas": 2,
            "conditions": [
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "slow"}
            ],
        },
    }
    state = rollout_state(dep, "ns", "triton-x")
    assert not state.done
    assert state.why == (
        "updated 1, ready 2, available 2 of 2 replica(s), 3 in all; "
        "conditions: Progressing=False (ProgressDeadlineExceeded: slow)"
    )
    assert rollout_state(None, "ns", "gone").why == "Deployment ns/gone is not in the cluster"


def test_the_rendered_deployment_rolls_updates_without_dropping_the_service() -> None:
    spec = make_spec(name="m")
    dep = deployment(spec)
    assert rolling_update_problems(dep) == []
    rolling = dep["spec"]["strategy"]["rollingUpdate"]
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (1, 0)
    bad = yaml.safe_load(yaml.safe_dump(dep))
    bad["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": 0, "maxUnavailable": "25%"}
    del bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    problems = rolling_update_problems(bad)
    assert len(problems) == 3, problems
    assert "maxSurge 0" in problems[0] and "maxUnavailable 25%" in problems[1]
    assert "no readinessProbe on /v2/health/ready" in problems[2]
    bad["spec"]["strategy"] = {"type": "Recreate"}
    assert "strategy Recreate" in rolling_update_problems(bad)[0]
