"""``rackctl apply`` and ``rackctl redeploy`` draining for real: emulated iDRACs, the real kube-apiserver 1.37.2.

What is real: the CLI, kubectl with ``<state-dir>/kubeconfig``, the API server (cordon, evictions, Node
deletion, labels) and the emulated iDRACs (power off, PXE boot).

What stands in, and says so (tests/kube_objects.py): Node registration and status (the kubelet), pods bound
and Running (scheduler, kubelet), the end of a graceful pod deletion after an eviction
(:class:`PodFinaliser`: the kubelet). The journal is moved to ``joined`` by the test, as if the kubernetes stage
had joined the nodes (it renders only today). A redeployed node's Node is registered again by the test, as
its kubelet would on joining. The provision stage of the redeploy is the PXE double of
``redeploy_worker.py`` (no VMs). Not here: a control plane's etcd member removal (``kubectl exec`` into the
etcd pod needs a kubelet): ``test_apply_on_rack.py`` keeps that to its recording double.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bootstrap.journal.store import Journal
from tests.day2.conftest import Rack, mark_joined
from tests.day2.test_redeploy_on_rack import finish, installed, pxe_boots, worker
from tests.kube_objects import KubeObjects, NodeSampler, PodFinaliser

pytestmark = [
    pytest.mark.lab,
    pytest.mark.slow,
]

OOB = "preflight,discover,bios"
REMOVED = "gpu-l40s-01"
NODE = "gpu-l40s-01"  # the redeployed worker
USER_LABELS = {"rack": "r7", "gpu.example/pool": "inference"}


def _installed_and_joined(rack: Rack, kube: KubeObjects, tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    """NODE installed by ``up`` through provision (the PXE double), journalled joined, the API server's
    kubeconfig in the state directory; the state directory and the CLI's common arguments."""
    state, common = installed(rack, "live-redeploy.yml", tmp_path)
    mark_joined(state, [NODE])
    kube.server.write_kubeconfig(state / "kubeconfig")
    return state, common


def _applied_and_joined(rack: Rack, kube: KubeObjects, tmp_path: Path) -> tuple[Path, Path]:
    """Every node applied out of band, journalled joined, the API server's kubeconfig in the state directory;
    the state directory and the base inventory."""
    state = tmp_path / "state"
    base = rack.inventory("live-base.yml")
    code, data = rack.invoke("apply", "-i", str(base), "--state-dir", str(state), "--stages", OOB, "--yes")
    assert code == 0, data
    mark_joined(state, list(rack.specs))
    kube.server.write_kubeconfig(state / "kubeconfig")
    return state, base


class CordonSampler(NodeSampler):
    """Samples one Node's ``spec.unschedulable`` every 50 ms until it is gone; remembers if it was seen cordoned."""

    thread_name = "cordon-sampler"

    def __init__(self, kube: KubeObjects, node: str) -> None:
        super().__init__(kube, poll_s=0.05)
        self.node = node
        self.cordoned = False

    def sample(self, nodes: dict[str, dict[str, Any]]) -> None:
        if self.node in nodes and nodes[self.node]["spec"].get("unschedulable"):
            self.cordoned = True


def test_redeploy_drains_deletes_and_restores_a_workers_labels_once_its_node_is_back(
    rack: Rack, kube: KubeObjects, tmp_path: Path
) -> None:
    state, common = _installed_and_joined(rack, kube, tmp_path)
    kube.node(NODE, gpus=8, labels={**USER_LABELS, "node-role.kubernetes.io/worker": ""})
    ns = kube.namespace("redeploy")
    rs = kube.controller(ns, "ReplicaSet", "triton", {"app": "triton"})
    kube.pod(ns, "triton-0", NODE, labels={"app": "triton"}, owner=rs)
    start = len(rack.rack.request_log(NODE))

    with PodFinaliser(kube, [NODE]) as kubelet, CordonSampler(kube, NODE) as sampler:
        code, first = finish(worker(rack, "redeploy", NODE, "--until", "os-check", *common, "--yes"))
    assert code == 4, first  # through provision (the PXE double); os-check is a placeholder here
    assert first["did"][:4] == [
        f"recorded {len(USER_LABELS)} label(s)",
        "drain",
        "delete-node",
        "marked for reinstall (new epoch)",
    ]
    assert sampler.cordoned and kubelet.finalised == [f"{ns}/triton-0"]
    assert not kube.node_exists(NODE)
    assert pxe_boots(rack, start) == 1
    # its Node is not back (no kubelet rejoined it): the labels stay recorded and the redeploy open
    assert first["labels_pending"] == USER_LABELS
    assert "not restored yet" in first["message"] and f"rackctl redeploy {NODE}` again" in first["message"]
    with Journal(state, readonly=True) as journal:
        marker = journal.latest_facts(NODE)["redeploy"]
    assert marker["status"] == "started" and marker["labels"] == USER_LABELS

    kube.node(NODE, gpus=8)  # the reinstalled node's kubelet registers it again on join (the test does it)
    code, second = finish(worker(rack, "redeploy", NODE, "--until", "os-check", *common, "--yes"))
    assert code == 4, second
    assert second["plan"]["resuming"] is True
    assert f"restored {len(USER_LABELS)} label(s)" in second["did"]
    assert "labels_pending" not in second
    labels = kube.get_node(NODE)["metadata"]["labels"]
    assert {k: labels.get(k) for k in USER_LABELS} == USER_LABELS
    assert pxe_boots(rack, start) == 1  # resumed: not reinstalled again
    with Journal(state, readonly=True) as journal:
        assert journal.latest_facts(NODE)["redeploy"]["status"] == "completed"


