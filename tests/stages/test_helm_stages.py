"""``rackctl up --stages kubernetes,nvidia --charts DIR --json`` where a cluster exists: Helm installs the charts on
a real kube-apiserver 1.37.2 behind ``<state-dir>/kubeconfig``.

Real parts: the CLI (click, ``--json``), the runner and SQLite journal, the real kubernetes and nvidia stages
(render, kubernetes-validate), Helm 4.2.3's Go SDK (helm-python-sdk) against the real API server, ``kubectl``
reading the objects back. The charts are ``helm create`` scaffolds named and versioned as the pinned
local-path-provisioner 0.0.32 and gpu-operator v26.7.0 (tests/cluster/scaffold_charts.py: the pinned charts
cannot be had offline); tigera-operator and kube-prometheus-stack are left out of ``--charts`` on purpose. No
controller-manager or kubelet runs: where the Deployment controller would report the releases' Deployments
rolled out, a stand-in thread writes their status (:class:`tests.kube_objects.DeploymentReadier`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import EXIT_FAILED, EXIT_NOT_APPLIED
from bootstrap.inventory.cluster import ChartPins
from bootstrap.journal.states import MAIN_LINE, NodeState
from bootstrap.journal.store import Journal
from bootstrap.stages.helm_releases import FACTS
from tests.cluster.apiserver import ApiServer
from tests.cluster.scaffold_charts import LOCAL_PATH_TEMPLATES, scaffold_chart
from tests.kube_objects import DeploymentReadier, KubeObjects

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install 'rackctl[cluster]')")
EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
#: The releases the charts directory has, and where they go (the example inventory's namespaces).
LOCAL_PATH = ("local-path-provisioner", "local-path-storage")
GPU_OPERATOR = ("gpu-operator", "gpu-operator")
#: the tigera-operator chart the example names (its default pin)
TIGERA = ChartPins().tigera_operator


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stage-charts")
    scaffold_chart(helm, root, "local-path-provisioner", "0.0.32", templates=LOCAL_PATH_TEMPLATES)
    return scaffold_chart(helm, root, "gpu-operator", "v26.7.0")


@pytest.fixture
def state_dir(kube_apiserver: ApiServer, tmp_path: Path) -> Iterator[Path]:
    """A state directory whose kubeconfig reaches the real API server; the releases uninstalled afterwards
    (the namespaces stay: no namespace controller runs)."""
    state = tmp_path / "state"
    kubeconfig = kube_apiserver.write_kubeconfig(state / "kubeconfig")
    yield state
    for name, namespace in (LOCAL_PATH, GPU_OPERATOR):
        with helm.Config(kubeconfig_path=str(kubeconfig), namespace=namespace) as cfg:
            cfg.uninstall(name, ignore_not_found=True)


def _inventory(tmp_path: Path, local_path: str = "/mnt/nvme/lp") -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data.setdefault("kubernetes", {})["local_path"] = local_path
    path = tmp_path / f"cluster-{local_path.replace('/', '-')}.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _up(inventory: Path, state_dir: Path, charts: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    args = ["up", "-i", str(inventory), "--state-dir", str(state_dir), "--stages", "kubernetes,nvidia"]
    # the nvidia stage's validation is tested in test_nvidia_validate_stage.py: no Node exists here
    result = CliRunner().invoke(
        cli, [*args, "--charts", str(charts), "--json", "--skip-validate", *extra], catch_exceptions=False
    )
    return result.exit_code, json.loads(result.stdout), result.output


def _stage(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["stages"] if s["name"] == name)


def _local_path_config(kube: KubeObjects) -> list[str]:
    config = kube.call("GET", "/api/v1/namespaces/local-path-storage/configmaps/local-path-config")
    paths: list[str] = json.loads(config["data"]["config.json"])["nodePathMap"][0]["paths"]
    return paths


def _readiers(kube: KubeObjects) -> tuple[DeploymentReadier, DeploymentReadier]:
    """Stand-ins for the Deployment controller and the kubelet, one per release namespace."""
    return DeploymentReadier(kube, LOCAL_PATH[1], [LOCAL_PATH[0]]), DeploymentReadier(
        kube, GPU_OPERATOR[1], [GPU_OPERATOR[0]]
    )


def test_up_installs_the_charts_at_hand_then_unchanged_then_upgrades(
    state_dir: Path, charts: Path, kube: KubeObjects, kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    inventory = _inventory(tmp_path)
    storage, operator = _readiers(kube)
    with storage, operator:
        code, doc, output = _up(inventory, state_dir, charts, "--helm-timeout", "60")
    assert storage.readied == ["local-path-provisioner"] and operator.readied == ["gpu-operator"]
    assert code == EXIT_NOT_APPLIED, doc
    assert doc["not_applied"] == ["kubernetes", "nvidia"]  # kubeadm init/join, the node-side NVIDIA steps
    k8s, nvidia = _stage(doc, "kubernetes"), _stage(doc, "nvidia")
    assert (
        "local-path-provisioner installed (revision 1), workloads ready: "
        "Deployment/local-path-storage/local-path-provisioner 1/1"
    ) in k8s["message"]
    assert (
        f"tigera-operator: rendered + validated, not installed: chart tigera-operator {TIGERA} not in --charts {charts}"
        in k8s["message"]
    )
    assert "kube-prometheus-stack: rendered + validated, not installed: chart kube-prometheus-stack" in k8s["message"]
    assert (
        "gpu-operator installed (revision 1), workloads ready: Deployment/gpu-operator/gpu-operator 1/1"
        in (nvidia["message"])
    )
    assert all(n["applied"] is False for n in k8s["nodes"].values())
    assert k8s["nodes"]["head-01"]["message"].startswith("rackctl cannot apply it yet: kubeadm init/join")

    # the releases and their objects are on the server
    assert _local_path_config(kube) == ["/mnt/nvme/lp"]
    assert kube.call("GET", "/apis/apps/v1/namespaces/gpu-operator/deployments/gpu-operator")["metadata"]["labels"][
        "helm.sh/chart"
    ] == ("gpu-operator-v26.7.0")
    with Journal(state_dir, readonly=True) as journal:
        releases = journal.latest_facts("gpu-l40s-01")["helm"]["releases"]
    assert releases["local-path-provisioner"] | {"values_digest": "-"} == {
        "release": "local-path-provisioner",
        "chart": "local-path-provisioner",
        "version": "0.0.32",
        "namespace": "local-path-storage",
        "revision": 1,
        "values_digest": "-",
        "status": "installed",
        "ok": True,
        "stage": "kubernetes",
        "run": 1,
        "workloads": {"Deployment/local-path-storage/local-path-provisioner": "1/1"},
    }
    assert releases["local-path-provisioner"]["values_digest"].startswith("sha256:")
    assert (releases["gpu-operator"]["revision"], releases["gpu-operator"]["stage"]) == (1, "nvidia")
    assert releases["tigera-operator"]["status"] == "not installed"
    # the kubeconfig's client key reaches neither the output nor the journal
    key_line = kube_apiserver.pki.client_key.read_text().splitlines()[1]
    assert key_line not in output
    assert key_line.encode() not in (state_dir / "journal.sqlite3").read_bytes()

    # a second run: Helm has both as wanted, no new revision
    code, doc, _ = _up(inventory, state_dir, charts, "--helm-timeout", "10")
    assert code == EXIT_NOT_APPLIED, doc
    assert "local-path-provisioner unchanged (revision 1)" in _stage(doc, "kubernetes")["message"]
    assert "gpu-operator unchanged (revision 1)" in _stage(doc, "nvidia")["message"]

    # the inventory's local path changes: local-path-provisioner is upgraded to revision 2, the GPU Operator not
    code, doc, _ = _up(_inventory(tmp_path, "/data/lp"), state_dir, charts, "--helm-timeout", "10")
    assert code == EXIT_NOT_APPLIED, doc
    assert "local-path-provisioner upgraded (revision 2)" in _stage(doc, "kubernetes")["message"]
    assert "gpu-operator unchanged (revision 1)" in _stage(doc, "nvidia")["message"]
    assert _local_path_config(kube) == ["/data/lp"]
    with Journal(state_dir, readonly=True) as journal:
        releases = journal.latest_facts("head-01")["helm"]["releases"]
    assert releases["local-path-provisioner"]["revision"] == 2 and releases["gpu-operator"]["revision"] == 1

    # charts not at hand: Helm is not asked, the journal keeps what Helm last did
    empty = tmp_path / "no-charts"
    empty.mkdir()
    code, doc, _ = _up(_inventory(tmp_path, "/data/lp"), state_dir, empty)
    assert code == EXIT_NOT_APPLIED, doc
    assert (
        f"local-path-provisioner: rendered + validated, not installed: chart local-path-provisioner 0.0.32 not in "
        f"--charts {empty}" in _stage(doc, "kubernetes")["message"]
    )
    with Journal(state_dir, readonly=True) as journal:
        kept = journal.latest_facts("head-01")["helm"]["releases"]["local-path-provisioner"]
    assert (kept["revision"], kept["status"], kept["run"]) == (2, "upgraded", 3)


def _joined(state_dir: Path, nodes: list[str]) -> None:
    """Record ``nodes`` as past the kubernetes stage, as kubeadm join leaves them (no kubelet runs here)."""
    with Journal(state_dir) as journal:
        journal.register_nodes(nodes)
        for node in nodes:
            for state in MAIN_LINE[1 : MAIN_LINE.index(NodeState.JOINED) + 1]:
                journal.transition(node, state, "as the stages leave it (recorded by the test)")


def _kubernetes_only(inventory: Path, state_dir: Path, charts: Path, command: str = "up") -> dict[str, Any]:
    args = [command, "-i", str(inventory), "--state-dir", str(state_dir), "--stages", "kubernetes"]
    args += ["--limit", "head-01,gpu-l40s-01", "--charts", str(charts), "--json"]
    result = CliRunner().invoke(cli, [*args, *(["--helm-timeout", "60"] if command == "up" else [])])
    assert result.exit_code in (0, EXIT_NOT_APPLIED), result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_a_release_added_or_changed_in_the_inventory_runs_the_stage_again_on_nodes_past_it(
    state_dir: Path, charts: Path, kube: KubeObjects, tmp_path: Path
) -> None:
    """Nodes past the kubernetes stage skip it, unless a release whose chart is at hand is not what the
    journal records Helm holding (not installed by rackctl, other values): then plan and ``up`` run it again on
    them and say why; once Helm holds it as wanted, the next ``up`` skips the stage again."""
    inventory = _inventory(tmp_path)
    _joined(state_dir, ["head-01", "gpu-l40s-01"])
    plan = _stage(_kubernetes_only(inventory, state_dir, charts, "plan"), "kubernetes")
    why = (
        "Helm releases to converge: local-path-provisioner (local-path-provisioner 0.0.32) not installed by rackctl yet"
    )
    assert plan["nodes_to_run"] == ["head-01", "gpu-l40s-01"], plan
    assert f"run again on head-01, gpu-l40s-01: {why}" in [a["action"] for a in plan["actions"]], plan["actions"]
    storage, _ = _readiers(kube)
    with storage:
        k8s = _stage(_kubernetes_only(inventory, state_dir, charts), "kubernetes")
    assert "local-path-provisioner installed (revision 1)" in k8s["message"], k8s["message"]
    assert k8s["rerun"] == f"run again on head-01, gpu-l40s-01: {why}"
    with Journal(state_dir, readonly=True) as journal:
        assert {journal.state(n) for n in ("head-01", "gpu-l40s-01")} == {NodeState.JOINED}  # no node moved back

    # Helm holds it as the journal records: the stage is skipped again, nothing asked of Helm
    again = _stage(_kubernetes_only(inventory, state_dir, charts), "kubernetes")
    assert again["status"] == "skipped" and again["nodes"]["head-01"]["message"] == "already joined", again
    assert "rerun" not in again
    assert _local_path_config(kube) == ["/mnt/nvme/lp"]

    # the inventory's values change: run again, Helm upgrades
    changed = _inventory(tmp_path, "/data/lp")
    plan = _stage(_kubernetes_only(changed, state_dir, charts, "plan"), "kubernetes")
    moved = "Helm releases to converge: local-path-provisioner's values changed in the inventory"
    assert f"run again on head-01, gpu-l40s-01: {moved}" in [a["action"] for a in plan["actions"]], plan["actions"]
    storage, _ = _readiers(kube)
    with storage:
        k8s = _stage(_kubernetes_only(changed, state_dir, charts), "kubernetes")
    assert "local-path-provisioner upgraded (revision 2)" in k8s["message"], k8s["message"]
    assert _local_path_config(kube) == ["/data/lp"]


def test_a_release_rackctl_installed_that_the_inventory_drops_is_left_installed_and_said_so(
    state_dir: Path, charts: Path, kube: KubeObjects, tmp_path: Path
) -> None:
    """The journal records kube-prometheus-stack installed by the kubernetes stage, as a run with monitoring on
    leaves it; the inventory now turns monitoring off. Plan and ``up`` say the release is left installed and
    how to remove it; rackctl uninstalls nothing."""
    data = yaml.safe_load(_inventory(tmp_path).read_text())
    data["monitoring"] = {"enabled": False}
    inventory = tmp_path / "no-monitoring.yml"
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    pins = ChartPins()
    record = {
        "release": "kube-prometheus-stack",
        "chart": "kube-prometheus-stack",
        "version": pins.kube_prometheus_stack,
        "namespace": "monitoring",
        "status": "installed",
        "ok": True,
        "stage": "kubernetes",
        "run": 1,
    }
    with Journal(state_dir) as journal:
        journal.register_nodes(["head-01"])
        journal.record_facts("head-01", FACTS, {"releases": {"kube-prometheus-stack": record}})
    left = (
        f"kube-prometheus-stack (kube-prometheus-stack {pins.kube_prometheus_stack} in monitoring): left installed, "
        "no longer in the inventory (rackctl uninstalls nothing: `helm uninstall -n NAMESPACE RELEASE` removes one)"
    )
    plan = _stage(_kubernetes_only(inventory, state_dir, charts, "plan"), "kubernetes")
    assert left in [a["action"] for a in plan["actions"]], plan["actions"]
    storage, _ = _readiers(kube)
    with storage:
        k8s = _stage(_kubernetes_only(inventory, state_dir, charts), "kubernetes")
    assert "local-path-provisioner installed (revision 1)" in k8s["message"] and left in k8s["message"], k8s


def test_workloads_not_ready_in_time_fail_the_stage_naming_release_workload_and_reason(
    state_dir: Path, charts: Path, tmp_path: Path
) -> None:
    code, doc, _ = _up(_inventory(tmp_path), state_dir, charts, "--helm-timeout", "2")
    assert code == EXIT_FAILED, doc
    k8s = _stage(doc, "kubernetes")
    assert k8s["status"] == "failed"
    why = (
        "helm: local-path-provisioner (local-path-provisioner 0.0.32 into local-path-storage) uninstalled: "
        "not ready within 2 s: Deployment local-path-storage/local-path-provisioner: no Deployment controller has "
        "observed generation 1 yet (observedGeneration 0; is kube-controller-manager running?); uninstalled "
        "(Helm's --atomic: nothing of it is left, the next run installs it again)"
    )
    assert k8s["nodes"]["head-01"]["message"] == why
    assert "tigera-operator: rendered + validated, not installed" in k8s["message"]
    assert "kube-prometheus-stack not attempted: local-path-provisioner failed before it" in k8s["message"]
    assert _stage(doc, "nvidia")["status"] == "not_run"
    with Journal(state_dir, readonly=True) as journal:
        steps = [s for s in journal.steps(node="head-01") if s.stage == "kubernetes"]
    assert steps[-1].status == "failed" and why in steps[-1].detail["error"]


def test_plan_names_each_helm_release(state_dir: Path, charts: Path, tmp_path: Path) -> None:
    args = ["plan", "-i", str(_inventory(tmp_path)), "--state-dir", str(state_dir), "--charts", str(charts)]
    result = CliRunner().invoke(cli, [*args, "--stages", "kubernetes,nvidia", "--json"], catch_exceptions=False)
    actions = {a["action"]: a for s in json.loads(result.stdout)["stages"] for a in s["actions"] if a["node"] is None}
    helm_actions = {text.split(" on the cluster")[0].split(":")[0]: a for text, a in actions.items() if "helm" in text}
    assert (
        helm_actions[
            "helm install/upgrade local-path-provisioner (local-path-provisioner 0.0.32) into local-path-storage"
        ]["applies"]
        is True
    )
    assert helm_actions["helm install/upgrade gpu-operator (gpu-operator v26.7.0) into gpu-operator"]["applies"]
    cni = next(a for text, a in actions.items() if text.startswith("helm install/upgrade tigera-operator"))
    assert cni["applies"] is False
    assert cni["action"].endswith(f"not installed, chart tigera-operator {TIGERA} not in --charts {charts}")
