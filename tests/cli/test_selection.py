"""One selection grammar on every command: globs, roles, did-you-mean, and empty selections refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.inventory import load_inventory
from bootstrap.selection import check_stages, match_nodes, split_csv

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
WORKERS = ["gpu-l40s-01", "gpu-xe9680-01"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_grammar_hostnames_globs_roles_in_inventory_order() -> None:
    inventory = load_inventory(EXAMPLE)
    assert match_nodes(inventory, split_csv("worker")) == WORKERS
    assert match_nodes(inventory, split_csv(" gpu-x* , head-01,,")) == ["head-01", "gpu-xe9680-01"]
    assert match_nodes(inventory, split_csv(None)) == [n.hostname for n in inventory.nodes]
    with pytest.raises(InvalidInput) as info:
        match_nodes(inventory, ["gpu-l40s-1", "workers"])
    fixes = [p.fix for p in info.value.problems]
    assert "did you mean 'gpu-l40s-01'?" in fixes[0] and "'worker'" in fixes[1]
    assert check_stages(["bios", "discover"], ["discover", "bios"]) == ["discover", "bios"]
    with pytest.raises(InvalidInput, match="unknown stage"):
        check_stages(["discovr"], ["discover", "bios"])


@pytest.mark.parametrize("value", ["", ",", " , "])
@pytest.mark.parametrize(
    "command",
    [
        ["plan"],
        ["up", "--dry-run"],
        ["provision", "--dry-run"],
        ["discover"],
        ["bios", "plan"],
        ["power", "on", "--dry-run"],
        ["boot", "Pxe", "--dry-run"],
        ["bmc", "status"],
    ],
)
def test_empty_limit_is_exit_2_naming_option_value_and_fix(command: list[str], value: str, tmp_path: Path) -> None:
    args = [*command, "-i", str(EXAMPLE), "--limit", value, "--json"]
    if command[0] in ("plan", "up", "provision", "discover", "bios"):
        args += ["--state-dir", str(tmp_path / "state")]
    code, out = invoke(*args)
    assert code == 2, out
    error = json.loads(out)["errors"][0]
    assert error["path"] == "--limit" and repr(value) in error["message"] and "--limit" in error["fix"]
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_empty_stages_is_refused(value: str, tmp_path: Path) -> None:
    for command in (["plan"], ["up", "--dry-run"]):
        code, out = invoke(*command, "-i", str(EXAMPLE), "--state-dir", str(tmp_path), "--stages", value, "--json")
        assert code == 2, out
        error = json.loads(out)["errors"][0]
        assert error["path"] == "--stages" and "discover,bios" in error["fix"]


def test_unknown_stage_offers_the_closest(tmp_path: Path) -> None:
    code, out = invoke("plan", "-i", str(EXAMPLE), "--state-dir", str(tmp_path), "--stages", "bois", "--json")
    assert code == 2 and "did you mean 'bios'?" in json.loads(out)["errors"][0]["fix"]


def test_provision_nodes_and_limit_are_one_grammar(tmp_path: Path) -> None:
    base = ["provision", "--dry-run", "-i", str(EXAMPLE), "--state-dir", str(tmp_path), "--json"]
    by_limit = json.loads(invoke(*base, "--limit", "worker")[1])
    by_args = json.loads(invoke(*base, "worker")[1])
    assert list(by_limit["nodes"]) == list(by_args["nodes"]) == WORKERS
    default = json.loads(invoke(*base)[1])
    assert "head-01" not in default["nodes"] and len(default["nodes"]) == 4
    code, out = invoke(*base, "worker", "--limit", "cp-02")
    assert code == 2 and "not both" in out
    code, out = invoke(*base, "gpu-l40s-1")
    assert code == 2 and "did you mean 'gpu-l40s-01'?" in out
