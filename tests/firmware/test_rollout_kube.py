"""``rackctl firmware apply`` and ``rackctl up --apply-firmware`` with a kubeconfig under --state-dir: emulated
iDRACs, a real kube-apiserver.

Each Kubernetes node is cordoned and drained before its first update and uncordoned after its versions read
back; a node whose update fails stays cordoned, with the record saying so. Observed from the API server while
the rollout runs (a watcher reads the Nodes and the emulators' own update records) and from the report.
No kubelet runs: the test marks the Nodes Ready and finalises evicted pods itself (tests/kube_objects.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from fwlab import BASELINE_VERSIONS, FwLab, api, start_lab

from bootstrap.cli import cli
from bootstrap.inventory import load_inventory
from bootstrap.journal.store import Journal
from bootstrap.stages.base import RunOptions
from bootstrap.stages.options import FirmwareOptions
from bootstrap.stages.runner import Runner, select
from tests.kube_objects import KubeObjects, NodeSampler, PodFinaliser


def _at_baseline(firmware: dict[str, str]) -> bool:
    nics = {v for k, v in firmware.items() if k.startswith("NIC:")}
    return (
        firmware.get("iDRAC") == BASELINE_VERSIONS["idrac"]
        and firmware.get("BIOS") == BASELINE_VERSIONS["bios"]
        and nics == {BASELINE_VERSIONS["nic"]}
    )


class Watcher(NodeSampler):
    """Samples, every ``poll_s``: the Nodes' ``unschedulable``, each iDRAC's update records and firmware, the
    Nodes again. A node is mid-update when its iDRAC accepted an update and is not at the baseline yet; a
    sample where both Node reads say schedulable for a node mid-update is a violation."""

    thread_name = "firmware-watcher"
    join_s = 30.0

    def __init__(self, lab: FwLab, kube: KubeObjects, nodes: list[str], poll_s: float = 0.1) -> None:
        super().__init__(kube, poll_s=poll_s)
        self.lab, self.watched = lab, nodes
        self.mid_update: dict[str, int] = dict.fromkeys(nodes, 0)
        self.violations: list[str] = []

    def sample(self, nodes: dict[str, dict[str, Any]]) -> None:
        before = {name: bool(node["spec"].get("unschedulable")) for name, node in nodes.items()}
        states = {n: self.lab.rack.state(n) for n in self.watched}
        after = self.unschedulable()
        for name, state in states.items():
            if state["firmware_updates"] and not _at_baseline(state["firmware"]):
                self.mid_update[name] += 1
                if not (before[name] or after[name]):
                    self.violations.append(f"{name} schedulable while its update runs ({state['firmware']})")


def test_apply_drains_each_kubernetes_node_while_it_updates_and_leaves_a_failed_one_cordoned(
    tmp_path: Path, kube: KubeObjects
) -> None:
    lab = start_lab(tmp_path, 5)
    try:
        head, *kube_nodes = lab.order  # the head node is no Kubernetes node here
        failing, worker = kube_nodes[-1], kube_nodes[-2]
        for name in kube_nodes:
            kube.node(name, gpus=4 if name in (failing, worker) else 0)  # Ready, as the kubelet would report
        ns = kube.namespace("fw")
        kube.pod(
            ns,
            "triton-0",
            worker,
            labels={"app": "triton"},
            owner=kube.controller(ns, "ReplicaSet", "t", {"app": "triton"}),
        )
        lab.rack.set_faults(failing, api.FaultSpec(fail_update_components=("BIOS",), fail_update_count=1))
        state = tmp_path / "state"
        kube.server.write_kubeconfig(state / "kubeconfig")
        with PodFinaliser(kube, kube_nodes) as kubelet, Watcher(lab, kube, kube_nodes) as watcher:
            result = CliRunner().invoke(
                cli,
                ["firmware", "apply", "-i", str(lab.inventory), "--state-dir", str(state), "--poll", "0.1", "--json"],
                catch_exceptions=False,
            )
        data: dict[str, Any] = json.loads(result.output)
        assert result.exit_code != 0 and failing in data["reason"], data["reason"]
        nodes = {n["node"]: n for n in data["nodes"]}

        # while each node's update ran, the API server had it unschedulable (seen mid-update by the watcher)
        assert watcher.violations == []
        assert all(watcher.mid_update[n] > 0 for n in kube_nodes), watcher.mid_update
        assert kubelet.finalised == [f"{ns}/triton-0"]  # the worker's pod was evicted by the drain
        assert kube.pods_on(worker) == []

        cordoned = {n: bool(kube.get_node(n)["spec"].get("unschedulable")) for n in kube_nodes}
        assert cordoned == {n: n == failing for n in kube_nodes}  # schedulable again, but the failed node
        for name in kube_nodes[:-1]:
            assert nodes[name]["status"] == "done"
            assert nodes[name]["records"]["cordon"] == "cordoned and drained"
            assert nodes[name]["records"]["uncordon"] == "uncordoned"
        assert nodes[failing]["status"] == "failed"
        assert nodes[failing]["records"]["cordon"] == "cordoned and drained"
        assert nodes[failing]["records"]["uncordon"] == "left cordoned: firmware update failed"
        assert nodes[head]["records"]["cordon"] == "not a Kubernetes node: not drained"
        assert nodes[head]["records"]["uncordon"] == "not a Kubernetes node: not uncordoned"
        with Journal(state, readonly=True) as journal:
            uncordon = [s for s in journal.steps() if s.node == failing and s.step == "uncordon"]
            assert uncordon[-1].detail["gate"] == "left cordoned: firmware update failed"
            assert journal.status(failing).state.value == "maintenance"
    finally:
        lab.rack.stop()


def test_apply_with_the_kubernetes_api_down_flashes_nothing_and_says_so(tmp_path: Path, kube: KubeObjects) -> None:
    lab = start_lab(tmp_path, 3)
    try:
        state = tmp_path / "state"
        kubeconfig = kube.server.write_kubeconfig(state / "kubeconfig")
        kubeconfig.write_text(kubeconfig.read_text().replace(kube.server.url, "https://127.0.0.1:1"))  # nothing there
        result = CliRunner().invoke(
            cli, ["firmware", "apply", "-i", str(lab.inventory), "--state-dir", str(state), "--poll", "0.1", "--json"]
        )
        data = json.loads(result.output)
        assert result.exit_code != 0 and data["ok"] is False, data
        assert data["error"].startswith(f"kubectl get nodes -o json failed (kubeconfig {kubeconfig})"), data
        assert "127.0.0.1:1" in data["error"] and "connection refused" in data["error"], data
        assert all(lab.updates(n) == [] for n in lab.order)  # nothing flashed
        with Journal(state, readonly=True) as journal:
            runs = journal.runs()
        assert [(r.status, r.command) for r in runs] == [("failed", "firmware apply")]
    finally:
        lab.rack.stop()


def test_up_apply_firmware_drains_through_the_same_gate(tmp_path: Path, kube: KubeObjects) -> None:
    """The ``firmware`` stage of ``up --apply-firmware`` with a kubeconfig: cordon and drain around each update."""
    lab = start_lab(tmp_path, 4)
    try:
        lab.write(rollout={"max_unavailable": 1, "failure_threshold": 1})
        worker = lab.order[-1]
        for name in lab.order:
            kube.node(name, gpus=4 if name == worker else 0)  # Ready, as the kubelet would report
        ns = kube.namespace("up")
        rs = kube.controller(ns, "ReplicaSet", "t", {"app": "triton"})
        ds = kube.controller(ns, "DaemonSet", "exporter", {"app": "exporter"})
        kube.pod(ns, "triton-0", worker, labels={"app": "triton"}, owner=rs)
        kube.pod(ns, "exporter-0", worker, labels={"app": "exporter"}, owner=ds)
        state = tmp_path / "state"
        kube.server.write_kubeconfig(state / "kubeconfig")
        inventory = load_inventory(lab.inventory)
        # what `up --apply-firmware` runs (the CLI sets exactly this option), polling faster than the default 5 s
        options = RunOptions(firmware=FirmwareOptions(apply=True, poll_s=0.1))
        stages = select(inventory, stages=["preflight", "discover", "firmware"])
        with PodFinaliser(kube, lab.order) as kubelet, Watcher(lab, kube, lab.order) as watcher:
            outcome = Runner(inventory, state, stages, options=options).run()
        assert outcome.ok, outcome.as_dict()
        assert watcher.violations == []
        assert all(watcher.mid_update[n] > 0 for n in lab.order), watcher.mid_update
        assert kubelet.finalised == [f"{ns}/triton-0"]  # evicted by the drain; the DaemonSet pod stays
        assert [p["metadata"]["name"] for p in kube.pods_on(worker)] == ["exporter-0"]
        assert all(not kube.get_node(n)["spec"].get("unschedulable") for n in lab.order)
        for name in lab.order:
            assert _at_baseline(lab.firmware(name)), lab.firmware(name)
        with Journal(state, readonly=True) as journal:
            gates = {
                (s.node, s.step): s.detail.get("gate") for s in journal.steps() if s.step in ("cordon", "uncordon")
            }
        assert {gates[(n, "cordon")] for n in lab.order} == {"cordoned and drained"}
        assert {gates[(n, "uncordon")] for n in lab.order} == {"uncordoned"}
    finally:
        lab.rack.stop()
