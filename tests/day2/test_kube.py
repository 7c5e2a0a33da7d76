"""The Kubernetes seam's pure parts: reading ``kubectl get nodes -o json`` and choosing the implementation."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.kube import ClusterGate, Kubectl, KubeError, NotDeployed, cluster_for, kube_node, user_labels

ITEM = {
    "metadata": {
        "name": "gpu-01",
        "labels": {"kubernetes.io/hostname": "gpu-01", "node-role.kubernetes.io/worker": "", "rack": "r1"},
    },
    "spec": {"unschedulable": True},
    "status": {
        "allocatable": {"cpu": "64", "nvidia.com/gpu": "8"},
        "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
    },
}


def test_a_node_item_is_read_with_readiness_gpus_and_labels() -> None:
    node = kube_node(ITEM)
    assert (node.name, node.ready, node.allocatable_gpus, node.unschedulable) == ("gpu-01", True, 8, True)
    assert user_labels(node.labels) == {"rack": "r1"}  # what Kubernetes sets itself is not restored


def test_a_not_ready_node_without_gpus() -> None:
    node = kube_node(
        {"metadata": {"name": "cp-02"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    )
    assert (node.ready, node.allocatable_gpus, node.unschedulable) == (False, 0, False)


def test_without_a_kubeconfig_kubernetes_is_not_deployed_and_refuses_changes(tmp_path: Path) -> None:
    cluster = cluster_for(tmp_path)
    assert isinstance(cluster, NotDeployed) and not cluster.deployed
    assert cluster.reason.startswith("not deployed") and str(tmp_path / "kubeconfig") in cluster.reason
    assert cluster.nodes() == {}
    with pytest.raises(KubeError, match="cannot drain gpu-01: not deployed"):
        cluster.drain("gpu-01")
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    assert isinstance(cluster_for(tmp_path), Kubectl)


def test_the_rollout_gate_over_no_kubernetes_drains_nothing_and_says_why(tmp_path: Path) -> None:
    gate = ClusterGate(cluster_for(tmp_path))
    assert gate.cordon("gpu-01").startswith("no Kubernetes: not drained (not deployed")
    assert gate.uncordon("gpu-01").startswith("no Kubernetes: not uncordoned")
    assert gate.ready("gpu-01") is True
