"""``Kubectl`` (bootstrap/kube.py) against a real kube-apiserver 1.37.2 with the kubectl built beside it.

No kubelet or controller-manager runs (tests/cluster/apiserver.py). Where their part is needed the test plays
it through the API and says so: Node status (Ready, allocatable ``nvidia.com/gpu``), pods bound to nodes and
marked Running, a PodDisruptionBudget's status, and finalising gracefully deleted pods
(:class:`tests.kube_objects.PodFinaliser`). A drain with real kubelets (pods evicted and started elsewhere,
DaemonSet pods left, a budget naming itself) and ``Kubectl.remove_etcd_member`` (``kubectl exec`` into an
etcd pod) run on the lab's native cluster: tests/ansible/test_kubernetes_cluster_real.py. What stays here is
what a real kubelet does not show on demand: one that never finishes an eviction, and the gate's wording.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from bootstrap.kube import ClusterGate, Kubectl, KubeError, user_labels
from tests.kube_objects import KubeObjects, PodFinaliser


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_drain_without_the_kubelet_finishing_evictions_times_out_within_its_bound(
    kube: KubeObjects, kubeconfig: Path
) -> None:
    """Evicted pods never go (no kubelet, no stand-in): the drain gives up after its timeout, node cordoned."""
    node = _name("kt-stuck")
    kube.node(node)
    ns = kube.namespace()
    kube.pod(ns, "job-1", node, labels={"app": "job"}, owner=kube.controller(ns, "ReplicaSet", "job", {"app": "job"}))
    started = time.monotonic()
    with pytest.raises(KubeError) as info:
        Kubectl(kubeconfig, timeout_s=30, drain_timeout_s=2).drain(node)
    assert time.monotonic() - started < 30
    assert f"drain {node} failed within 2 s, {node} is left cordoned" in info.value.message
    assert f"pod {ns}/job-1" in info.value.message
    assert kube.get_node(node)["spec"].get("unschedulable") is True


def test_a_budget_that_allows_no_disruption_blocks_the_drain_and_is_named(kube: KubeObjects, kubeconfig: Path) -> None:
    node = _name("kt-db")
    kube.node(node)
    ns = kube.namespace()
    rs = kube.controller(ns, "ReplicaSet", "db", {"app": "db"})
    kube.pod(ns, "db-0", node, labels={"app": "db", "tier": "data"}, owner=rs)
    kube.pod(
        ns, "cache-0", node, labels={"app": "cache"}, owner=kube.controller(ns, "ReplicaSet", "c", {"app": "cache"})
    )
    # The disruption controller would compute this status; the test writes it: one healthy pod needed, 0 allowed.
    kube.budget(ns, "db-pdb", {"app": "db"}, healthy=1, allowed=0)
    gate = ClusterGate(Kubectl(kubeconfig, timeout_s=30, drain_timeout_s=2))

    started = time.monotonic()
    with PodFinaliser(kube, [node]) as kubelet, pytest.raises(KubeError) as info:
        gate.cordon(node)
    elapsed = time.monotonic() - started
    assert elapsed < 30, elapsed  # kubectl retries a refused eviction every 5 s, then its timeout ends it
    message = info.value.message
    assert f"drain {node} failed" in message and f"{node} is left cordoned" in message
    assert f"pod {ns}/db-0 (PodDisruptionBudget {ns}/db-pdb allows 0 disruption(s))" in message
    assert "disruption budget" in message  # kubectl's own words on the refused eviction
    assert f"{ns}/cache-0" not in message  # evicted and gone: not a blocker
    assert kubelet.finalised == [f"{ns}/cache-0"]
    assert [p["metadata"]["name"] for p in kube.pods_on(node)] == ["db-0"]
    assert kube.get_node(node)["spec"].get("unschedulable") is True
    assert gate.uncordon(node) == "uncordoned"
    assert not kube.get_node(node)["spec"].get("unschedulable")


def test_nodes_read_readiness_gpus_and_cordon_live(kube: KubeObjects, kubeconfig: Path) -> None:
    gpu, cp = _name("kt-gpu"), _name("kt-cp")
    kube.node(gpu, gpus=4, labels={"rack": "r1"})
    kube.node(cp, ready=False)  # the kubelet would report NotReady; the test writes it
    cluster = Kubectl(kubeconfig)
    nodes = cluster.nodes()
    assert (nodes[gpu].ready, nodes[gpu].allocatable_gpus, nodes[gpu].unschedulable) == (True, 4, False)
    assert (nodes[cp].ready, nodes[cp].allocatable_gpus) == (False, 0)
    assert user_labels(nodes[gpu].labels) == {"rack": "r1"}
    kube.node_status(gpu, ready=False, gpus=2)  # the device plugin lost two GPUs, the kubelet went NotReady
    kube.node_status(cp, ready=True)
    nodes = cluster.nodes()
    assert (nodes[gpu].ready, nodes[gpu].allocatable_gpus) == (False, 2)
    assert nodes[cp].ready
    gate = ClusterGate(cluster)
    assert gate.ready(cp) and not gate.ready(gpu)
    assert gate.ready("not-a-kube-node") and gate.cordon("not-a-kube-node") == "not a Kubernetes node: not drained"


def test_labels_applied_then_restored_on_the_node_after_it_rejoins(kube: KubeObjects, kubeconfig: Path) -> None:
    node = _name("kt-redeploy")
    kube.node(node, gpus=8, labels={"node-role.kubernetes.io/worker": ""})
    cluster = Kubectl(kubeconfig)
    cluster.label(node, {"rack": "r2", "gpu.example/pool": "inference"})
    cluster.label(node, {"rack": "r3"})  # --overwrite
    kept = user_labels(cluster.nodes()[node].labels)
    assert kept == {"rack": "r3", "gpu.example/pool": "inference"}

    cluster.delete_node(node)
    assert not kube.node_exists(node) and node not in cluster.nodes()
    cluster.delete_node(node)  # already gone: not an error
    kube.node(node, gpus=8)  # the reinstalled node's kubelet registers it again (the test does it)
    assert user_labels(cluster.nodes()[node].labels) == {}
    cluster.label(node, kept)
    assert user_labels(cluster.nodes()[node].labels) == kept


def test_errors_name_the_operation_and_carry_no_secret(kube: KubeObjects, kubeconfig: Path) -> None:
    cluster = Kubectl(kubeconfig, timeout_s=10)
    with pytest.raises(KubeError, match=r"kubectl uncordon kt-missing failed \(kubeconfig .*\): .*not found"):
        cluster.uncordon("kt-missing")
    key = kube.server.pki.client_key.read_text()
    wrong = kubeconfig.parent / "wrong"
    wrong.write_text(kubeconfig.read_text().replace(str(kube.server.pki.ca), str(kube.server.pki.client_key)))
    with pytest.raises(KubeError) as info:
        Kubectl(wrong, timeout_s=10).nodes()
    assert "kubectl get nodes -o json failed" in info.value.message
    assert key.splitlines()[1] not in info.value.message


def test_draining_a_node_kubernetes_does_not_know_says_so(kube: KubeObjects, kubeconfig: Path) -> None:
    with pytest.raises(KubeError) as info:
        Kubectl(kubeconfig, timeout_s=10, drain_timeout_s=2).drain("kt-nowhere")
    assert info.value.message.startswith("drain kt-nowhere failed within 2 s, kt-nowhere is no Kubernetes node (")
    assert "not found" in info.value.message
