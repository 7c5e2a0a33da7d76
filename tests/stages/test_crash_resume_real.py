"""SIGKILL the REAL ``rackctl up --stages preflight,discover,bios`` mid-bios, run it again, and check on the
emulated iDRACs that every node's BIOS job was made exactly once and the run completed.

The BMCs are emulated iDRACs (real HTTPS, sushy-tools core) with latency: one node is fast, so its bios
step is journalled while the slow ones are still being staged when the process is killed. The resumed run
must not touch the BIOS of a node whose step completed (the emulator's request log shows it), must finish
the others, and must leave one BIOS job per node (jobs and ``bios_pending`` from ``EmulatedRack.state``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bootstrap.journal.store import Journal
from tests import timing
from tests.cli.conftest import ROOT, inventory_on_rack, rackctl_env
from tests.redfish import rf_lab

FAST = "head-01"
SLOW_MS = 250
STAGES = "preflight,discover,bios"

pytestmark = pytest.mark.slow
rack = rf_lab.rack  # the module's emulated iDRACs (a fixture shared with other modules)


def _up(inventory: Path, state: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bootstrap",
            "up",
            "--stages",
            STAGES,
            "-i",
            str(inventory),
            "--state-dir",
            str(state),
            "--yes",
            "--json",
        ],
        cwd=ROOT,
        env=rackctl_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _bios_jobs(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [j for j in state["jobs"] if (j.get("TargetSettingsURI") or "").endswith("/Bios/Settings")]


def test_sigkill_mid_bios_then_resume_creates_each_job_once(rack: Any, tmp_path: Path) -> None:
    emulated, specs, endpoints = rack
    inventory, env = inventory_on_rack(tmp_path, specs, endpoints)
    state_dir = tmp_path / "state"
    for name in specs:
        emulated.set_latency(name, 10 if name == FAST else SLOW_MS)
    proc = _up(inventory, state_dir, env)
    try:
        limit = time.monotonic() + 120
        while not _bios_jobs(emulated.state(FAST)):  # the fast node's BIOS job exists: bios is under way
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < limit, "the bios stage never started"
            time.sleep(0.05)

        def fast_step_journalled() -> bool:  # the fast node's bios step is in the journal; the slow ones mid-way
            assert proc.poll() is None, proc.communicate()
            if not (state_dir / "journal.sqlite3").exists():
                return False
            with Journal(state_dir, readonly=True) as journal:
                return any(s.stage == "bios" and s.status == "completed" for s in journal.steps(node=FAST))

        timing.wait_for(fast_step_journalled, timeout=60, interval=0.05, what="the fast node's bios step journalled")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    without_job = [n for n in specs if not _bios_jobs(emulated.state(n))]
    assert without_job, "every node had its job before the kill: nothing left to resume"

    for name in specs:
        emulated.set_latency(name, 0)
    time.sleep(SLOW_MS / 1000 + 0.5)  # requests the killed process left in flight are answered
    marks = {name: len(emulated.request_log(name)) for name in specs}
    rerun = _up(inventory, state_dir, env)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, out + err
    doc = json.loads(out)
    assert {s["name"]: s["status"] for s in doc["stages"]}["bios"] == "completed", doc

    for name, spec in specs.items():
        state = emulated.state(name)
        jobs = _bios_jobs(state)
        assert len(jobs) == 1, f"{name}: {len(jobs)} BIOS jobs: {jobs}"
        assert jobs[0]["JobState"] == "Scheduled", jobs  # applies at the next boot; nothing rebooted
        assert state["bios_pending"], f"{name}: nothing staged"
        assert spec.password not in out + err
    # The node whose bios step completed before the kill: the resumed run left its BIOS alone.
    touched = [f"{e['method']} {e['path']}" for e in emulated.request_log(FAST)[marks[FAST] :] if "/Bios" in e["path"]]
    assert touched == [], f"resumed run redid {FAST}'s completed bios step: {touched}"
