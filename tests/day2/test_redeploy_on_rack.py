"""``rackctl redeploy`` on emulated iDRACs, the real CLI in a subprocess, killed with SIGKILL and run again.

No VMs here: the provision stage is a test double (``redeploy_worker.py``) that PXE-boots the node through
its emulated iDRAC for real; the reinstall is counted from the emulator's request log (one boot-override
PATCH of the system per install) and from the journal (one forced move back to provisioning per redeploy).
The end-to-end redeploy over PXE in a lab VM is ``test_redeploy_vm.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bootstrap.journal.store import Journal
from tests.cli.conftest import ROOT, rackctl_env
from tests.day2.conftest import Rack

pytestmark = [pytest.mark.lab, pytest.mark.slow]

WORKER = Path(__file__).with_name("redeploy_worker.py")
NODE = "gpu-l40s-01"
SYSTEM = "/redfish/v1/Systems/System.Embedded.1"


def worker(rack: Rack, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), "--env", "host", *args, "--json"],
        cwd=ROOT,
        env=rackctl_env(**rack.env, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
    out, err = proc.communicate(timeout=120)
    try:
        return proc.returncode, json.loads(out)
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {out}\n{err}") from None


def pxe_boots(rack: Rack, since: int = 0) -> int:
    """Boot-override PATCHes of the node's system: one per (re)install."""
    return sum(1 for r in rack.requests_since(NODE, since) if r["method"] == "PATCH" and r["path"] == SYSTEM)


def reimages(state: Path) -> int:
    with Journal(state, readonly=True) as journal:
        return sum(1 for t in journal.history(NODE) if t.to_state.value == "provisioning" and "redeploy" in t.cause)


def installed(rack: Rack, inventory_name: str, tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    """NODE installed by ``up`` through provision (the PXE double) with the rack's inventory ``inventory_name``;
    the state directory and the CLI's common arguments."""
    state = tmp_path / "state"
    common = ("-i", str(rack.inventory(inventory_name)), "--state-dir", str(state))
    code, up = finish(
        worker(rack, "up", "--limit", NODE, "--stages", "preflight,discover,bios,provision", *common, "--yes")
    )
    assert code == 0, up
    assert up["nodes"] == {NODE: "provisioned"}
    return state, common


def test_a_killed_redeploy_resumes_without_reinstalling_twice(rack: Rack, tmp_path: Path) -> None:
    state, common = installed(rack, "redeploy.yml", tmp_path)

    start = len(rack.rack.request_log(NODE))
    ready = tmp_path / "frozen.pid"
    # --until os-check: the network stage needs the head node's mirror, which this test does not build
    proc = worker(rack, "redeploy", NODE, "--until", "os-check", *common, "--yes", FREEZE_AFTER_INSTALL=str(ready))
    deadline = time.monotonic() + 90
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the redeploy never reached the install"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert pxe_boots(rack, start) == 1 and reimages(state) == 1

    code, plan = finish(worker(rack, "redeploy", NODE, "--until", "os-check", "--plan", *common))
    assert code == 0 and plan["plan"]["resuming"] is True
    steps = {s["step"]: s["skip"] for s in plan["plan"]["steps"]}
    assert steps["reimage"] == "done by the redeploy in progress"
    assert steps["drain"].startswith("not joined")

    code, done = finish(worker(rack, "redeploy", NODE, "--until", "os-check", *common, "--yes"))
    assert code == 4, done  # brought through provision, stopped at os-check (a placeholder here)
    assert "resumed the redeploy" in done["did"][0]
    assert done["state"] == "provisioned"
    assert "brought through the implemented stages" in done["message"]
    assert pxe_boots(rack, start) == 1, "the resumed redeploy reinstalled the node again"
    assert reimages(state) == 1

    # a new, deliberate redeploy reinstalls again (once)
    code, again = finish(worker(rack, "redeploy", NODE, "--until", "os-check", *common, "--yes"))
    assert code == 4, again
    assert again["plan"]["resuming"] is False
    assert pxe_boots(rack, start) == 2 and reimages(state) == 2


def test_redeploy_refuses_the_head_node_and_a_node_never_installed(rack: Rack, tmp_path: Path) -> None:
    inventory = rack.inventory("refuse.yml")
    state = tmp_path / "state"
    common = ("-i", str(inventory), "--state-dir", str(state))
    code, up = finish(worker(rack, "up", "--limit", "cp-03", "--stages", "preflight", *common, "--yes"))
    assert code == 0, up
    before = rack.log_sizes()
    code, head = finish(worker(rack, "redeploy", "head-01", *common, "--yes"))
    assert code == 2 and "never reinstalled" in head["error"]
    code, fresh = finish(worker(rack, "redeploy", "cp-03", *common, "--yes"))
    assert code == 2 and "not installed yet" in fresh["error"]
    assert fresh["errors"][0]["fix"] == "run `rackctl up --limit cp-03`"
    code, unknown = finish(worker(rack, "redeploy", "nope-01", *common, "--yes"))
    assert code == 2 and unknown["errors"][0]["path"] == "NODE"
    assert rack.log_sizes() == before  # refused before any BMC was contacted
