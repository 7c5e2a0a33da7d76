"""etcd quorum refusals, on the arithmetic and on inventory shapes through ``redeploy``'s plan.

No Kubernetes API server can run on this machine, so the cluster's readiness comes from a test double
(:class:`ReadinessOnly`: node readiness only; it refuses every change). The journal is the real one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap.day2.quorum import QuorumRefused, check_member_leaves
from bootstrap.day2.redeploy import plan_redeploy
from bootstrap.environment import HostEnvironment
from bootstrap.inventory import Inventory, load_inventory
from bootstrap.journal.states import MAIN_LINE, NodeState
from bootstrap.journal.store import Journal
from bootstrap.kube import KubeNode
from bootstrap.stages.base import RunOptions

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"


@pytest.mark.parametrize(
    ("members", "down", "leaving", "safe"),
    [
        (["a"], [], "a", False),  # the only member: the cluster itself
        (["a", "b"], [], "a", True),  # 1 left, healthy: quorum 1
        (["a", "b"], ["b"], "a", False),  # the one left is down
        (["a", "b", "c"], [], "a", True),  # 2 left, both healthy: quorum 2
        (["a", "b", "c"], ["c"], "a", False),  # 2 left, 1 healthy: quorum 2
        (["a", "b", "c"], ["a"], "a", True),  # the down one leaves: the 2 others are healthy
        (["a", "b", "c", "d", "e"], ["e"], "a", True),  # 4 left, 3 healthy: quorum 3
        (["a", "b", "c", "d", "e"], ["d", "e"], "a", False),  # 4 left, 2 healthy
        (["a", "b", "c"], ["b", "c"], "x", True),  # not a member: nothing leaves etcd
    ],
)
def test_member_leaves_only_when_quorum_holds(members: list[str], down: list[str], leaving: str, safe: bool) -> None:
    healthy = {m: m not in down for m in members}
    if safe:
        assert check_member_leaves(leaving, members, healthy).safe or leaving not in members
    else:
        with pytest.raises(QuorumRefused) as refused:
            check_member_leaves(leaving, members, healthy)
        assert refused.value.problems[0].fix  # says what to do


class ReadinessOnly:
    """Test double for a deployed cluster: node readiness from a dict; every change is refused."""

    deployed = True
    reason = "test double"

    def __init__(self, ready: dict[str, bool]) -> None:
        self.ready = ready

    def nodes(self) -> dict[str, KubeNode]:
        return {n: KubeNode(n, ready=r, allocatable_gpus=0) for n, r in self.ready.items()}

    def _no(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a plan must not change the cluster")

    drain = delete_node = uncordon = remove_etcd_member = label = _no


def joined(tmp_path: Path, inventory: Inventory) -> Path:
    """A journal where every node has joined Kubernetes."""
    state = tmp_path / "state"
    with Journal(state) as journal:
        journal.register_nodes([n.hostname for n in inventory.nodes])
        for n in inventory.nodes:
            for to in MAIN_LINE[1 : MAIN_LINE.index(NodeState.JOINED) + 1]:
                journal.transition(n.hostname, to, "test setup")
    return state


def shaped(tmp_path: Path, control_planes: int) -> Inventory:
    """The example rack with ``control_planes`` control planes (head-01 plus cp-0N), the rest workers."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["cluster"]["lab"] = True  # allows fewer than three control planes
    cps = [n for n in data["nodes"] if n["role"] == "control-plane"]
    for extra in cps[control_planes - 1 :]:
        data["nodes"].remove(extra)
    data.pop("models", None)
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(path)


OPTIONS = RunOptions(environment=HostEnvironment())


def test_redeploying_a_control_plane_is_refused_while_another_is_not_ready(tmp_path: Path) -> None:
    inventory = shaped(tmp_path, 3)
    state = joined(tmp_path, inventory)
    cluster = ReadinessOnly({"head-01": True, "cp-02": True, "cp-03": False})
    with pytest.raises(QuorumRefused) as refused:
        plan_redeploy(inventory, state, "cp-02", cluster, OPTIONS)
    assert "cp-03" in refused.value.problems[0].message
    ok = plan_redeploy(
        inventory, state, "cp-02", ReadinessOnly(dict.fromkeys(["head-01", "cp-02", "cp-03"], True)), OPTIONS
    )
    assert ok.quorum is not None and (ok.quorum.members, ok.quorum.quorum_after) == (3, 2)
    steps = {s: skip for s, _, skip in ok.steps}
    assert steps["etcd-remove"] is None and steps["drain"] is None  # Kubernetes is there: they will run
    # a worker never touches etcd, whatever the control planes' state
    worker = plan_redeploy(inventory, state, "gpu-l40s-01", cluster, OPTIONS)
    assert worker.quorum is None and "etcd-remove" not in {s for s, _, _ in worker.steps}


class NothingPreinstalled(HostEnvironment):
    """A site whose head node rackctl may reinstall too (installed from elsewhere)."""

    def preinstalled(self, inventory: Inventory) -> set[str]:
        return set()


def test_the_only_control_plane_is_never_taken_out(tmp_path: Path) -> None:
    inventory = shaped(tmp_path, 1)  # a lab: head-01 is the only control plane
    state = joined(tmp_path, inventory)
    options = RunOptions(environment=NothingPreinstalled())
    with pytest.raises(QuorumRefused) as refused:
        plan_redeploy(inventory, state, "head-01", ReadinessOnly({"head-01": True}), options)
    assert "only control plane" in refused.value.problems[0].message


def test_without_kubernetes_no_quorum_question_arises(tmp_path: Path) -> None:
    from bootstrap.kube import NotDeployed

    inventory = shaped(tmp_path, 3)
    state = joined(tmp_path, inventory)
    plan = plan_redeploy(inventory, state, "cp-02", NotDeployed("not deployed: no kubeconfig"), OPTIONS)
    assert plan.quorum is None
    assert {s: skip for s, _, skip in plan.steps}["etcd-remove"] == "not deployed: no kubeconfig"
