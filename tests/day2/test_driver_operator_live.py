"""``rackctl driver upgrade`` on the operator path, executed against the real kube-apiserver 1.37.2.

What is real: the API server, kubectl, rackctl's merge patch of the ClusterPolicy and its watch of the Nodes'
``nvidia.com/gpu-driver-upgrade-state`` labels, through the CLI with ``<state-dir>/kubeconfig``.

What stands in, and says so:

- The ClusterPolicy CRD is a STAND-IN: the GPU Operator chart's CRD cannot be had offline here, so the test
  installs a minimal ``apiextensions.k8s.io/v1`` CRD with the real group (``nvidia.com``), kind
  (``ClusterPolicy``), plural (``clusterpolicies``), cluster scope, and ``x-kubernetes-preserve-unknown-fields``.
- No GPU Operator runs: :class:`UpgradeControllerStandIn`, a thread of the test, plays its upgrade controller
  through the API. It waits for the ClusterPolicy's ``spec.driver.version`` to change, then walks the GPU
  nodes' state labels one node at a time through the states of NVIDIA/k8s-operator-libs ``pkg/upgrade``
  (cordoning and uncordoning the Node as the controller does), or fails/stalls a node where the test asks.
- Node status is written by the test (no kubelet), as in tests/kube_objects.py.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.day2.driver_matrix import OPERATOR_UPGRADE_POLICY
from bootstrap.day2.driver_operator import CLUSTER_POLICY, STATE_LABEL, OperatorNotDeployed, upgrade_with_operator
from bootstrap.kube import Kubectl
from tests import timing
from tests.cluster.apiserver import ApiServer
from tests.kube_objects import MERGE, BackgroundPoller, KubeObjects

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "examples" / "dvd-inference.yml"
GPU_NODES = ["gpu-l40s-01", "gpu-xe9680-01"]  # the example inventory's GPU nodes
OLD, NEW = "570.195.03", "580.95.05"
CRD_NAME = CLUSTER_POLICY
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
POLICIES = "/apis/nvidia.com/v1/clusterpolicies"
#: the states the stand-in walks a node through after upgrade-required (k8s-operator-libs pkg/upgrade/consts.go)
WALK = (
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
    "upgrade-done",
)

#: STAND-IN for the GPU Operator chart's ClusterPolicy CRD (not available offline): real names, open schema.
STAND_IN_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME, "labels": {"rackctl-test": "STAND-IN"}},
    "spec": {
        "group": "nvidia.com",
        "scope": "Cluster",
        "names": {"kind": "ClusterPolicy", "plural": "clusterpolicies", "singular": "clusterpolicy"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def _gone(server: ApiServer, path: str, timeout_s: float = timing.SLOW_S) -> None:
    timing.wait_for(lambda: server.request("GET", path).status_code == 404, timeout_s, 0.2, f"{path} gone")


@pytest.fixture
def crd(kube_apiserver: ApiServer) -> Any:
    """The STAND-IN ClusterPolicy CRD, Established; removed (with its objects) after the test."""
    server = kube_apiserver
    resp = server.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=STAND_IN_CRD)
    assert resp.status_code == 201, resp.text

    def established() -> bool:
        conditions = (server.request("GET", CRD_PATH).json().get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    timing.wait_for(established, timing.SLOW_S, 0.2, "the CRD Established")
    yield server
    server.request("DELETE", CRD_PATH)
    _gone(server, CRD_PATH)


def _policy(kube: KubeObjects, name: str = "cluster-policy") -> None:
    spec = {
        "operator": {"defaultRuntime": "containerd"},
        "driver": {
            "enabled": True,
            "repository": "nvcr.io/nvidia",
            "version": OLD,
            "upgradePolicy": {"autoUpgrade": False},
        },
        "toolkit": {"enabled": True},
    }
    body = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": spec}
    kube.call("POST", POLICIES, body)


def _gpu_nodes(kube: KubeObjects, state: str = "upgrade-done") -> None:
    """The GPU nodes as Kubernetes has them after an earlier driver upgrade (labels by the test)."""
    for node in GPU_NODES:
        kube.node(node, gpus=8, labels={"nvidia.com/gpu.present": "true", STATE_LABEL: state})


class UpgradeControllerStandIn(BackgroundPoller):
    """Stands in for the GPU Operator's upgrade controller (none runs here), through the API only.

    Once the ClusterPolicy asks for a driver version other than ``old``, it records the policy, waits
    ``start_delay_s`` (the operator's reconcile), marks every GPU node ``upgrade-required``, then walks one
    node at a time (``maxParallelUpgrades: 1``) through :data:`WALK`, ``step_s`` per state, cordoning the
    Node at ``cordon-required`` and uncordoning it at ``uncordon-required``. ``fail`` ends that node in
    ``upgrade-failed`` after ``drain-required``; ``stall`` leaves that node in ``drain-required`` for good.
    """

    thread_name = "upgrade-controller-stand-in"
    join_s = 30.0

    def __init__(
        self,
        kube: KubeObjects,
        *,
        old: str = OLD,
        start_delay_s: float = 1.0,
        step_s: float = 0.15,
        fail: str | None = None,
        stall: str | None = None,
    ) -> None:
        super().__init__(poll_s=0.1)
        self.kube, self.old, self.start_delay_s, self.step_s = kube, old, start_delay_s, step_s
        self.fail, self.stall = fail, stall
        self.policy_seen: dict[str, Any] | None = None
        self.transitions: list[tuple[str, str]] = []
        self.finished_at: float | None = None

    def finished(self) -> bool:
        return self.policy_seen is not None  # the walk ran (or stopped) in the poll that saw the policy

    def _label(self, node: str, state: str) -> None:
        self.kube.call("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {STATE_LABEL: state}}}, headers=MERGE)
        self.transitions.append((node, state))

    def _cordon(self, node: str, on: bool) -> None:
        self.kube.call("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": on}}, headers=MERGE)

    def poll(self) -> None:
        policy = self.kube.call("GET", f"{POLICIES}/cluster-policy")
        if policy["spec"]["driver"].get("version") != self.old:
            self.policy_seen = policy
            self._walk()

    def _walk(self) -> None:
        if self.pause(self.start_delay_s):
            return
        for node in GPU_NODES:
            self._label(node, "upgrade-required")
        for node in GPU_NODES:
            for state in WALK:
                if self.pause(self.step_s):
                    return
                if state == "pod-restart-required" and node == self.fail:
                    self._label(node, "upgrade-failed")
                    break
                self._label(node, state)
                if state == "cordon-required":
                    self._cordon(node, True)
                if state == "uncordon-required":
                    self._cordon(node, False)
                if state == "drain-required" and node == self.stall:
                    return
        self.finished_at = time.monotonic()


def _state_dir(tmp_path: Path, kubeconfig: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(kubeconfig, state / "kubeconfig")
    return state


def _upgrade(state: Path, *extra: str) -> Any:
    args = ["driver", "upgrade", "--version", NEW, "-i", str(EXAMPLE), "--state-dir", str(state), "--poll", "0.2"]
    return CliRunner().invoke(cli, [*args, *extra], catch_exceptions=False)


def test_the_operator_rolls_the_driver_and_rackctl_watches_every_node_to_upgrade_done(
    crd: ApiServer, kube: KubeObjects, kubeconfig: Path, tmp_path: Path
) -> None:
    _policy(kube)
    _gpu_nodes(kube)  # still upgrade-done from the earlier upgrade: must not count as this one's
    state = _state_dir(tmp_path, kubeconfig)
    planned = _upgrade(state, "--json", "--plan")  # the dry run: checks and plan, the ClusterPolicy untouched
    assert planned.exit_code == 0 and json.loads(planned.stdout)["applied"] is False, planned.output
    assert kube.call("GET", f"{POLICIES}/cluster-policy")["spec"]["driver"]["version"] == OLD
    with UpgradeControllerStandIn(kube) as operator:
        result = _upgrade(state, "--json")
        returned = time.monotonic()
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] and data["applied"] and data["status"] == "applied"
    upgrade = data["operator"]
    assert upgrade["outcome"] == "done" and upgrade["cluster_policy"] == "cluster-policy"
    assert (upgrade["previous_version"], upgrade["version"]) == (OLD, NEW)
    assert operator.finished_at is not None and operator.finished_at <= returned  # not before the operator was
    for node in GPU_NODES:
        seen = upgrade["nodes"][node]["observed"]
        # left the earlier upgrade-done for the controller's states, and came back to it
        assert seen[0] == "upgrade-done" and seen[-1] == "upgrade-done" and len(seen) >= 3, seen
        assert upgrade["nodes"][node]["done"]
        # the states rackctl saw are in the controller's order (polling may skip some, never reorder)
        order = ["upgrade-required", *WALK]
        assert [order.index(s) for s in seen[1:]] == sorted(order.index(s) for s in seen[1:])
    # the patch reached the server: version and rackctl's upgrade policy set, the rest of the spec kept
    assert operator.policy_seen is not None
    driver = operator.policy_seen["spec"]["driver"]
    assert driver["version"] == NEW and driver["upgradePolicy"] == OPERATOR_UPGRADE_POLICY
    assert driver["repository"] == "nvcr.io/nvidia" and operator.policy_seen["spec"]["toolkit"] == {"enabled": True}
    assert all(not kube.get_node(n)["spec"].get("unschedulable") for n in GPU_NODES)


def test_progress_is_shown_per_node_and_a_second_run_finds_the_version_already_rolled_out(
    crd: ApiServer, kube: KubeObjects, kubeconfig: Path, tmp_path: Path
) -> None:
    _policy(kube)
    _gpu_nodes(kube)
    state = _state_dir(tmp_path, kubeconfig)
    with UpgradeControllerStandIn(kube, start_delay_s=0.3):
        result = _upgrade(state)
    assert result.exit_code == 0, result.output
    for node in GPU_NODES:
        # each state lasts step_s (0.15 s) and rackctl reads every 0.2 s: which of the middle ones a read
        # lands on depends on the machine's load, that some of them is shown per node does not
        shown = [state for state in WALK[:-1] if f"{node}: {state}" in result.stderr]
        assert shown, result.stderr
        assert f"{node}: upgrade-done" in result.stderr
    assert "2/2 done" in result.stderr
    assert f"driver {NEW} rolled out by the GPU Operator on {', '.join(GPU_NODES)}" in result.stdout
    # again, no operator moving anything: the ClusterPolicy already asks for NEW and every node is done
    again = _upgrade(state, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["operator"]["previous_version"] == NEW


def test_a_node_the_operator_marks_upgrade_failed_fails_the_command_naming_it(
    crd: ApiServer, kube: KubeObjects, kubeconfig: Path, tmp_path: Path
) -> None:
    _policy(kube)
    _gpu_nodes(kube)
    state = _state_dir(tmp_path, kubeconfig)
    with UpgradeControllerStandIn(kube, start_delay_s=0.3, fail=GPU_NODES[0]):
        result = _upgrade(state, "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert not data["ok"] and data["status"] == "applied, failed"
    upgrade = data["operator"]
    assert upgrade["outcome"] == "failed"
    assert upgrade["message"].startswith(
        f"driver {NEW} upgrade failed on {GPU_NODES[0]} ({STATE_LABEL}=upgrade-failed)"
    )
    assert upgrade["nodes"][GPU_NODES[0]]["state"] == "upgrade-failed"
    assert not upgrade["nodes"][GPU_NODES[1]]["done"]


def test_a_rollout_that_does_not_finish_times_out_with_each_nodes_state(
    crd: ApiServer, kube: KubeObjects, kubeconfig: Path, tmp_path: Path
) -> None:
    _policy(kube)
    _gpu_nodes(kube)
    state = _state_dir(tmp_path, kubeconfig)
    started = time.monotonic()
    # 15 s: the first node's walk (a dozen API writes) must end within it on a loaded machine; a slower one
    # sets RACKCTL_TEST_TIME_FACTOR (tests/timing.py)
    limit = timing.whole_seconds(15)
    with UpgradeControllerStandIn(kube, start_delay_s=0.3, stall=GPU_NODES[1]):
        result = _upgrade(state, "--json", "--timeout", str(limit))
    assert time.monotonic() - started < timing.seconds(60)
    assert result.exit_code == 1, result.output
    upgrade = json.loads(result.stdout)["operator"]
    assert upgrade["outcome"] == "timeout"
    assert f"did not finish driver {NEW} within {limit} s" in upgrade["message"]
    assert f"{GPU_NODES[0]}: upgrade-done; {GPU_NODES[1]}: drain-required" in upgrade["message"]


def test_an_operator_that_never_starts_times_out_rather_than_trusting_the_old_upgrade_done(
    crd: ApiServer, kube: KubeObjects, kubeconfig: Path
) -> None:
    _policy(kube)
    _gpu_nodes(kube)  # upgrade-done from before; no operator moves them
    result = upgrade_with_operator(Kubectl(kubeconfig, timeout_s=30), GPU_NODES, NEW, timeout_s=2, poll_s=0.2)
    assert result.outcome == "timeout"
    assert "upgrade-done (from an earlier upgrade: the operator has not started this one here)" in result.message


def test_without_a_cluster_policy_it_says_the_operator_is_not_deployed_and_changes_nothing(
    kube_apiserver: ApiServer, kube: KubeObjects, kubeconfig: Path, tmp_path: Path
) -> None:
    assert kube_apiserver.request("GET", CRD_PATH).status_code == 404  # no CRD at all
    _gpu_nodes(kube)
    state = _state_dir(tmp_path, kubeconfig)
    result = _upgrade(state, "--json")
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error.startswith("the GPU Operator is not deployed: this cluster has no CustomResourceDefinition")
    assert "nothing was changed" in error and "nvidia stage" in error
    assert all(kube.get_node(n)["metadata"]["labels"][STATE_LABEL] == "upgrade-done" for n in GPU_NODES)
    assert not (state / "day2").exists()


def test_with_the_crd_but_no_cluster_policy_nothing_is_created(
    crd: ApiServer, kube: KubeObjects, kubeconfig: Path, tmp_path: Path
) -> None:
    _gpu_nodes(kube)
    with pytest.raises(OperatorNotDeployed, match=r"no ClusterPolicy \(clusterpolicies.nvidia.com\) exists"):
        upgrade_with_operator(Kubectl(kubeconfig, timeout_s=30), GPU_NODES, NEW, timeout_s=2)
    assert kube.call("GET", POLICIES)["items"] == []
    result = _upgrade(_state_dir(tmp_path, kubeconfig))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "the GPU Operator is not deployed: no ClusterPolicy" in " ".join(result.stderr.split())
