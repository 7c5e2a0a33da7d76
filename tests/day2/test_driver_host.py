"""The host-driver rollout's decisions (``bootstrap.day2.driver_host``), with a real kube-apiserver and journal.

The node side (apt, the reboot, nvidia-smi) cannot run on this machine: :class:`RecordingNodes`, a test
double, answers for it here, and records what was asked of it and whether the Kubernetes Node was cordoned
(read from the real API server) when its upgrade ran. The lab test
(``tests/inband/test_network_stage_lab.py``, the last test) runs the node side for real on the lab's VMs.
The read playbook is run for real below against a real sshd on loopback (``tests/sshnode.py``).
No kubelet runs: the Nodes are created and marked Ready through the API by the test (tests/kube_objects.py).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.ansible_driver import run_playbook
from bootstrap.cli import cli
from bootstrap.day2.driver import plan_upgrade
from bootstrap.day2.driver_host import (
    INSTALLED_FACT,
    READ_PLAYBOOK,
    DriverRolloutReport,
    HostDriverRollout,
    InstalledDriver,
    NodeUpgrade,
)
from bootstrap.firmware.plan import rollout_policy
from bootstrap.inband.access import NodeAccess
from bootstrap.inventory import Inventory, load_inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.kube import ClusterGate, Kubectl, cluster_for
from bootstrap.rollout.gate import NodeGate
from tests.kube_objects import KubeObjects
from tests.sshnode import SSHD, start_ssh_node

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "examples" / "dvd-inference.yml"
V0, V = "580.95.05", "580.105.08"
L40S, XE = "gpu-l40s-01", "gpu-xe9680-01"
DRIVER, FM = "cuda-drivers-580", "nvidia-fabricmanager-580"


def inventory(tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["cluster"]["gpu_driver"] = "host"
    if edit is not None:
        edit(data)
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def at(node: str, version: str, *, held: bool = True, running: str | None = None) -> InstalledDriver:
    """A node's driver as role nvidia_driver_upgrade reports it (the XE9680 has Fabric Manager too)."""
    selection = "hold" if held else "install"
    names = [DRIVER, FM] if node == XE else [DRIVER]
    packages = {n: {"version": f"{version}-1", "selection": selection} for n in names}
    return InstalledDriver(node, packages, (running or version,) * 2)


class RecordingNodes:
    """TEST DOUBLE for the node side (see the module docstring): answers reads from ``installed``, fails
    the upgrade of the nodes in ``fail`` with their message, and records each upgrade with whether the Node
    was cordoned in the real API server at that moment."""

    def __init__(
        self,
        installed: dict[str, InstalledDriver],
        *,
        fail: dict[str, str] | None = None,
        kube: KubeObjects | None = None,
    ) -> None:
        self.installed = installed
        self.fail = fail or {}
        self.kube = kube
        self.upgraded: list[tuple[str, bool | None]] = []

    def read(self, nodes: list[str]) -> dict[str, InstalledDriver]:
        return {n: self.installed[n] for n in nodes}

    def upgrade(self, node: str) -> NodeUpgrade:
        cordoned = bool(self.kube.get_node(node)["spec"].get("unschedulable")) if self.kube else None
        self.upgraded.append((node, cordoned))
        if node in self.fail:
            return NodeUpgrade(False, self.fail[node])
        before = self.installed[node]
        self.installed[node] = after = at(node, V)
        fact = {"packages": after.packages, "running": list(after.running)}
        report = {
            "before": {"packages": before.packages, "running": list(before.running)},
            "after": fact,
            "rebooted": True,
            "boot_id_before": "aaaaaaaa-1",
            "boot_id_after": "bbbbbbbb-2",
        }
        return NodeUpgrade(True, report=report, output="(test double)")


def joined(kube: KubeObjects, l40s: str, xe: str, *, fail: dict[str, str] | None = None) -> RecordingNodes:
    """Both GPU nodes made Kubernetes Nodes (8 GPUs each); their double with the L40S node's driver at
    ``l40s`` and the XE9680's at ``xe``, failing the upgrades in ``fail``."""
    for node in (L40S, XE):
        kube.node(node, gpus=8)
    return RecordingNodes({L40S: at(L40S, l40s), XE: at(XE, xe)}, fail=fail, kube=kube)


