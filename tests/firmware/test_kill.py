"""rackctl SIGKILLed in the middle of a firmware rollout, then run again: it resumes, and no component is
flashed twice (asserted from the emulated iDRACs' own records of the SimpleUpdate requests they accepted)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fwlab import BASELINE_VERSIONS, FwLab, start_lab
from test_rollout import no_step_left_open

from bootstrap.journal.store import Journal

ROOT = Path(__file__).resolve().parents[2]


def rackctl(lab: FwLab, state: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'lab'}"}
    args = ["firmware", "apply", "-i", str(lab.inventory), "--state-dir", str(state), "--poll", "0.1", "--json"]
    return subprocess.Popen(
        [sys.executable, "-m", "bootstrap", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the rollout never reached the kill point"
        time.sleep(0.05)


@pytest.fixture
def slow_lab(tmp_path: Path, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Five iDRACs; the test's victim (its ``victim`` parameter) with the window's timings, the rest fast."""
    lab = start_lab(tmp_path, 5, slow={request.node.callspec.params["victim"]})
    try:
        yield lab
    finally:
        lab.rack.stop()


@pytest.mark.parametrize(
    ("victim", "kill_when"),
    [
        (1, ["iDRAC"]),  # a control plane's iDRAC job running (it resets when it completes)
        (3, ["iDRAC", "BIOS"]),  # a worker with its BIOS staged, the NIC not yet, no reboot yet
    ],
    ids=["idrac-job-running", "bios-staged"],
)
def test_sigkill_mid_rollout_then_resume_flashes_nothing_twice(
    slow_lab: FwLab, tmp_path: Path, victim: int, kill_when: list[str]
) -> None:
    lab, state = slow_lab, tmp_path / "state"
    name = lab.order[victim]
    lab.rack.set_latency(name, 400)  # every answer of the victim slow: the kill point is a window, not an instant
    proc = rackctl(lab, state)
    try:
        wait_until(lambda: [u["component"] for u in lab.updates(name)] == kill_when, timeout=120)
        proc.send_signal(signal.SIGKILL)  # a real crash: nothing runs after this
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not all(lab.firmware(n)["BIOS"] == BASELINE_VERSIONS["bios"] for n in lab.order)  # really mid-way

    again = rackctl(lab, state)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, (err[-2000:], out[-3000:])
    report = json.loads(out)
    assert report["ok"] is True
    for node in lab.order:
        updates = [u["component"] for u in lab.updates(node)]
        assert updates == ["iDRAC", "BIOS", "NIC"], (node, updates)  # each component flashed exactly once
        fw = lab.firmware(node)
        assert fw["iDRAC"] == BASELINE_VERSIONS["idrac"] and fw["BIOS"] == BASELINE_VERSIONS["bios"]
    with Journal(state, readonly=True) as journal:
        steps = [s for s in journal.steps(node=name) if s.stage == "firmware" and s.step.startswith("update:")]
        runs = journal.runs()
    assert runs[-1].status == "interrupted" and runs[0].status == "completed"  # oldest first / newest first
    # the component the kill interrupted: the resumed run followed the killed run's job, or found it applied
    cut = f"update:{kill_when[-1].lower()}:{BASELINE_VERSIONS[kill_when[-1].lower()]}"
    outcome = [s for s in steps if s.step == cut and s.status == "completed"][-1].detail
    assert outcome.get("how") == "followed the job of an earlier run" or outcome["result"] == "already at target"
    no_step_left_open(state)  # what the killed run left open is closed, with its outcome
    with Journal(state, readonly=True) as journal:
        assert {s.state.value for s in journal.nodes().values()} == {"registered"}  # none left in maintenance
