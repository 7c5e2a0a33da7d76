"""``rackctl plan``, ``up`` and ``journal show`` through click's runner, ``--json`` parsed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.inventory import Inventory
from bootstrap.stages.base import STAGE_ORDER

from .conftest import EXAMPLE_INVENTORY, Recorder, make_all, make_stage


def invoke(*args: str):
    return CliRunner().invoke(cli, [*args], catch_exceptions=False)


def base_args(state: Path) -> list[str]:
    return ["-i", str(EXAMPLE_INVENTORY), "--state-dir", str(state)]


def test_commands_are_registered() -> None:
    out = invoke("--help").output
    for name in ("plan", "up", "journal"):
        assert f"  {name} " in out


def test_plan_json_lists_every_stage_and_touches_nothing(registry: dict, hostnames: list[str], tmp_path: Path) -> None:
    state = tmp_path / "state"
    res = invoke("plan", *base_args(state), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [s["name"] for s in data["stages"]] == list(STAGE_ORDER)
    assert data["stops_at"] == "preflight"
    assert data["nodes"] == dict.fromkeys(hostnames, "unregistered")
    assert not state.exists()


def test_up_stops_at_unimplemented_stage_with_exit_4(registry: dict, hostnames: list[str], tmp_path: Path) -> None:
    state = tmp_path / "state"
    make_stage("preflight", Recorder())
    res = invoke("up", *base_args(state), "--json")
    assert res.exit_code == 4
    data = json.loads(res.stdout)
    assert data["ok"] is False and data["exit_code"] == 4 and data["status"] == "not_implemented"
    assert data["message"] == ("stage 'discover' is not implemented yet; the run stopped here; completed: preflight")
    shown = json.loads(invoke("journal", "show", "--state-dir", str(state), "--json").stdout)
    assert {n["node"]: n["state"] for n in shown["nodes"]} == dict.fromkeys(hostnames, "registered")
    assert shown["runs"][0]["status"] == "not_implemented"

    human = invoke("up", *base_args(state))
    assert human.exit_code == 4
    assert "stage 'discover' is not implemented yet" in human.output
    assert "Traceback" not in human.output


def test_up_dry_run_writes_nothing(registry: dict, tmp_path: Path) -> None:
    state = tmp_path / "state"
    res = invoke("up", *base_args(state), "--dry-run", "--json")
    assert res.exit_code == 0
    assert json.loads(res.stdout)["dry_run"] is True
    assert not state.exists()


def test_bad_input_is_exit_2_naming_field_and_value(registry: dict, tmp_path: Path) -> None:
    res = invoke("up", *base_args(tmp_path), "--limit", "gpu-99", "--json")
    assert res.exit_code == 2
    data = json.loads(res.stdout)
    assert data["ok"] is False
    assert data["errors"][0]["path"] == "--limit"
    assert "'gpu-99'" in data["errors"][0]["message"] and "use one of" in data["errors"][0]["fix"]

    res = invoke("up", *base_args(tmp_path), "--stages", "discover,bogus")
    assert res.exit_code == 2
    assert "unknown stage(s): 'bogus'" in res.output and "Traceback" not in res.output

    res = invoke("up", "-i", str(tmp_path / "missing.yml"), "--state-dir", str(tmp_path))
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_full_up_then_journal_show_node(registry: dict, inventory: Inventory, tmp_path: Path) -> None:
    state = tmp_path / "state"
    make_all(Recorder())
    node = inventory.nodes[0].hostname
    res = invoke("up", *base_args(state), "--yes", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["ok"] is True
    assert set(data["nodes"].values()) == {"ready"}
    assert [s["status"] for s in data["stages"]] == ["completed"] * len(STAGE_ORDER)

    shown = json.loads(invoke("journal", "show", node, "--state-dir", str(state), "--json").stdout)
    assert shown["state"] == "ready"
    assert [t["to"] for t in shown["history"]][-1] == "ready"
    assert {s["stage"] for s in shown["steps"]} == set(STAGE_ORDER)
    assert all(t["cause"] for t in shown["history"])

    human = invoke("journal", "show", node, "--state-dir", str(state))
    assert human.exit_code == 0 and "transitions" in human.output and "ready" in human.output


def test_destructive_stage_without_yes_is_refused_without_a_terminal(registry: dict, tmp_path: Path) -> None:
    rec = Recorder()
    make_stage("preflight", rec, destructive=True)
    res = invoke("up", *base_args(tmp_path), "--json")
    assert res.exit_code == 2
    assert "pass --yes" in json.loads(res.stdout)["error"]
    assert rec.effects == []


def test_journal_show_errors(tmp_path: Path, registry: dict) -> None:
    res = invoke("journal", "show", "--state-dir", str(tmp_path / "none"), "--json")
    assert res.exit_code == 2 and "no journal" in json.loads(res.stdout)["error"]
    invoke("up", *base_args(tmp_path), "--json")
    res = invoke("journal", "show", "ghost", "--state-dir", str(tmp_path))
    assert res.exit_code == 2 and "'ghost' is not in the journal" in res.output


def test_journal_mark_maintenance_and_back(registry: dict, hostnames: list[str], tmp_path: Path) -> None:
    invoke("up", *base_args(tmp_path), "--json")
    node = hostnames[0]
    state = ["--state-dir", str(tmp_path)]
    dry = invoke("journal", "mark", node, "maintenance", "--cause", "DIMM swap", "--dry-run", "--json", *state)
    assert dry.exit_code == 0 and json.loads(dry.stdout)["dry_run"] is True
    shown = json.loads(invoke("journal", "show", node, "--json", *state).stdout)
    assert shown["state"] == "registered"

    res = invoke("journal", "mark", node, "maintenance", "--cause", "DIMM swap", "--json", *state)
    assert res.exit_code == 0 and json.loads(res.stdout)["to"] == "maintenance"
    refused = invoke("journal", "mark", node, "ready", "--cause", "skip", "--json", *state)
    assert refused.exit_code == 1
    err = json.loads(refused.stdout)["error"]
    assert "cannot move from maintenance to ready" in err and "allowed from maintenance: registered" in err
    assert invoke("journal", "mark", node, "registered", "--cause", "done", *state).exit_code == 0
    shown = json.loads(invoke("journal", "show", node, "--json", *state).stdout)
    assert [t["to"] for t in shown["history"]] == ["registered", "maintenance", "registered"]
    assert shown["history"][1]["cause"] == "by hand: DIMM swap"


def test_plan_and_up_warn_of_a_kubernetes_release_past_its_end_of_life(registry: dict, tmp_path: Path) -> None:
    """The inventory pins 1.33.5 (end of life 2026-06-28): plan and up still run, and say so naming the field,
    in the --json document and on stderr."""
    text = EXAMPLE_INVENTORY.read_text().replace(
        "software_profile: current", "software_profile: current\n  versions: {kubernetes: 1.33.5}"
    )
    assert "versions: {kubernetes: 1.33.5}" in text
    inventory = tmp_path / "old.yml"
    inventory.write_text(text)
    for path in EXAMPLE_INVENTORY.parent.iterdir():  # files the sample names relative to itself
        if path.name != EXAMPLE_INVENTORY.name and not (tmp_path / path.name).exists():
            (tmp_path / path.name).symlink_to(path)
    args = ["-i", str(inventory), "--state-dir", str(tmp_path / "state")]
    for command in (["plan"], ["up", "--dry-run"]):
        res = invoke(*command, *args, "--json")
        assert res.exit_code == 0, res.output
        (warning,) = [w for w in json.loads(res.stdout)["warnings"] if "end of life" in w]
        assert warning.startswith("cluster.versions.kubernetes: 1.33.5: Kubernetes 1.33 reached its end of life")
        human = invoke(*command, *args)
        assert human.exit_code == 0 and "cluster.versions.kubernetes: 1.33.5" in human.stderr
    res = invoke("plan", *base_args(tmp_path / "state"), "--json")
    assert not [w for w in json.loads(res.stdout).get("warnings", []) if "end of life" in w]  # the default: none