def test_a_resumed_redeploy_deletes_a_node_that_is_back_though_the_journal_has_it_deleted(
    rack: Rack, kube: KubeObjects, tmp_path: Path
) -> None:
    """A redeploy killed after it drained and deleted the Node but before the reimage, whose Node is there again
    (the old kubelet, still running, registered it): what is read outranks the journal, so the resumed run drains
    and deletes it again before it marks the node for reinstall, and reinstalls it once."""
    state, common = _installed_and_joined(rack, kube, tmp_path)
    with Journal(state) as journal:  # what the killed run had recorded: its marker, drain and deletion done
        epoch = journal.status(NODE).epoch
        run_id = journal.begin_run(f"redeploy {NODE}")
        journal.record_facts(NODE, "redeploy", {"status": "started", "epoch": epoch, "run": run_id, "labels": {}})
        for step in ("drain", "delete-node"):
            journal.record_step(run_id, NODE, "redeploy", f"{step}-{epoch}", status="completed", destructive=True)
        journal.finish_run(run_id, "interrupted", "killed (test)")
    kube.node(NODE, gpus=8)  # registered again by its kubelet, which runs a pod there again
    ns = kube.namespace("redeploy")
    rs = kube.controller(ns, "ReplicaSet", "triton", {"app": "triton"})
    kube.pod(ns, "triton-0", NODE, labels={"app": "triton"}, owner=rs)
    start = len(rack.rack.request_log(NODE))

    with PodFinaliser(kube, [NODE]) as kubelet, CordonSampler(kube, NODE) as sampler:
        code, resumed = finish(worker(rack, "redeploy", NODE, "--until", "os-check", *common, "--yes"))
    assert code == 4, resumed
    assert resumed["plan"]["resuming"] is True
    again = f"again: the journal had it done, but the Node {NODE} is there"
    assert resumed["did"][:4] == [
        f"resumed the redeploy started by run {run_id}",
        f"drain ({again})",
        f"delete-node ({again})",
        "marked for reinstall (new epoch)",
    ], resumed["did"]
    assert sampler.cordoned and kubelet.finalised == [f"{ns}/triton-0"] and not kube.node_exists(NODE)
    assert pxe_boots(rack, start) == 1


def test_a_resumed_apply_drains_and_deletes_a_node_that_is_back_though_the_journal_has_it_done(
    rack: Rack, kube: KubeObjects, tmp_path: Path
) -> None:
    """An apply killed after it drained and deleted a removed worker's Node but before the power-off, whose Node
    is there again (its kubelet, still running, registered it): the next apply reads the Node, drains and
    deletes it again though the journal has both done, then powers the node off."""
    state, base = _applied_and_joined(rack, kube, tmp_path)
    for name in rack.specs:
        kube.node(name)
    ns = kube.namespace("apply")
    rs = kube.controller(ns, "ReplicaSet", "triton", {"app": "triton"})
    kube.pod(ns, "triton-0", REMOVED, labels={"app": "triton"}, owner=rs)  # its kubelet runs it again
    code, powered = rack.invoke("power", "on", "--limit", REMOVED, "-i", str(base), "--state-dir", str(state))
    assert code == 0, powered
    with Journal(state) as journal:  # what the killed apply had recorded before its power-off
        run_id = journal.begin_run("apply")
        for step in ("drain", "delete-node"):
            journal.record_step(run_id, REMOVED, "apply", step, status="completed", destructive=True)
        journal.finish_run(run_id, "interrupted", "killed (test)")

    second = rack.inventory("live-second.yml", without=(REMOVED,))
    with PodFinaliser(kube, [REMOVED]) as kubelet, CordonSampler(kube, REMOVED) as sampler:
        code, done = rack.invoke("apply", "-i", str(second), "--state-dir", str(state), "--stages", OOB, "--yes")
    assert code == 0, done
    did = done["nodes"][REMOVED]["did"]
    assert did.startswith("its Node was there again though the journal had it drained and deleted; drained"), did
    assert sampler.cordoned and kubelet.finalised == [f"{ns}/triton-0"] and not kube.node_exists(REMOVED)
    assert rack.rack.state(REMOVED)["power_state"] == "Off"