def roll(
    path: Path, state: Path, nodes: RecordingNodes, gate: NodeGate, *, max_unavailable: int | None = None
) -> DriverRolloutReport:
    inv: Inventory = load_inventory(path)
    plan = plan_upgrade(inv, V, max_unavailable=max_unavailable)
    policy = rollout_policy(inv)
    if max_unavailable is not None:
        policy = replace(policy, max_unavailable=max_unavailable)
    with Journal(state) as journal:
        run_id = journal.begin_run("test: driver upgrade")
        return HostDriverRollout(inv, plan, journal, run_id, nodes=nodes, gate=gate, policy=policy).run()


def outcome(report: DriverRolloutReport, node: str) -> dict[str, Any]:
    return next(n.as_dict() for n in report.nodes if n.node == node)


# -- what "at the version" means -------------------------------------------------------------------------
def test_a_node_is_at_the_version_only_with_every_package_held_at_it_and_every_gpu_running_it() -> None:
    assert at(XE, V).at(V)
    assert not at(XE, V, held=False).at(V)  # not held: apt may move it
    assert not at(XE, V, running=V0).at(V)  # installed, the reboot into it never happened (a killed run)
    assert not at(XE, V0).at(V)
    half = at(XE, V)
    half.packages[FM]["version"] = f"{V0}-1"  # Fabric Manager behind the driver
    assert not half.at(V)
    assert not InstalledDriver(XE, error="unreachable").at(V)
    assert not InstalledDriver(XE, {DRIVER: {"version": f"{V}-1", "selection": "hold"}}, ()).at(V)  # no answer


# -- with the real API server ------------------------------------------------------------------------------
def test_a_node_at_the_version_is_not_touched_and_the_other_is_upgraded_while_cordoned(
    tmp_path: Path, kube: KubeObjects, kubeconfig: Path
) -> None:
    nodes = joined(kube, V, V0)
    state = tmp_path / "state"
    report = roll(inventory(tmp_path), state, nodes, ClusterGate(Kubectl(kubeconfig)))
    assert report.ok and not report.stopped, report.as_dict()
    assert nodes.upgraded == [(XE, True)]  # cordoned while it ran; the node at V never
    skipped = outcome(report, L40S)
    assert skipped["status"] == "nothing-to-do" and skipped["cordon"] == "not touched"
    assert [s["step"] for s in skipped["steps"]] == ["read"]
    done = outcome(report, XE)
    assert done["status"] == "done" and done["cordon"] == "uncordoned" and done["batch"] == 1
    assert done["records"]["cordon"] == "cordoned and drained" and done["records"]["reboot"].startswith("rebooted")
    assert done["before"]["running"] == [V0] and done["after"]["running"] == [V]
    assert [[*b.nodes] for b in report.batches] == [[XE]]  # a done node takes no batch
    for node in (L40S, XE):
        assert not kube.get_node(node)["spec"].get("unschedulable")
    with Journal(state, readonly=True) as journal:
        assert {s.step for s in journal.steps(node=L40S)} == {"read"}
        assert [(s.step, s.status) for s in journal.steps(node=XE) if s.status != "started"] == [
            ("read", "completed"),
            ("cordon", "completed"),
            (f"upgrade:{V}", "completed"),
            ("uncordon", "completed"),
        ]
        assert journal.state(XE) is NodeState.REGISTERED  # back from maintenance


def test_a_failure_stops_the_rollout_at_the_threshold_and_leaves_the_node_cordoned_and_recorded(
    tmp_path: Path, kube: KubeObjects, kubeconfig: Path
) -> None:
    refusal = "the node's package sources have no cuda-drivers-580 at 580.105.08: nothing was changed"
    nodes = joined(kube, V0, V0, fail={L40S: refusal})
    state = tmp_path / "state"
    path = inventory(tmp_path)
    gate = ClusterGate(Kubectl(kubeconfig))
    report = roll(path, state, nodes, gate)  # max_unavailable 1, failure_threshold 1
    assert not report.ok and report.stopped and "failure threshold 1" in report.reason, report.reason
    assert nodes.upgraded == [(L40S, True)]
    failed = outcome(report, L40S)
    assert failed["status"] == "failed" and failed["cordon"] == "left cordoned" and failed["message"] == refusal
    assert failed["records"]["uncordon"] == f"left cordoned: {refusal}"
    pending = outcome(report, XE)
    assert pending["status"] == "pending" and "the rollout stopped" in pending["message"]
    assert pending["cordon"] == "not touched"
    assert kube.get_node(L40S)["spec"].get("unschedulable") is True
    assert not kube.get_node(XE)["spec"].get("unschedulable")
    with Journal(state, readonly=True) as journal:
        assert journal.state(L40S) is NodeState.MAINTENANCE
        assert journal.history(L40S)[-1].cause == f"driver rollout to {V}, batch 1"
        upgrade = journal.last_step(L40S, "driver", f"upgrade:{V}")
        assert upgrade is not None and upgrade.status == "failed" and refusal in upgrade.detail["error"]
        left = journal.last_step(L40S, "driver", "uncordon")
        assert left is not None and left.detail["gate"] == f"left cordoned: {refusal}"
        assert journal.state(XE) is NodeState.REGISTERED

    # run again once fixed: the node left down goes first, then the other; a node an earlier run finished
    # (here: found at V, as after a kill between its reboot and its uncordon) is only given back
    nodes.fail = {}
    again = roll(path, state, nodes, gate)
    assert again.ok, again.as_dict()
    assert nodes.upgraded[1:] == [(L40S, True), (XE, True)]
    assert [[*b.nodes] for b in again.batches] == [[L40S], [XE]]
    for node in (L40S, XE):
        assert outcome(again, node)["cordon"] == "uncordoned"
        assert not kube.get_node(node)["spec"].get("unschedulable")


