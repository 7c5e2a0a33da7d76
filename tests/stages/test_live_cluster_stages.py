"""``rackctl up --stages kubernetes,triton`` where a cluster exists: a real kube-apiserver 1.37.2 behind
``<state-dir>/kubeconfig``.

Real parts: the CLI (click, ``--json``), the runner and SQLite journal, the real kubernetes and triton stages
(render, kubernetes-validate, Triton checks), ``kubectl`` on PATH against the real API server. No kubelet,
scheduler or controller-manager runs (tests/cluster/apiserver.py): the Node objects are made as kubelet
registration makes them, and where the Deployment controller and the kubelet would report a Deployment
rolled out, the test writes its status through the status subresource, and the Triton pod and its Service's
Endpoints leading to a real tritonserver on this host (:class:`tests.triton_serving.ServingStandIn`, the
smoke's target); a Deployment left alone is what an absent controller looks like. The nodes exist only
in the journal, so the kubernetes stage's host side (SSH) does not run on them and says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import EXIT_FAILED, EXIT_NOT_APPLIED
from bootstrap.journal.store import Journal
from bootstrap.triton.server import TritonServer
from tests.cluster.apiserver import ApiServer
from tests.kube_objects import MERGE, KubeObjects, crd_absent
from tests.ports import free_port
from tests.triton_serving import ServingStandIn

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
JOINED = ("head-01", "gpu-l40s-01", "gpu-xe9680-01")  # cp-02 and cp-03 never joined
MODELS = ("llama-2-13b-awq", "llama-2-70b-fp8")


def _inventory(tmp_path: Path, namespace: str, *, tier: bool = True) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    for model in data["models"]:
        model["deployment"]["namespace"] = namespace
        # the served stand-in (tests/triton_serving.py) is an in-flight-batcher repository (release 1.1.0)
        model |= {"layout": "inflight_batcher_llm", "engine_dir": f"/models/engines/{model['name']}"}
    # the XE9680 with the host driver: the GPU operator's per-node label comes from the rendered bundle too
    data["nvidia"] = {"profiles": {"XE9680": {"driver": "host", "driver_version": "580.95.05"}}}
    gpu = next(n for n in data["nodes"] if n["hostname"] == "gpu-l40s-01")
    if tier:
        gpu["labels"]["tier"] = "gold"
        gpu["taints"] = [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
    path = tmp_path / f"cluster-{'tier' if tier else 'plain'}.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _up(inventory: Path, state_dir: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    args = ["up", "-i", str(inventory), "--state-dir", str(state_dir), "--stages", "kubernetes,triton", "--json"]
    result = CliRunner().invoke(cli, [*args, *extra], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def _stage(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["stages"] if s["name"] == name)


@pytest.fixture
def live(kube: KubeObjects, live_state: tuple[Path, str]) -> tuple[Path, str]:
    """:func:`live_state` with three inventory nodes joined (Node objects as kubelet registration makes them)."""
    for name in JOINED:
        kube.node(name, labels={"owner": "alice"} if name == "gpu-l40s-01" else None)
    return live_state


def test_up_applies_labels_deploys_triton_and_stays_not_applied(
    live: tuple[Path, str],
    kube: KubeObjects,
    kube_apiserver: ApiServer,
    triton_backend: tuple[str, TritonServer],
    tmp_path: Path,
) -> None:
    state_dir, namespace = live
    inventory = _inventory(tmp_path, namespace)
    names = [f"triton-{m}" for m in MODELS]
    address, server = triton_backend
    with crd_absent(kube_apiserver, "servicemonitors.monitoring.coreos.com"):
        # stands in for the controllers, the scheduler and the kubelet: each Deployment rolled out, its Service's
        # Endpoints leading to the real tritonserver (tests/triton_serving.py)
        with ServingStandIn(kube, namespace, names, address=address, port=server.http_port) as controller:
            code, doc = _up(inventory, state_dir, "--triton-timeout", "60")
        assert sorted(controller.served) == sorted(names)

        assert code == EXIT_NOT_APPLIED, doc
        assert doc["status"] == "not_applied" and doc["not_applied"] == ["kubernetes", "triton"]
        k8s = _stage(doc, "kubernetes")
        assert "node labels/taints applied on the live cluster" in k8s["message"]
        assert "to 3 of 5 node(s) (2 not joined)" in k8s["message"]
        assert "Grafana dashboards (monitoring/dashboards.yaml): 4 object(s) applied" in k8s["message"], k8s["message"]
        nodes = k8s["nodes"]
        assert all(nodes[n]["applied"] is False for n in nodes)  # init/join still not applied
        assert "labels/taints applied: set " in nodes["gpu-l40s-01"]["message"]
        assert "taint dedicated=inference:NoSchedule added" in nodes["gpu-l40s-01"]["message"]
        assert "not joined: Node cp-02 not in the cluster" in nodes["cp-02"]["message"]
        assert nodes["cp-02"]["message"].startswith("rackctl cannot apply it yet")  # the stage's own reason first

        labels = kube.get_node("gpu-l40s-01")["metadata"]["labels"]
        assert labels["rackctl.io/gpu-type"] == "L40S" and labels["rackctl.io/gpu-count"] == "4"
        assert labels["rackctl.io/model"] == "R760xa" and labels["tier"] == "gold"
        assert labels["owner"] == "alice"  # the user's label stays
        xe = kube.get_node("gpu-xe9680-01")["metadata"]["labels"]
        assert xe["nvidia.com/gpu.deploy.driver"] == "false" and xe["rackctl.io/gpu-type"] == "H100-SXM"
        assert xe["node-role.kubernetes.io/worker"] == ""
        assert kube.get_node("head-01")["metadata"]["labels"]["rackctl.io/role"] == "head"

        triton = _stage(doc, "triton")
        assert triton["status"] == "rendered" and triton["applied"] is False
        for model in MODELS:
            assert f"{model}: deployed, ready 1/1" in triton["message"]
            monitor = f"ServiceMonitor/{namespace}/triton-{model}"
            assert f"{monitor} (the cluster serves no ServiceMonitor" in triton["message"]
        assert "not applied: objects not applied: " in triton["message"]  # the ServiceMonitors: no CRD
        assert "repositories not copied" not in triton["message"]
        assert "smoke-tested through its Service" in triton["message"]
        assert "llama-2-13b-awq: latency " in triton["message"]
        dep = kube.call("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/triton-{MODELS[0]}")
        assert "rackctl" in {m["manager"] for m in dep["metadata"]["managedFields"]}

        with Journal(state_dir, readonly=True) as journal:
            facts = journal.latest_facts("gpu-l40s-01")
        assert facts["kubernetes"]["node_labels"]["joined"] is True
        assert facts["kubernetes"]["node_labels"]["changed"] is True

        # A second run: nothing changes on the cluster, and both stages say so.
        generation = dep["metadata"]["generation"]
        code, doc = _up(inventory, state_dir, "--triton-timeout", "10")
        assert code == EXIT_NOT_APPLIED, doc
        nodes = _stage(doc, "kubernetes")["nodes"]
        assert all("labels/taints applied: unchanged" in nodes[n]["message"] for n in JOINED)
        triton = _stage(doc, "triton")
        # seven objects per model: no claim since the model files are mounted where they live (issue 26); its
        # disruption budget
        assert all(f"{m}: deployed, ready 1/1; 7 object(s) applied (7 unchanged)" in triton["message"] for m in MODELS)
        again = kube.call("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/triton-{MODELS[0]}")
        assert again["metadata"]["generation"] == generation  # no rollout triggered

        # The inventory drops the tier label and the taint: rackctl's own go, the user's label stays.
        kube.call("PATCH", "/api/v1/nodes/gpu-l40s-01", {"metadata": {"labels": {"team": "x"}}}, headers=MERGE)
        code, doc = _up(_inventory(tmp_path, namespace, tier=False), state_dir, "--triton-timeout", "10")
        message = _stage(doc, "kubernetes")["nodes"]["gpu-l40s-01"]["message"]
        assert "removed tier (no longer in the inventory)" in message
        assert "taint dedicated=inference:NoSchedule removed" in message
        node = kube.get_node("gpu-l40s-01")
        assert "tier" not in node["metadata"]["labels"]
        # only the taint the API server's TaintNodesByCondition admission put on the new Node is left (no node
        # lifecycle controller runs to lift it): taints rackctl does not own stay
        assert node["spec"]["taints"] == [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
        assert node["metadata"]["labels"]["owner"] == "alice" and node["metadata"]["labels"]["team"] == "x"


def test_a_deployment_nobody_rolls_out_fails_the_triton_stage_with_its_reason(
    live: tuple[Path, str], tmp_path: Path
) -> None:
    state_dir, namespace = live
    code, doc = _up(_inventory(tmp_path, namespace), state_dir, "--triton-timeout", "2")
    assert code == EXIT_FAILED, doc
    assert _stage(doc, "kubernetes")["status"] == "rendered"
    triton = _stage(doc, "triton")
    assert triton["status"] == "failed"
    why = (
        "applied, not ready within 2 s: no Deployment controller has observed generation 1 yet "
        "(observedGeneration 0; is kube-controller-manager running?)"
    )
    assert all(f"{m}: {why}" in triton["message"] for m in MODELS), triton["message"]
    with Journal(state_dir, readonly=True) as journal:
        steps = [s for s in journal.steps(node="head-01") if s.stage == "triton"]
    assert steps[-1].status == "failed" and why in steps[-1].detail["error"]


def test_plan_names_the_live_actions_when_a_kubeconfig_is_there(live: tuple[Path, str], tmp_path: Path) -> None:
    state_dir, namespace = live
    args = ["plan", "-i", str(_inventory(tmp_path, namespace)), "--state-dir", str(state_dir), "--json"]
    result = CliRunner().invoke(cli, [*args, "--stages", "kubernetes,triton"], catch_exceptions=False)
    actions = [a for s in json.loads(result.stdout)["stages"] for a in s["actions"]]
    texts = [a["action"] for a in actions if a["node"] is None]
    assert any(t.startswith("node labels and taints of the rendered nodes/labels.yaml applied") for t in texts)
    assert any(t.startswith("kubectl apply --server-side --field-manager=rackctl of the manifests") for t in texts)
    assert any(t.startswith("Grafana dashboard ConfigMaps of the rendered monitoring/dashboards.yaml") for t in texts)


def test_a_kubeconfig_whose_api_does_not_answer_fails_the_nodes_naming_it(
    kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    config = json.loads(kube_apiserver.write_kubeconfig(state_dir / "kubeconfig").read_text())
    port = free_port()  # nothing listens there
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    (state_dir / "kubeconfig").write_text(json.dumps(config))
    code, doc = _up(_inventory(tmp_path, "unused"), state_dir, "--triton-timeout", "2")
    assert code == EXIT_FAILED, doc
    k8s = _stage(doc, "kubernetes")
    assert k8s["status"] == "failed"
    message = k8s["nodes"]["head-01"]["message"]
    assert message.startswith("labels/taints not applied: kubectl get node head-01")
    assert f"127.0.0.1:{port}" in message and "connection refused" in message.lower()
    assert _stage(doc, "triton")["status"] == "not_run"  # the run stopped at the failed stage
