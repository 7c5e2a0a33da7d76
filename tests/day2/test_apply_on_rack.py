"""``rackctl apply`` and ``rackctl status`` against emulated iDRACs (real HTTPS, sushy-tools core, no VMs).

The proof that an apply touches only the nodes it must is the emulators' own request logs: an apply that
adds one node and removes another leaves every other iDRAC's log as it was.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.day2.apply import plan_apply, run_apply
from bootstrap.environment import HostEnvironment
from bootstrap.inventory import load_inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.kube import KubeNode
from bootstrap.stages.base import NullProgress, RunOptions
from tests.day2.conftest import Rack
from tests.redfish.rf_lab import api

pytestmark = [pytest.mark.lab, pytest.mark.slow]

OOB = "preflight,discover,bios"
ADDED, REMOVED = "gpu-xe9680-01", "gpu-l40s-01"
OTHERS = ("head-01", "cp-02", "cp-03")


def _kinds(plan: dict[str, Any]) -> dict[str, str]:
    return {n["node"]: n["kind"] for n in plan["nodes"]}


def test_apply_adds_one_node_and_removes_another_touching_no_other(rack: Rack, tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = rack.inventory("first.yml", without=(ADDED,))
    code, data = rack.invoke("apply", "-i", str(first), "--state-dir", str(state), "--stages", OOB, "--yes")
    assert code == 0, data
    assert set(_kinds(data["plan"]).values()) == {"new"}
    with Journal(state, readonly=True) as journal:
        assert {n: s.state.value for n, s in journal.nodes().items()} == dict.fromkeys([*OTHERS, REMOVED], "configured")

    second = rack.inventory("second.yml", without=(REMOVED,))
    code, planned = rack.invoke("apply", "--plan", "-i", str(second), "--state-dir", str(state))
    assert code == 0 and planned["applied"] is False
    assert _kinds(planned["plan"]) == {**dict.fromkeys(OTHERS, "unchanged"), ADDED: "new", REMOVED: "removed"}
    assert sorted(planned["plan"]["contacted"]) == sorted([ADDED, REMOVED])

    code, powered = rack.invoke("power", "on", "--limit", REMOVED, "-i", str(first), "--state-dir", str(state))
    assert code == 0 and rack.rack.state(REMOVED)["power_state"] == "On", powered
    before = rack.log_sizes()
    code, done = rack.invoke("apply", "-i", str(second), "--state-dir", str(state), "--stages", OOB, "--yes")
    assert code == 0, done
    for name in OTHERS:  # not one request, not even a read
        assert rack.requests_since(name, before[name]) == [], name
    removed = rack.requests_since(REMOVED, before[REMOVED])
    assert any(r["method"] == "POST" and r["path"].endswith("ComputerSystem.Reset") for r in removed)
    assert rack.rack.state(REMOVED)["power_state"] == "Off"
    added = rack.requests_since(ADDED, before[ADDED])
    assert any(r["method"] == "PATCH" and "Bios/Settings" in r["path"] for r in added)  # the bios stage ran
    with Journal(state, readonly=True) as journal:
        assert journal.state(ADDED).value == "configured"
        assert journal.state(REMOVED).value == "maintenance"
        assert journal.latest_facts(REMOVED)["apply"]["removed"] is True

    # applied again with nothing edited: nothing to do, no BMC contacted at all
    before = rack.log_sizes()
    code, again = rack.invoke("apply", "-i", str(second), "--state-dir", str(state), "--stages", OOB, "--yes")
    assert code == 0, again
    assert set(_kinds(again["plan"]).values()) == {"unchanged"}
    assert rack.log_sizes() == before


def test_a_changed_node_gets_only_the_stages_its_change_needs(rack: Rack, tmp_path: Path) -> None:
    state = tmp_path / "state"
    base = rack.inventory("base.yml")
    code, data = rack.invoke("apply", "-i", str(base), "--state-dir", str(state), "--stages", OOB, "--yes")
    assert code == 0, data

    def edit(doc: Any) -> None:
        node = next(n for n in doc["nodes"] if n["hostname"] == "cp-02")
        node["bios_profile"] = "gpu-worker"  # its BIOS profile changes: the bios stage, nothing else
        node["root_disk_hint"] = "/dev/nvme1n1"  # needs a reinstall: deferred to `rackctl redeploy`

    edited = rack.inventory("edited.yml", edit=edit)
    # the first apply staged a BIOS job that runs at the next boot (as on an iDRAC): boot it, let it finish
    code, cycled = rack.invoke("power", "cycle", "--limit", "cp-02", "-i", str(base), "--state-dir", str(state))
    assert code == 0, cycled
    deadline = time.monotonic() + 30
    while rack.rack.state("cp-02")["bios_pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not rack.rack.state("cp-02")["bios_pending"]
    before = rack.log_sizes()
    code, done = rack.invoke("apply", "-i", str(edited), "--state-dir", str(state), "--yes")
    assert code == 0, done["nodes"]
    change = next(n for n in done["plan"]["nodes"] if n["node"] == "cp-02")
    assert change["kind"] == "changed" and change["sections"] == ["bios", "os"] and change["stages"] == ["bios"]
    assert change["deferred"] == {"os": "rackctl redeploy cp-02"}
    assert done["nodes"]["cp-02"]["applied_sections"] == ["bios"]
    assert done["nodes"]["cp-02"]["pending_sections"] == ["os"]
    for name, size in before.items():
        if name != "cp-02":
            assert rack.requests_since(name, size) == [], name
    cp02 = rack.requests_since("cp-02", before["cp-02"])
    assert any(r["method"] == "PATCH" and "Bios/Settings" in r["path"] for r in cp02)
    # the applied bios section is recorded: the next plan has only the deferred reinstall left
    code, planned = rack.invoke("apply", "--plan", "-i", str(edited), "--state-dir", str(state))
    change = next(n for n in planned["plan"]["nodes"] if n["node"] == "cp-02")
    assert change["sections"] == ["os"] and change["stages"] == []


def test_status_shows_every_column_and_a_dead_bmc_as_degraded(rack: Rack, tmp_path: Path) -> None:
    inventory = rack.inventory("status.yml")
    rack.rack.set_faults("cp-03", api.FaultSpec(always_fail=True))
    try:
        code, data = rack.invoke("status", "-i", str(inventory), "--state-dir", str(tmp_path / "state"))
        wide = {**rack.env, "COLUMNS": "400"}
        args = ["status", "-i", str(inventory), "--state-dir", str(tmp_path), "--wide"]  # reasons inside cells
        text = CliRunner().invoke(cli, args, env=wide)
    finally:
        rack.rack.set_faults("cp-03", api.FaultSpec())
    assert code == 1, data
    rows = {r["node"]: r for r in data["nodes"]}
    assert data["degraded"] == ["cp-03"]
    for column in ("power", "health", "firmware"):
        assert rows["cp-03"][column]["status"] == "degraded"
        assert "BMC not answering" in rows["cp-03"][column]["reason"]
    head = rows["head-01"]
    truth = rack.rack.state("head-01")["power_state"]
    assert head["power"] == {"status": "ok", "value": truth, "reason": ""}
    assert head["health"]["status"] == "ok" and head["health"]["value"]
    assert head["firmware"]["status"] == "ok" and "BIOS" in head["firmware"]["value"]
    assert head["lifecycle"]["status"] == "unavailable" and "rackctl up" in head["lifecycle"]["reason"]
    gpu = rows["gpu-xe9680-01"]
    assert gpu["driver"]["status"] == "unavailable" and "nvidia stage" in gpu["driver"]["reason"]
    assert gpu["kubernetes"]["status"] == "unavailable" and gpu["kubernetes"]["reason"].startswith("not deployed")
    assert gpu["gpus"]["status"] == "unavailable"
    assert head["driver"] == {"status": "ok", "value": "no GPUs", "reason": ""}
    assert data["kubernetes"]["deployed"] is False
    # the table says so too, inside cp-03's cells (each read down the lines a narrow cell folds into)
    assert text.exit_code == 1
    cells = row_cells(text.output, "cp-03")
    assert sum("degraded:BMCnotanswering" in re.sub(r"\s", "", cell) for cell in cells) == 3, cells
    assert any("unavailable:notdeployed" in re.sub(r"\s", "", c) for c in row_cells(text.output, "gpu-xe9680-01"))


def row_cells(table: str, node: str) -> list[str]:
    """The cells of ``node``'s row in a rendered table, each cell's folded lines joined as a reader reads them
    (a row goes on until the next node's name or the bottom border; a word too long for its cell folds
    inside itself, so compare without spaces)."""
    columns: list[list[str]] = []
    for line in table.splitlines():
        parts = line.split("│")
        if len(parts) < 3:
            if columns:
                break
            continue
        first = parts[1].strip()
        if columns and first:
            break
        if not columns and first != node:
            continue
        columns = columns or [[] for _ in parts[1:-1]]
        for column, part in zip(columns, parts[1:-1], strict=False):
            column.append(part.strip())
    return [re.sub(r"\s+", " ", " ".join(c)).strip() for c in columns]


class RecordingCluster:
    """Test double for a deployed Kubernetes: these tests remove etcd members, which ``kubectl exec`` into an
    etcd pod does and a bare API server cannot (no kubelet; tests/day2/test_kube_live.py runs the rest of
    ``Kubectl`` against a real one). Readiness from a dict, and a record of every change asked of it."""

    deployed = True
    reason = "test double"

    def __init__(self, ready: dict[str, bool]) -> None:
        self.ready = ready
        self.calls: list[tuple[str, str]] = []

    def nodes(self) -> dict[str, KubeNode]:
        return {n: KubeNode(n, ready=r, allocatable_gpus=0) for n, r in self.ready.items()}

    def drain(self, node: str) -> None:
        self.calls.append(("drain", node))

    def delete_node(self, node: str) -> None:
        self.calls.append(("delete-node", node))
        self.ready.pop(node, None)

    def uncordon(self, node: str) -> None:
        self.calls.append(("uncordon", node))

    def remove_etcd_member(self, node: str, *, via: str) -> str:
        self.calls.append(("etcd-remove", f"{node} via {via}"))
        return f"test double: {node} removed through etcd-{via}"

    def label(self, node: str, labels: dict[str, str]) -> None:
        self.calls.append(("label", node))


def test_removing_a_joined_control_plane_waits_for_etcd_quorum(
    rack: Rack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    base = rack.inventory("kbase.yml")
    code, data = rack.invoke("apply", "-i", str(base), "--state-dir", str(state), "--stages", OOB, "--yes")
    assert code == 0, data
    with Journal(state) as journal:  # as if the kubernetes stage had joined every node
        for name in rack.specs:
            for to in (NodeState.PROVISIONING, NodeState.PROVISIONED, NodeState.JOINED):
                journal.transition(name, to, "test setup: joined")
    # down to the head as the only control plane (a lab inventory allows one)
    smaller = load_inventory(rack.inventory("kless.yml", without=("cp-02", "cp-03")))
    options = RunOptions(yes=True, environment=HostEnvironment())
    code, powered = rack.invoke("power", "on", "--limit", "cp-02,cp-03", "-i", str(base), "--state-dir", str(state))
    assert code == 0, powered
    assert {rack.rack.state(n)["power_state"] for n in ("cp-02", "cp-03")} == {"On"}
    before = rack.log_sizes()
    cluster = RecordingCluster({"head-01": False, "cp-02": True, "cp-03": True})
    for name, value in rack.env.items():  # the BMC passwords, as the CLI tests pass them
        monkeypatch.setenv(name, value)
    result = run_apply(
        smaller, state, plan_apply(smaller, state), cluster=cluster, options=options, progress=NullProgress()
    )
    assert result["exit_code"] == 1
    for name in ("cp-02", "cp-03"):
        assert not result["nodes"][name]["ok"] and "etcd quorum" in result["nodes"][name]["error"]
    assert cluster.calls == [] and rack.log_sizes() == before  # refused before anything was touched

    cluster = RecordingCluster(dict.fromkeys(["head-01", "cp-02", "cp-03"], True))
    result = run_apply(
        smaller, state, plan_apply(smaller, state), cluster=cluster, options=options, progress=NullProgress()
    )
    assert result["exit_code"] == 0, result
    assert cluster.calls == [
        ("drain", "cp-02"),
        ("etcd-remove", "cp-02 via head-01"),
        ("delete-node", "cp-02"),
        ("drain", "cp-03"),
        ("etcd-remove", "cp-03 via head-01"),
        ("delete-node", "cp-03"),
    ]
    assert "removed from etcd (test double: cp-02 removed through etcd-head-01)" in str(result["nodes"]["cp-02"])
    assert {rack.rack.state(n)["power_state"] for n in ("cp-02", "cp-03")} == {"Off"}
    assert sorted(n for n, size in before.items() if rack.requests_since(n, size)) == ["cp-02", "cp-03"]