def test_a_node_left_cordoned_that_is_at_the_version_now_is_given_back_without_an_upgrade(
    tmp_path: Path, kube: KubeObjects, kubeconfig: Path
) -> None:
    kube.node(L40S, gpus=2)
    kube.node(XE, gpus=8)
    state = tmp_path / "state"
    path = inventory(tmp_path)
    gate = ClusterGate(Kubectl(kubeconfig))
    nodes = RecordingNodes({L40S: at(L40S, V0), XE: at(XE, V)}, fail={L40S: "killed"}, kube=kube)
    roll(path, state, nodes, gate)
    assert kube.get_node(L40S)["spec"].get("unschedulable") is True
    nodes.installed[L40S] = at(L40S, V)  # what a killed run's upgrade left: at V, still cordoned
    again = roll(path, state, nodes, gate)
    assert again.ok and nodes.upgraded == [(L40S, True)]  # no second upgrade
    given = outcome(again, L40S)
    assert given["status"] == "nothing-to-do" and "uncordoned now" in given["message"], given
    assert given["cordon"] == "uncordoned"
    assert not kube.get_node(L40S)["spec"].get("unschedulable")
    with Journal(state, readonly=True) as journal:
        assert journal.state(L40S) is NodeState.REGISTERED


def test_below_the_threshold_a_failed_node_still_counts_against_max_unavailable(
    tmp_path: Path, kube: KubeObjects, kubeconfig: Path
) -> None:
    def threshold_two(data: dict[str, Any]) -> None:
        data.setdefault("firmware", {})["rollout"] = {"max_unavailable": 1, "failure_threshold": 2}

    nodes = joined(kube, V0, V0, fail={L40S: "verify failed"})
    report = roll(inventory(tmp_path, threshold_two), tmp_path / "state", nodes, ClusterGate(Kubectl(kubeconfig)))
    assert not report.ok and not report.stopped  # one failure, threshold 2: not stopped...
    assert [n for n, _c in nodes.upgraded] == [L40S]  # ...but the failed node is still down: no room for XE
    assert outcome(report, L40S)["cordon"] == "left cordoned"
    blocked = outcome(report, XE)
    assert blocked["status"] == "blocked" and "already use max-unavailable 1" in blocked["message"], blocked
    assert report.reason.startswith("1 node(s) failed: gpu-l40s-01")


def test_nodes_of_one_batch_run_together_and_each_is_cordoned_during_its_own_upgrade(
    tmp_path: Path, kube: KubeObjects, kubeconfig: Path
) -> None:
    nodes = joined(kube, V0, V0)
    report = roll(inventory(tmp_path), tmp_path / "state", nodes, ClusterGate(Kubectl(kubeconfig)), max_unavailable=2)
    assert report.ok and [[*b.nodes] for b in report.batches] == [[L40S, XE]]
    assert sorted(nodes.upgraded) == [(L40S, True), (XE, True)]


# -- without Kubernetes ----------------------------------------------------------------------------------
def test_without_kubernetes_nothing_is_drained_and_the_records_say_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    nodes = RecordingNodes({L40S: at(L40S, V0), XE: at(XE, V0)})
    report = roll(inventory(tmp_path), state, nodes, ClusterGate(cluster_for(state)))
    assert report.ok, report.as_dict()
    for node in (L40S, XE):
        done = outcome(report, node)
        assert done["records"]["cordon"].startswith("no Kubernetes: not drained (not deployed")
        assert done["cordon"].startswith("not cordoned (no Kubernetes: not uncordoned")


