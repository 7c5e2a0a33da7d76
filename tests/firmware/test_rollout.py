"""``rackctl firmware plan|apply`` against emulated iDRACs: the rollout, a failed job and an iDRAC reset
injected (FaultSpec), the pause with its report, and the resume. Asserted from the emulators' own records
(SimpleUpdate requests accepted, jobs, power resets in their request logs) and from the journal."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from fwlab import BASELINE_VERSIONS, FwLab, api

from bootstrap.cli import cli
from bootstrap.journal.store import Journal

COMPONENT = {"idrac": "iDRAC", "bios": "BIOS", "nic": "NIC"}


def run(args: list[str]) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.output)


def apply(lab: FwLab, state: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    return run(["firmware", "apply", "-i", str(lab.inventory), "--state-dir", str(state), "--poll", "0.1", *extra])


def at_baseline(lab: FwLab, name: str) -> bool:
    fw = lab.firmware(name)
    nics = [v for k, v in fw.items() if k.startswith("NIC:")]
    return (
        fw["iDRAC"] == BASELINE_VERSIONS["idrac"]
        and fw["BIOS"] == BASELINE_VERSIONS["bios"]
        and set(nics) == {BASELINE_VERSIONS["nic"]}
    )


def resets(lab: FwLab, name: str) -> list[float]:
    """When the node was power-reset (its iDRAC's request log)."""
    return [
        r["time"]
        for r in lab.rack.request_log(name)
        if r["method"] == "POST" and r["path"].endswith("ComputerSystem.Reset") and r["status"] < 300
    ]


def no_step_left_open(state: Path) -> None:
    """Every firmware step's latest record is an ending (nothing left "started" without an outcome)."""
    with Journal(state, readonly=True) as journal:
        last: dict[tuple[str, str], str] = {}
        for step in journal.steps():
            if step.stage == "firmware":
                last[(step.node, step.step)] = step.status
    open_steps = {k: v for k, v in last.items() if v not in ("completed", "failed")}
    assert not open_steps, open_steps


def test_plan_shows_order_reboots_and_batches_and_flashes_nothing(fwlab: FwLab, tmp_path: Path) -> None:
    fwlab.write(rollout={"max_unavailable": 2, "failure_threshold": 1})
    code, data = run(["firmware", "plan", "-i", str(fwlab.inventory), "--state-dir", str(tmp_path)])
    assert code == 0, data
    nodes = {n["node"]: n for n in data["nodes"]}
    cps, workers = fwlab.order[:3], fwlab.order[3:]
    assert [nodes[n]["batch"] for n in cps] == [1, 2, 3]  # control planes one at a time
    assert [nodes[n]["batch"] for n in workers] == [4, 4, 5]  # max_unavailable 2
    for node in nodes.values():
        comps = node["components"]
        assert [c["component"] for c in comps] == ["idrac", "bios", "nic"]  # iDRAC first, as Dell recommends
        assert comps[0]["installed"] == ["7.10.30.00"] and comps[0]["target"] == "7.20.10.50"
        assert comps[0]["source"].startswith("http://10.0.0.1/mirror/firmware/iDRAC-")  # relative: the mirror
        assert [c["action"] for c in comps] == ["update"] * 3
        assert node["reboots"] == ["idrac-reset", "host-reboot"]
    code, dry = apply(fwlab, tmp_path / "state", "--plan")
    assert code == 0 and dry["applied"] is False and dry["schedule"] == data["schedule"]
    assert all(fwlab.updates(n) == [] for n in fwlab.order)  # nothing flashed


def test_rollout_updates_the_fleet_in_batch_order(fwlab: FwLab, tmp_path: Path) -> None:
    fwlab.write(rollout={"max_unavailable": 2, "failure_threshold": 1})
    state = tmp_path / "state"
    code, data = apply(fwlab, state)
    assert code == 0, data
    assert data["ok"] and not data["stopped"]
    batches = [tuple(b["nodes"]) for b in data["batches"]]
    assert batches[:3] == [(n,) for n in fwlab.order[:3]]
    assert sorted(n for b in batches[3:] for n in b) == sorted(fwlab.order[3:])
    for name in fwlab.order:
        assert at_baseline(fwlab, name), fwlab.firmware(name)
        updates = fwlab.updates(name)
        assert [u["component"] for u in updates] == ["iDRAC", "BIOS", "NIC"]  # once each, iDRAC first
        assert [u["apply_time"] for u in updates] == ["Immediate", "OnReset", "OnReset"]
        jobs = {j["Id"]: j for j in fwlab.rack.state(name)["jobs"]}
        assert all(jobs[u["job"]]["JobState"] == "Completed" for u in updates)
        assert len(resets(fwlab, name)) == 1  # one reboot applied both staged host components
        node = next(n for n in data["nodes"] if n["node"] == name)
        assert node["status"] == "done"
        assert node["records"]["cordon"].startswith("no Kubernetes: not drained (not deployed")
        assert node["records"]["os"] == "no SSH access: OS not checked"
    # reboots happen in batch order, and no two batches overlap: every request of batch i ends before batch
    # i+1's first SimpleUpdate
    for earlier, later in itertools.pairwise(batches):
        last_reset = max(t for n in earlier for t in resets(fwlab, n))
        first_update = min(u["time"] for n in later for u in fwlab.updates(n))
        assert last_reset < first_update, (earlier, later)
    no_step_left_open(state)
    with Journal(state, readonly=True) as journal:
        states = {n: s.state.value for n, s in journal.nodes().items()}
    assert set(states.values()) == {"registered"}  # back from maintenance
    # again: nothing to do, nothing flashed
    code, again = apply(fwlab, state)
    assert code == 0 and all(n["status"] == "nothing-to-do" for n in again["nodes"])
    assert all(len(fwlab.updates(n)) == 3 for n in fwlab.order)


def test_failed_job_and_idrac_reset_pause_the_rollout_then_apply_resumes(fwlab: FwLab, tmp_path: Path) -> None:
    state = tmp_path / "state"
    cp_reset, worker_fail = fwlab.order[1], fwlab.order[3]
    # the iDRAC of a control plane resets as its update job starts (on top of its own reset at the end)
    fwlab.rack.set_faults(cp_reset, api.FaultSpec(reset_during_job=True, reset_s=1.0))
    # the first BIOS job on a worker fails
    fwlab.rack.set_faults(worker_fail, api.FaultSpec(fail_update_components=("BIOS",), fail_update_count=1))
    code, data = apply(fwlab, state)
    assert code == 1
    assert data["stopped"] is True and worker_fail in data["reason"] and "failure threshold 1" in data["reason"]
    nodes = {n["node"]: n for n in data["nodes"]}
    assert nodes[cp_reset]["status"] == "done" and at_baseline(fwlab, cp_reset)  # survived its resets
    assert any(r["fault"] == "reset" for r in fwlab.rack.request_log(cp_reset))  # the reset really happened
    failed = nodes[worker_fail]
    assert failed["status"] == "failed" and "bios" in failed["message"] and "Failed" in failed["message"]
    assert failed["records"]["uncordon"] == "left cordoned: firmware update failed"
    assert [c["result"] for c in failed["components"]] == ["updated", "failed", "updated"]
    for name in fwlab.order[4:]:  # after the failure: not started, and untouched
        assert nodes[name]["status"] == "pending" and "failure threshold" in nodes[name]["message"]
        assert fwlab.updates(name) == []
    no_step_left_open(state)
    with Journal(state, readonly=True) as journal:
        status = journal.status(worker_fail)
        assert status.state.value == "maintenance"  # left out of service, with the cause recorded
        assert journal.history(worker_fail)[-1].cause.startswith("firmware rollout, batch")
    flashed_before = {n: len(fwlab.updates(n)) for n in fwlab.order}

    code, data = apply(fwlab, state)  # the fault was one job: the retry succeeds
    assert code == 0, data
    for name in fwlab.order:
        assert at_baseline(fwlab, name)
        comps = [u["component"] for u in fwlab.updates(name)]
        if name == worker_fail:
            assert comps == ["iDRAC", "BIOS", "NIC", "BIOS"]  # only the failed BIOS again
        elif flashed_before[name]:
            assert len(comps) == flashed_before[name] == 3  # nothing flashed twice
        else:
            assert comps == ["iDRAC", "BIOS", "NIC"]
    no_step_left_open(state)


def test_bad_rollout_settings_name_the_field(fwlab: FwLab, tmp_path: Path) -> None:
    fwlab.write(rollout={"max_unavailable": "150%"})
    result = CliRunner().invoke(cli, ["firmware", "plan", "-i", str(fwlab.inventory), "--json"])
    assert result.exit_code == 2
    text = result.output
    assert "firmware.rollout.max_unavailable" in text and "150%" in text and "Traceback" not in text
    model = next(iter(fwlab.data["firmware"]["baseline"].values()))
    model["images"]["bios"] = "http://mirror:s3cret-pw@10.0.0.1/BIOS_X_2.4.1.EXE"
    fwlab.write()
    result = CliRunner().invoke(cli, ["validate", "-i", str(fwlab.inventory), "--json"])
    assert result.exit_code == 2 and "carries a password" in result.output
    assert "s3cret-pw" not in result.output  # the value is never echoed back
    model["images"]["bios"] = "BIOS_X_2.4.1.EXE"
    fwlab.data["firmware"].pop("image_base_url")
    fwlab.write()
    result = CliRunner().invoke(cli, ["validate", "-i", str(fwlab.inventory), "--json"])
    assert result.exit_code == 2 and "image_base_url is not set" in result.output
