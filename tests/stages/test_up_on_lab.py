"""`rackctl up` against the emulated iDRAC rack: preflight, discover, firmware and bios for real.

The BMCs are the lab's emulated iDRACs (sushy-tools + rackctl's iDRAC layer) over verified TLS, without
lab VMs behind them; the journal is the real SQLite one. Provisioning has its own lab tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.journal.store import Journal
from tests.ports import free_port, free_ports

pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
OOB = "preflight,discover,firmware,bios"


def invoke(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    try:
        return result.exit_code, json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {result.exit_code}): {result.output}") from None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The built-in lab inventory on free ports, its emulated iDRACs running; (inventory, tree)."""
    tree = tmp_path_factory.mktemp("lab")
    text = (REPO / "inventory" / "lab.yml").read_text()
    for port, free in zip(("8441", "8442", "8443"), free_ports(3), strict=True):
        text = text.replace(f'"127.0.0.1:{port}"', f'"127.0.0.1:{free}"')
    inventory = tree / "inventory" / "lab.yml"
    inventory.parent.mkdir()
    inventory.write_text(text)
    code, data = invoke("lab", "bmc", "up", "-i", str(inventory), "--state-dir", str(tree / ".lab"))
    assert code == 0, data
    yield inventory, tree
    invoke("lab", "bmc", "down", "--state-dir", str(tree / ".lab"))


def test_up_runs_the_out_of_band_stages(lab):
    inventory, tree = lab
    state = tree / "state-ok"
    code, data = invoke("up", "-i", str(inventory), "--state-dir", str(state), "--yes", "--stages", OOB)
    assert code == 0, data
    status = {s["name"]: s["status"] for s in data["stages"]}
    assert [status[s] for s in ("preflight", "discover", "firmware", "bios")] == ["completed"] * 4
    assert set(data["nodes"].values()) == {"configured"}
    with Journal(state) as journal:
        facts = journal.latest_facts("gpu-02")["discover"]
    assert facts["service_tag"] == "LABG002" and facts["gpu_count"] == 8
    # a second `up` resumes: the completed stages are not run again
    code, again = invoke("up", "-i", str(inventory), "--state-dir", str(state), "--yes", "--stages", OOB)
    assert code == 0
    assert {s["name"]: s["status"] for s in again["stages"]}["discover"] == "skipped"


def test_a_node_that_contradicts_the_inventory_fails_alone(lab):
    inventory, tree = lab
    data = yaml.safe_load(inventory.read_text())
    data["nodes"][1]["service_tag"] = "WRONG01"  # the BMC reports LABG001: a swapped cable or typo
    wrong = inventory.with_name("wrong.yml")
    wrong.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tree / "state-wrong"
    code, out = invoke("up", "-i", str(wrong), "--state-dir", str(state), "--yes", "--stages", "preflight,discover")
    assert code == 1, out
    assert out["nodes"] == {"head-01": "discovered", "gpu-01": "failed", "gpu-02": "discovered"}
    discover = next(s for s in out["stages"] if s["name"] == "discover")
    assert "service_tag: inventory WRONG01, BMC reports LABG001" in discover["nodes"]["gpu-01"]["message"]


def test_firmware_baseline_stops_nodes_below_it(lab):
    inventory, tree = lab
    data = yaml.safe_load(inventory.read_text())
    data["firmware"] = {"baseline": {"XE9680": {"bios": "99.0.0"}}}
    strict = inventory.with_name("baseline.yml")
    strict.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tree / "state-fw"
    code, out = invoke(
        "up", "-i", str(strict), "--state-dir", str(state), "--yes", "--stages", "preflight,discover,firmware"
    )
    assert code == 1, out
    firmware = next(s for s in out["stages"] if s["name"] == "firmware")
    assert "below the baseline 99.0.0" in firmware["nodes"]["gpu-02"]["message"]
    assert out["nodes"]["gpu-02"] == "failed" and out["nodes"]["gpu-01"] == "discovered"


def test_preflight_reports_an_unreachable_bmc_per_node(lab):
    inventory, tree = lab
    data = yaml.safe_load(inventory.read_text())
    data["nodes"][2]["bmc"]["address"] = f"127.0.0.1:{free_port()}"  # nothing listens there
    moved = inventory.with_name("moved.yml")
    moved.write_text(yaml.safe_dump(data, sort_keys=False))
    code, out = invoke("up", "-i", str(moved), "--state-dir", str(tree / "state-pf"), "--yes", "--stages", "preflight")
    assert code == 1, out
    preflight = out["stages"][0]
    assert "BMC no answer: cannot reach the BMC" in preflight["nodes"]["gpu-02"]["message"]
    assert preflight["nodes"]["head-01"]["status"] == "completed"
