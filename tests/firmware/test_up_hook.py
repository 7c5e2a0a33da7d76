"""``rackctl up``'s firmware stage: it compares and never flashes, unless asked with ``--apply-firmware``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from fwlab import BASELINE_VERSIONS, FwLab

from bootstrap.cli import cli
from bootstrap.inventory import load_inventory
from bootstrap.stages.base import RunOptions
from bootstrap.stages.options import FirmwareOptions
from bootstrap.stages.runner import Runner, select

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
