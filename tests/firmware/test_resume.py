"""A firmware rollout interrupted (Ctrl-C or SIGKILL) while nodes reboot, then run again: the nodes the
stopped run left in maintenance are settled before the schedule is computed, so the budget counts only what
is really down and the next run finishes with full batches. Asserted from the emulated iDRACs' own records
and from the report of the second run."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fwlab import MIRROR, FwLab, api, start_lab
from test_kill import rackctl, wait_until
from test_rollout import apply, at_baseline, no_step_left_open, resets, run

from bootstrap.inventory import load_inventory
from bootstrap.journal.store import Journal
from bootstrap.oob import targets_for
from redfish_tools.firmware import start_update
from redfish_tools.fleet import run_on_bmc
from tests.timing import seconds

BUDGET = 3


@pytest.fixture
def rack9(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FwLab]:
    """Three control planes and six workers, max-unavailable 3 (two batches of workers); the test's
    victims (its ``victims`` parameter) with the window's timings, the rest fast."""
    lab = start_lab(tmp_path, 9, slow=set(request.node.callspec.params["victims"]))
    lab.write(rollout={"max_unavailable": BUDGET, "failure_threshold": 1})
    try:
        yield lab
    finally:
        lab.rack.stop()


def full_batches(sizes: list[int], todo: int) -> bool:
    """Every batch but the last takes the whole budget."""
    return sum(sizes) == todo and all(s == BUDGET for s in sizes[:-1]) and 0 < sizes[-1] <= BUDGET


