"""The real kubernetes, nvidia and triton stages through `rackctl up`: rendered + validated, not applied.

Real parts: the stages themselves (render_cluster, validate_bundle with kubernetes-validate, the Triton
render and checks), the CLI through click, the SQLite journal. The stages before them (preflight .. network)
are small test stages (``conftest.make_stage``): the real ones need BMCs and VMs, and these tests are
about what happens from kubernetes on, on nodes the journal shows provisioned.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.day2.status import not_applied_cell
from bootstrap.errors import EXIT_ENVIRONMENT, EXIT_INVALID, EXIT_NOT_APPLIED
from bootstrap.inventory import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import STAGE_STEP, Journal
from bootstrap.stages import cluster_render, nvidia
from bootstrap.stages.base import NOT_APPLIED, register_stage
from bootstrap.stages.kubernetes import KubernetesStage
from bootstrap.stages.kubernetes import host as kubernetes_host
from bootstrap.stages.nvidia import NvidiaStage
from bootstrap.stages.triton import TritonStage

from .conftest import EXAMPLE_INVENTORY, Recorder, make_stage
from .test_runner import states, up

BEFORE = ("preflight", "discover", "firmware", "bios", "provision", "os-check", "network")
CLUSTER = "kubernetes,nvidia,triton"


def journal_only(ctx: Any) -> tuple[list[str], dict[str, str]]:
    """The nvidia host side's targets here: none, the nodes exist only in the journal."""
    gpu = {n.hostname for n in nvidia.gpu_nodes(ctx.inventory)}
    return [], {n: "test nodes exist only in the journal" for n in ctx.nodes if n in gpu}


def journal_only_all(ctx: Any) -> tuple[list[str], dict[str, str]]:
    """The kubernetes host side's targets here: none, the nodes exist only in the journal."""
    return [], dict.fromkeys(ctx.nodes, "test nodes exist only in the journal")