def test_a_node_kubernetes_does_not_know_is_not_drained_and_a_failure_there_is_not_called_cordoned(
    tmp_path: Path, kube: KubeObjects, kubeconfig: Path
) -> None:
    kube.node(XE, gpus=8)  # the L40S node never joined
    nodes = RecordingNodes({L40S: at(L40S, V0), XE: at(XE, V0)}, fail={L40S: "verify failed"}, kube=None)
    report = roll(inventory(tmp_path), tmp_path / "state", nodes, ClusterGate(Kubectl(kubeconfig)))
    failed = outcome(report, L40S)
    assert failed["records"]["cordon"] == "not a Kubernetes node: not drained"
    assert failed["cordon"] == "not cordoned (not a Kubernetes node: not drained)"
    assert failed["records"]["uncordon"].startswith("left in maintenance (not a Kubernetes node: not drained)")


def test_a_node_that_cannot_be_read_fails_untouched(tmp_path: Path) -> None:
    state = tmp_path / "state"
    nodes = RecordingNodes({L40S: InstalledDriver(L40S, error="unreachable: no route"), XE: at(XE, V0)})
    report = roll(inventory(tmp_path), state, nodes, ClusterGate(cluster_for(state)))
    unread = outcome(report, L40S)
    assert unread["status"] == "failed" and "could not read its driver: unreachable" in unread["message"]
    assert unread["cordon"] == "not touched" and [n for n, _c in nodes.upgraded] == [XE]
    assert not report.ok and not report.stopped  # not a rollout failure: nothing was done to it


# -- the CLI -----------------------------------------------------------------------------------------------
def test_the_plan_of_the_host_path_says_which_nodes_will_reboot(tmp_path: Path) -> None:
    path = inventory(tmp_path)
    args = ["driver", "upgrade", "--version", V, "--plan", "-i", str(path), "--state-dir", str(tmp_path / "s")]
    human = CliRunner().invoke(cli, args)
    assert human.exit_code == 0, human.output
    text = " ".join(human.output.split())
    assert f"each GPU node not already at {V} ({L40S}, {XE}) is cordoned, drained, upgraded and REBOOTED" in text
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)
    assert data["applied"] is False and "REBOOTED" in data["reason"]
    assert not (tmp_path / "s").exists()  # --plan writes nothing


# -- the read playbook, for real ---------------------------------------------------------------------------
@pytest.mark.skipif(not Path(SSHD).exists(), reason="openssh-server not installed")
def test_the_read_playbook_reports_a_real_nodes_packages_and_no_running_driver(tmp_path: Path) -> None:
    """``playbooks/driver-installed.yml`` over real SSH (sshd on loopback, this machine as the node): the
    driver package name is pointed at ``bash`` so that dpkg has something real to report."""
    node = start_ssh_node(tmp_path / "sshnode")
    try:
        access = NodeAccess(
            hostname="node-a",
            address="127.0.0.1",
            user=getpass.getuser(),
            known_hosts=node.known_hosts,
            private_key=node.private_key,
            port=node.port,
        )
        hostvars = {**access.ansible_vars(), "fabric_manager_expected": True}
        hosts = tmp_path / "hosts.yml"
        hosts.write_text(json.dumps({"all": {"children": {"gpu": {"hosts": {"node-a": hostvars}}}}}))
        extravars = {"nvidia_driver_upgrade_version": V, "nvidia_driver_upgrade_package": "bash"}
        result = run_playbook(READ_PLAYBOOK, hosts, extravars=extravars, facts_var=INSTALLED_FACT)
    finally:
        node.stop()
    assert result.ok and result.hosts["node-a"].changed == 0, result.as_dict()
    found = InstalledDriver.from_fact("node-a", result.facts["node-a"])
    bash = found.packages["bash"]
    assert bash["selection"] in ("install", "hold") and bash["version"][0].isdigit()
    assert found.packages[FM] == {"version": "", "selection": ""}  # Fabric Manager's package: not installed
    assert found.running == () and not found.at(V)


def test_the_human_report_shows_each_node_its_versions_and_where_it_is_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bootstrap.cli import common
    from bootstrap.cli.day2_cmds import show_report

    monkeypatch.setattr(common.console, "width", 400)  # one line per node
    state = tmp_path / "state"
    nodes = RecordingNodes({L40S: at(L40S, V), XE: at(XE, V0)}, fail={XE: "verify failed"})
    show_report(roll(inventory(tmp_path), state, nodes, ClusterGate(cluster_for(state))))
    text = " ".join(capsys.readouterr().out.split())
    for words in (L40S, XE, "nothing-to-do", "failed", "left in maintenance", "1 node(s) failed", "running"):
        assert words in text, (words, text)
