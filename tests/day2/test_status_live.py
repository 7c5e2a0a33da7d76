"""``rackctl status`` reading Kubernetes readiness and allocatable GPUs live from a real kube-apiserver.

The emulated rack answers for the BMCs; the kubeconfig under --state-dir points at the session's API server.
No kubelet runs: the test writes each Node's Ready condition and allocatable ``nvidia.com/gpu`` itself.
"""

from __future__ import annotations

from pathlib import Path

from tests.day2.conftest import Rack
from tests.kube_objects import MERGE, KubeObjects


def test_status_reads_kubernetes_readiness_and_gpus_live(rack: Rack, kube: KubeObjects, tmp_path: Path) -> None:
    inventory = rack.inventory("status-kube.yml")
    state = tmp_path / "state"
    kube.server.write_kubeconfig(state / "kubeconfig")
    kube.node("cp-02")
    kube.node("cp-03", ready=False)  # as the kubelet would report it
    kube.node("gpu-l40s-01", gpus=4)
    kube.node("gpu-xe9680-01", gpus=6)
    kube.call("PATCH", "/api/v1/nodes/gpu-l40s-01", {"spec": {"unschedulable": True}}, headers=MERGE)  # cordoned
    code, data = rack.invoke("status", "-i", str(inventory), "--state-dir", str(state))
    assert code == 0, data
    assert data["kubernetes"] == {"deployed": True, "reason": f"kubeconfig {state / 'kubeconfig'}"}
    rows = {r["node"]: r for r in data["nodes"]}
    seen = {n: (rows[n]["kubernetes"]["value"], rows[n]["gpus"]["value"]) for n in rows if n != "head-01"}
    assert seen == {
        "cp-02": ("Ready", 0),
        "cp-03": ("NotReady", 0),
        "gpu-l40s-01": ("Ready, cordoned", 4),
        "gpu-xe9680-01": ("Ready", 6),
    }
    head = rows["head-01"]["kubernetes"]
    assert (head["status"], head["reason"]) == ("unavailable", "not a Kubernetes node (not joined)")

    # the API server not answering: degraded data, said so, exit 1
    (state / "kubeconfig").write_text(
        (state / "kubeconfig").read_text().replace(kube.server.url, "https://127.0.0.1:1")
    )
    code, data = rack.invoke("status", "-i", str(inventory), "--state-dir", str(state))
    assert code == 1
    cell = {r["node"]: r for r in data["nodes"]}["cp-02"]["kubernetes"]
    assert cell["status"] == "degraded" and cell["reason"].startswith("Kubernetes API not answering")
    assert "127.0.0.1:1" in cell["reason"]