@pytest.fixture
def real_cluster_stages(registry: dict, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The registry with the real kubernetes, nvidia and triton stages (the others test stages)."""
    monkeypatch.setattr(nvidia, "host_targets", journal_only)
    monkeypatch.setattr(kubernetes_host, "host_targets", journal_only_all)
    for cls in (KubernetesStage, NvidiaStage, TritonStage):
        register_stage(cls)
    rec = Recorder()
    for name in BEFORE:
        make_stage(name, rec, destructive=name == "provision")
    return registry


def invoke(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if "--json" not in args:
        return result.exit_code, result.output
    return result.exit_code, json.loads(result.stdout)


def edited_inventory(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    data = yaml.safe_load(EXAMPLE_INVENTORY.read_text())
    edit(data)
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_up_renders_kubernetes_nvidia_triton_applies_nothing_and_exits_5(
    real_cluster_stages: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_NOT_APPLIED, out.message
    assert out.status == "not_applied" and out.not_applied == ["kubernetes", "nvidia", "triton"]
    by_name = {s.name: s for s in out.stages}
    for name, folder in (("kubernetes", "cluster"), ("nvidia", "nvidia"), ("triton", "triton")):
        stage = by_name[name]
        assert (stage.status, stage.applied, stage.artefacts) == ("rendered", False, str(tmp_path / folder))
        why = "no cluster to deploy them to: no <state-dir>/kubeconfig" if name == "triton" else "rackctl cannot"
        assert f"{NOT_APPLIED}: {why}" in stage.message
    assert "applying nvidia needs it joined (kubernetes rendered + validated, not applied)" in by_name["nvidia"].message
    assert f"kubernetes, nvidia {NOT_APPLIED} on this node" in by_name["triton"].message
    # no node moved past what the test stages before kubernetes gave them
    assert set(states(tmp_path).values()) == {NodeState.PROVISIONED}

    # the artefacts: the cluster bundle as `render cluster` writes it, the nvidia part, the Triton repos
    index = json.loads((tmp_path / "cluster" / "index.json").read_text())
    assert index["applied"] is False
    kinds = [d["kind"] for d in yaml.safe_load_all((tmp_path / "cluster" / "kubeadm" / "head-01.yaml").read_text())]
    assert kinds[:2] == ["InitConfiguration", "ClusterConfiguration"]
    join = yaml.safe_load((tmp_path / "cluster" / "kubeadm" / "cp-02.yaml").read_text())
    assert join["kind"] == "JoinConfiguration" and "controlPlane" in join
    nvidia_index = json.loads((tmp_path / "nvidia" / "index.json").read_text())
    assert {f["path"] for f in nvidia_index["files"]} == {
        "charts/gpu-operator/values.yaml",
        "nvidia/fabric-manager.yaml",
        "nvidia/node-labels.yaml",
    }
    fabric = yaml.safe_load((tmp_path / "nvidia" / "nvidia" / "fabric-manager.yaml").read_text())
    assert fabric["gpu-xe9680-01"]["nvswitch_expected_from_model"] is True
    assert fabric["gpu-l40s-01"]["nvswitch_expected_from_model"] is False
    values = yaml.safe_load((tmp_path / "nvidia" / "charts" / "gpu-operator" / "values.yaml").read_text())
    assert "operator" not in values and values["driver"]["version"] == "580.95.05"  # no defaultRuntime from v25.3.0
    assert (tmp_path / "triton" / "llama-2-70b-fp8" / "k8s").is_dir()

    with Journal(tmp_path, readonly=True) as j:
        assert j.run(out.run_id).status == "not_applied"
        for node in hostnames:
            assert [r.stage for r in j.not_applied(node)] == ["kubernetes", "nvidia", "triton"]
            assert j.stage_done(node, "kubernetes") is None
            record = j.last_step(node, "nvidia", STAGE_STEP)
            assert record is not None and record.status == "rendered"
            assert record.detail["artefacts"] == str(tmp_path / "nvidia")
            assert "driver / Fabric Manager exact version match (host driver)" in record.detail["checked"]
        cell = not_applied_cell(j.not_applied("gpu-xe9680-01")[0])
    assert cell.status == "unavailable"
    assert cell.reason == (
        f"not deployed: the kubernetes stage only rendered and validated (run {out.run_id}, {tmp_path / 'cluster'}), "
        "nothing applied"
    )

    # nothing was applied: the next `up` renders again (not "completed in run N"), still exit 5
    again = up(inventory, tmp_path)
    assert again.exit_code == EXIT_NOT_APPLIED
    assert [s.status for s in again.stages] == ["skipped"] * len(BEFORE) + ["rendered"] * 3


def test_cli_json_human_plan_and_journal_say_not_applied(
    real_cluster_stages: dict, hostnames: list[str], tmp_path: Path
) -> None:
    base = ["-i", str(EXAMPLE_INVENTORY), "--state-dir", str(tmp_path)]
    code, planned = invoke("plan", *base, "--stages", "kubernetes,nvidia", "--json")
    assert code == 0 and planned["not_applied"] == ["kubernetes", "nvidia"]
    gpu = {a["node"]: a["action"] for a in planned["stages"][1]["actions"]}
    assert "Fabric Manager if NVSwitches are detected on the node (expected for XE9680)" in gpu["gpu-xe9680-01"]
    assert "(not expected for R760xa)" in gpu["gpu-l40s-01"] and "no GPUs" in gpu["cp-02"]
    assert "applying nvidia needs it joined" in gpu["gpu-xe9680-01"]
    host = [a for a in planned["stages"][1]["actions"] if "playbooks/nvidia_host.yml" in a["action"]]
    assert {a["node"] for a in host} == {"gpu-l40s-01", "gpu-xe9680-01"} and all(a["applies"] for a in host)
    code, text = invoke("plan", *base, "--stages", "kubernetes,nvidia")
    summary = " ".join(text.split())
    assert code == 0 and "would only render and validate kubernetes, nvidia; of kubernetes, nvidia, only the" in summary
    kube_host = [a for a in planned["stages"][0]["actions"] if "playbooks/kubernetes_host.yml" in a["action"]]
    assert {a["node"] for a in kube_host} == set(hostnames) and all(a["applies"] for a in kube_host)
    assert all("kubeadm, kubelet, kubectl 1." in a["action"] and ", held," in a["action"] for a in kube_host)
    cluster_side = [a for a in planned["stages"][0]["actions"] if "kubernetes_cluster.yml" in a["action"]]
    by_node = {a["node"]: a["action"] for a in cluster_side}
    assert set(by_node) == set(hostnames) and all(a["applies"] for a in cluster_side)  # behind the gate
    assert "kubeadm init phase preflight on the node's config, then kubeadm init --upload-certs" in by_node["head-01"]
    assert "an etcd snapshot on head-01, then kubeadm config validate" in by_node["cp-02"]
    # kube-vip: the staged static pod placed before init (super-admin.conf, 1.29+) and switched after it, and
    # before each control-plane join, which lets through only kubeadm's check on a non-empty manifests dir
    assert by_node["head-01"].startswith(
        "playbooks/kubernetes_cluster.yml over SSH: /etc/rackctl/kube-vip-init.yaml (super-admin.conf, 1.29+) "
        "placed as /etc/kubernetes/manifests/kube-vip.yaml, then kubeadm config validate"
    )
    assert (
        "(skipped where admin.conf exists), then kube-vip switched to admin.conf (/etc/rackctl/kube-vip.yaml "
        "placed as /etc/kubernetes/manifests/kube-vip.yaml)" in by_node["head-01"]
    )
    assert (
        "/etc/rackctl/kube-vip.yaml placed as /etc/kubernetes/manifests/kube-vip.yaml and kubeadm join as control "
        "plane with --ignore-preflight-errors=DirAvailable--etc-kubernetes-manifests, one control plane at a time"
    ) in by_node["cp-02"]
    vip_host = {a["node"]: a["action"].partition("; the API VIP: ")[2] for a in kube_host}
    assert vip_host["head-01"] == (
        "kube-vip static pod staged at /etc/rackctl/kube-vip.yaml, /etc/rackctl/kube-vip-init.yaml (0600; the "
        "cluster side places it before init/join)"
    )
    assert vip_host["cp-02"].startswith("kube-vip static pod staged at /etc/rackctl/kube-vip.yaml (0600;")
    assert vip_host["gpu-xe9680-01"] == ""
    assert "kubeadm join as worker after the control planes" in by_node["gpu-xe9680-01"]
    assert all("`kubeadm version -o short` on head-01 answers v1." in a for a in by_node.values())
    assert f"admin.conf fetched to {tmp_path / 'kubeconfig'} (0600)" in by_node["head-01"]
    actions = {a["node"]: a for a in planned["stages"][0]["actions"] if a not in kube_host + cluster_side}
    assert "kubeadm init on the first control plane" in actions["head-01"]["action"]
    assert "control-plane join" in actions["cp-02"]["action"]
    assert "worker join" in actions["gpu-xe9680-01"]["action"]
    assert "tigera-operator" in actions[None]["action"]
    assert all(a["applies"] is False and NOT_APPLIED in a["action"] for a in actions.values())
    assert not tmp_path.joinpath("cluster").exists(), "plan wrote something"

    code, data = invoke("up", *base, "--stages", CLUSTER, "--json")
    assert code == EXIT_NOT_APPLIED, data
    assert data["ok"] is False and data["status"] == "not_applied" and data["not_applied"] == CLUSTER.split(",")
    assert [(s["applied"], s["artefacts"]) for s in data["stages"]] == [
        (False, str(tmp_path / d)) for d in ("cluster", "nvidia", "triton")
    ]
    # fresh nodes (registered): the stages still render, saying why they could not apply there
    kube = data["stages"][0]["nodes"]["cp-02"]
    assert kube["status"] == "rendered" and kube["applied"] is False
    assert "the node is registered; applying kubernetes needs it provisioned; host side not run" in kube["message"]
    assert set(data["nodes"].values()) == {"registered"}

    code, shown = invoke("journal", "show", "--state-dir", str(tmp_path), "--json")
    assert code == 0 and shown["runs"][0]["status"] == "not_applied"
    assert {n["node"]: n["not_applied"] for n in shown["nodes"]} == dict.fromkeys(hostnames, CLUSTER.split(","))
    code, one = invoke("journal", "show", "gpu-xe9680-01", "--state-dir", str(tmp_path))
    assert code == 0 and "kubernetes: rendered + validated, not applied" in one

    code, human = invoke("up", *base, "--stages", CLUSTER)
    assert code == EXIT_NOT_APPLIED
    assert "rendered, not applied" in human and f"{NOT_APPLIED}: kubernetes, nvidia, triton" in human
    assert "kubernetes (not applied)" in human, "the rich progress bar does not say it"
    assert "Traceback" not in human


def test_an_invalid_inventory_value_fails_the_kubernetes_stage_naming_the_field(
    real_cluster_stages: dict, hostnames: list[str], tmp_path: Path
) -> None:
    def bad_kubelet(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"kubelet": {"maxPod": 110}}  # KubeletConfiguration has maxPods

    inventory = edited_inventory(tmp_path, bad_kubelet)
    state = tmp_path / "state"
    code, data = invoke("up", "-i", str(inventory), "--state-dir", str(state), "--stages", CLUSTER, "--json")
    assert code == EXIT_INVALID, data
    assert data["status"] == "failed" and data["stages"][0]["status"] == "failed"
    assert [s["status"] for s in data["stages"][1:]] == ["not_run", "not_run"]
    assert "kubernetes.kubelet.maxPod" in data["message"]
    assert [e["path"] for e in data["errors"]] == ["kubernetes.kubelet.maxPod"]
    assert not (state / "cluster").exists(), "an invalid bundle was written"
    assert set(data["nodes"].values()) == {"registered"}, "bad input marked nodes failed"
    with Journal(state, readonly=True) as j:
        run = j.runs()[0]
        assert run.status == "failed" and "kubernetes.kubelet.maxPod" in run.message

    code, human = invoke("up", "-i", str(inventory), "--state-dir", str(state), "--stages", CLUSTER)
    assert code == EXIT_INVALID and "kubernetes.kubelet.maxPod" in human and "Traceback" not in human


def test_nvidia_alone_refuses_a_fabric_manager_mismatch(real_cluster_stages: dict, tmp_path: Path) -> None:
    def mismatch(data: dict[str, Any]) -> None:
        data["nvidia"] = {
            "profiles": {
                "XE9680": {"driver": "host", "driver_version": "580.95.05", "fabric_manager_version": "580.82.07"}
            }
        }

    inventory = edited_inventory(tmp_path, mismatch)
    code, data = invoke("up", "-i", str(inventory), "--state-dir", str(tmp_path / "s"), "--stages", "nvidia", "--json")
    assert code == EXIT_INVALID, data
    assert [e["path"] for e in data["errors"]] == ["nvidia.profiles.XE9680.fabric_manager_version"]
    assert not (tmp_path / "s" / "nvidia").exists()


def test_without_the_schema_checkers_the_run_stops_before_any_node_with_exit_3(
    real_cluster_stages: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a test double for "kubernetes-validate is not installed" (it is in this venv): find_spec says so
    real_find_spec = cluster_render.importlib.util.find_spec
    monkeypatch.setattr(
        cluster_render.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "kubernetes_validate" else real_find_spec(name, *a),
    )
    base = ["-i", str(EXAMPLE_INVENTORY), "--state-dir", str(tmp_path)]
    code, data = invoke("up", *base, "--stages", CLUSTER, "--json")
    assert code == EXIT_ENVIRONMENT, data
    assert data["errors"][0]["path"] == "kubernetes-validate" and "rackctl[cluster]" in data["errors"][0]["fix"]
    assert not (tmp_path / "cluster").exists()
    with Journal(tmp_path, readonly=True) as j:
        assert {s.state for s in j.nodes().values()} == {NodeState.REGISTERED}
        assert j.steps() == [], "a node was touched before the environment check"
