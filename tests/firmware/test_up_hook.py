"""``rackctl up``'s firmware stage: it compares and never flashes, unless asked with ``--apply-firmware``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from fwlab import BASELINE_VERSIONS, FwLab, start_lab
from test_kill import ROOT, wait_until
from test_resume import signal_when_rebooting
from test_rollout import at_baseline

from bootstrap.cli import cli
from bootstrap.inventory import load_inventory
from bootstrap.stages.base import RunOptions
from bootstrap.stages.options import FirmwareOptions
from bootstrap.stages.runner import Runner, select
from tests.timing import seconds

STAGES = "preflight,discover,firmware"


def up(lab: FwLab, state: Path, *extra: str) -> tuple[int, dict]:
    args = ["up", "-i", str(lab.inventory), "--state-dir", str(state), "--stages", STAGES]
    result = CliRunner().invoke(cli, [*args, *extra, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.output)


def test_up_compares_without_the_flag_and_rolls_out_with_it(fwlab: FwLab, tmp_path: Path) -> None:
    fwlab.write(rollout={"max_unavailable": "50%", "failure_threshold": 1})
    state = tmp_path / "state"
    code, data = up(fwlab, state)
    assert code == 1, data
    firmware = next(s for s in data["stages"] if s["name"] == "firmware")
    message = firmware["nodes"][fwlab.order[0]]["message"]
    assert "below the baseline 7.20.10.50" in message and "rackctl firmware apply" in message
    assert all(fwlab.updates(n) == [] for n in fwlab.order)  # nothing flashed during a plain `up`

    code, data = up(fwlab, state, "--apply-firmware", "--dry-run")
    assert code == 0
    actions = [a for s in data["stages"] if s["name"] == "firmware" for a in s["actions"]]
    assert actions and all("roll out the" in a["action"] and a["destructive"] for a in actions), actions
    assert all(fwlab.updates(n) == [] for n in fwlab.order)

    # what `up --apply-firmware` runs (the CLI sets exactly this option), polling faster than the default 5 s
    inventory = load_inventory(fwlab.inventory)
    options = RunOptions(firmware=FirmwareOptions(apply=True, poll_s=0.1))
    outcome = Runner(inventory, state, select(inventory, stages=STAGES.split(",")), options=options).run()
    assert outcome.ok, outcome.as_dict()
    for name in fwlab.order:
        assert fwlab.firmware(name)["BIOS"] == BASELINE_VERSIONS["bios"]
        assert [u["component"] for u in fwlab.updates(name)] == ["iDRAC", "BIOS", "NIC"]


#: what ``rackctl up --apply-firmware`` runs (the CLI sets exactly this option), polling faster than the
#: default 5 s, in a process of its own that a real SIGINT can stop
UP_APPLY = """
import json, sys
from pathlib import Path
from bootstrap.inventory import load_inventory
from bootstrap.stages.base import RunOptions
from bootstrap.stages.options import FirmwareOptions
from bootstrap.stages.runner import Runner, select
inventory = load_inventory(Path(sys.argv[1]))
options = RunOptions(firmware=FirmwareOptions(apply=True, poll_s=0.1))
selection = select(inventory, stages=sys.argv[3].split(","))
outcome = Runner(inventory, Path(sys.argv[2]), selection, options=options, command="up --apply-firmware").run()
print(json.dumps(outcome.as_dict()))
sys.exit(outcome.exit_code)
"""


def up_apply(lab: FwLab, state: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'lab'}"}
    argv = [sys.executable, "-c", UP_APPLY, str(lab.inventory), str(state), STAGES]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ctrl_c_during_up_apply_firmware_reports_each_node_so_far_and_the_next_up_resumes(tmp_path: Path) -> None:
    """Three control planes, three workers, max-unavailable 2: Ctrl-C while the first two workers reboot.
    The interrupted ``up`` names each node's result (the control planes done, the two workers cut, the last
    never started) and how to resume; the next ``up --apply-firmware`` finishes, flashing nothing twice."""
    lab = start_lab(tmp_path, 6, slow={3, 4})
    try:
        lab.write(rollout={"max_unavailable": 2, "failure_threshold": 1})
        state = tmp_path / "state"
        victims = [lab.order[3], lab.order[4]]
        proc, out, err = signal_when_rebooting(lab, lambda: up_apply(lab, state), victims, signal.SIGINT)
        assert proc.returncode == 130, (out[-2000:], err[-2000:])
        stopped = json.loads(out)
        assert stopped["status"] == "interrupted" and "rackctl up --apply-firmware` again" in stopped["message"]
        firmware = next(s for s in stopped["stages"] if s["name"] == "firmware")
        assert firmware["status"] == "interrupted"
        nodes = firmware["nodes"]
        assert {nodes[n]["status"] for n in lab.order[:3]} == {"completed"}, nodes
        assert {nodes[n]["status"] for n in victims} <= {"interrupted", "completed"}, nodes
        assert "interrupted" in {nodes[n]["status"] for n in victims}, nodes
        assert nodes[lab.order[5]]["status"] == "not_run" and "not started" in nodes[lab.order[5]]["message"]

        wait_until(lambda: all(at_baseline(lab, n) for n in victims), timeout=seconds(60))
        again = up_apply(lab, state)
        out, err = again.communicate(timeout=seconds(300))
        assert again.returncode == 0, (out[-2000:], err[-2000:])
        for name in lab.order:
            assert at_baseline(lab, name), (name, lab.firmware(name))
            assert [u["component"] for u in lab.updates(name)] == ["iDRAC", "BIOS", "NIC"]  # nothing twice
    finally:
        lab.rack.stop()