def signal_when_rebooting(
    lab: FwLab, start: Callable[[], subprocess.Popen[str]], victims: list[str], sig: signal.Signals
) -> tuple[subprocess.Popen[str], str, str]:
    """Start a rollout (``start``) and send it ``sig`` once every victim's host reboot was requested; the
    process, its stdout and its stderr once it ended."""
    for name in victims:
        lab.rack.set_latency(name, 300)  # the victims slow: they are still rebooting when the signal lands
    proc = start()
    try:
        wait_until(lambda: all(resets(lab, n) for n in victims), timeout=seconds(180))
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=seconds(60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for name in victims:
        lab.rack.set_latency(name, 0)
    return proc, out, err


def interrupt_when_rebooting(lab: FwLab, state: Path, victims: list[str], sig: signal.Signals) -> dict[str, object]:
    """Run ``firmware apply`` and stop it with ``sig`` once every victim's host reboot was requested."""
    proc, out, err = signal_when_rebooting(lab, lambda: rackctl(lab, state), victims, sig)
    if sig is signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        return {}
    assert proc.returncode == 130, (out[-2000:], err[-2000:])
    return dict(json.loads(out))


@pytest.mark.parametrize(
    ("sig", "victims"),
    [(signal.SIGINT, [3, 4, 5]), (signal.SIGINT, [1]), (signal.SIGKILL, [3, 4, 5])],
    ids=["ctrl-c-three-workers-rebooting", "ctrl-c-control-plane-rebooting", "sigkill-three-workers-rebooting"],
)
def test_interrupted_rollout_resumes_with_full_batches(
    rack9: FwLab, tmp_path: Path, sig: signal.Signals, victims: list[int]
) -> None:
    lab, state = rack9, tmp_path / "state"
    names = [lab.order[i] for i in victims]
    stopped = interrupt_when_rebooting(lab, state, names, sig)
    with Journal(state, readonly=True) as journal:
        left = {n for n, s in journal.nodes().items() if s.state.value == "maintenance"}
        cut = {(s.node, s.step): s for s in journal.steps() if s.stage == "firmware"}
    assert left & set(names), left  # the stop really left rebooting nodes in maintenance
    if stopped:  # Ctrl-C: the results so far, and how to resume
        assert stopped["ok"] is False and "run `rackctl firmware apply` again to resume" in stopped["reason"]
        status = {n["node"]: n["status"] for n in stopped["nodes"]}
        assert {status[n] for n in names} <= {"interrupted", "done"} and "interrupted" in status.values()
        later = set(lab.order[max(victims) + 1 :]) - set(lab.order[3:6])
        assert all(status[n] == "pending" for n in later), status
        for name in left & set(names):  # its staged jobs go on on the iDRAC: interrupted, never "failed"
            bios = cut[(name, "update:bios:2.4.1")]
            assert bios.status == "interrupted" and bios.detail["job"], bios
    # the reboots the stopped run asked for finish on the iDRACs on their own
    wait_until(lambda: all(at_baseline(lab, n) for n in names), timeout=60)
    done_before = {n for n in lab.order if at_baseline(lab, n)}

    code, data = apply(lab, state)
    assert code == 0, data["reason"]
    assert data["ok"] is True
    nodes = {n["node"]: n for n in data["nodes"]}
    for name in names:
        assert nodes[name]["status"] == "nothing-to-do", nodes[name]
    cps = set(lab.order[:3])
    worker_sizes = [len(b["nodes"]) for b in data["batches"] if not b["control_plane"]]
    assert all(len(b["nodes"]) == 1 for b in data["batches"] if b["control_plane"])
    workers_todo = len(set(lab.order) - cps - done_before)
    assert full_batches(worker_sizes, workers_todo), worker_sizes  # the budget counts only what is down
    for name in lab.order:
        assert at_baseline(lab, name), (name, lab.firmware(name))
        assert [u["component"] for u in lab.updates(name)] == ["iDRAC", "BIOS", "NIC"]  # nothing flashed twice
    no_step_left_open(state)
    with Journal(state, readonly=True) as journal:
        assert {s.state.value for s in journal.nodes().values()} == {"registered"}


def flash_back(lab: FwLab, name: str, image: str) -> None:
    """Flash ``image`` on ``name`` through Redfish, outside rackctl (a rollback by hand), and wait for it."""
    inventory = load_inventory(lab.inventory)
    target = targets_for(inventory, [n for n in inventory.nodes if n.hostname == name])[0]
    result = run_on_bmc(target, lambda conn: start_update(conn, MIRROR + image, apply_time="Immediate"))
    assert result.ok, result.error


def swap_boards(lab: FwLab, tmp: Path) -> None:
    """Every node's board swapped: fresh iDRACs at the factory firmware, the same hostnames."""
    lab.rack.stop()
    lab.rack = api.EmulatedRack(list(lab.specs.values()), tmp / "rack-swapped")
    endpoints = {e.name: e for e in lab.rack.start()}
    for node in lab.data["nodes"]:
        node["bmc"] = {
            "address": endpoints[node["hostname"]].url,
            "fingerprint": endpoints[node["hostname"]].fingerprint,
        }
    lab.write()


def test_versions_read_outrank_a_completed_journal_step(fwlab: FwLab, tmp_path: Path) -> None:
    state = tmp_path / "state"
    code, data = apply(fwlab, state)
    assert code == 0, data["reason"]
    # a BIOS rolled back by hand on one node: the journal says its update completed, the BMC says 2.3.5
    rolled = fwlab.order[4]
    flash_back(fwlab, rolled, f"BIOS_{fwlab.specs[rolled].model.upper()}_WN64_2.3.5.EXE")
    wait_until(lambda: fwlab.firmware(rolled)["BIOS"] == "2.3.5", timeout=30)
    code, data = apply(fwlab, state)
    assert code == 0, data["reason"]
    nodes = {n["node"]: n for n in data["nodes"]}
    assert nodes[rolled]["status"] == "done"
    assert [(c["component"], c["result"]) for c in nodes[rolled]["components"]] == [("bios", "updated")]
    assert [u["component"] for u in fwlab.updates(rolled)] == ["iDRAC", "BIOS", "NIC", "BIOS", "BIOS"]
    assert at_baseline(fwlab, rolled)
    assert all(nodes[n]["status"] == "nothing-to-do" for n in fwlab.order if n != rolled)

    swap_boards(fwlab, tmp_path)  # the same hostnames and state dir, every iDRAC at the old firmware
    code, plan = run(["firmware", "plan", "-i", str(fwlab.inventory), "--state-dir", str(state)])
    assert code == 0 and all(c["action"] == "update" for n in plan["nodes"] for c in n["components"])
    code, data = apply(fwlab, state)
    assert code == 0, data["reason"]
    for node in data["nodes"]:
        assert node["status"] == "done" and {c["result"] for c in node["components"]} == {"updated"}, node
    for name in fwlab.order:
        assert at_baseline(fwlab, name), (name, fwlab.firmware(name))
        assert [u["component"] for u in fwlab.updates(name)] == ["iDRAC", "BIOS", "NIC"]
    no_step_left_open(state)
