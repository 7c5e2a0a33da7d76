"""``rackctl size`` end to end through click: output, errors, and --write / --dry-run on a real file."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli.size_cmd import register
from bootstrap.inventory.sizing_spec import SizingSection

EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "sizing"

INVENTORY = """\
# Lab rack inventory (hand-written; comments must survive --write)
cluster:
  name: lab   # short name
  domain: lab.example
nodes:
  - name: gpu01   # first GPU node
    bmc: 10.0.0.11
"""


@pytest.fixture
def cli() -> click.Group:
    @click.group()
    def root() -> None:
        """Root group of the test: only the size command."""

    register(root)
    return root


def run(cli: click.Group, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["size", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    # rich wraps messages at the terminal width: compare stderr with whitespace collapsed.
    return result.exit_code, result.stdout, " ".join(result.stderr.split())


def test_json_reproduces_example_1(cli: click.Group) -> None:
    code, out, _ = run(cli, "-r", str(EXAMPLES / "guide-example-1.yaml"), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert data["recommended"]["server"] == "r760xa-l40s-4"
    assert data["recommended"]["servers_needed"] == 1
    assert data["options"][0]["models"][0]["chosen"]["tensor_parallel"] == 1


def test_human_output_names_the_placement(cli: click.Group) -> None:
    code, out, _ = run(cli, "-r", str(EXAMPLES / "guide-example-2.yaml"))
    out = " ".join(out.split())
    assert code == 0
    assert "Placement on 1 x PowerEdge XE9680" in out
    assert "recommended" in out
    assert "Not supported" in out  # why the 2 x L40S option does not fit the 70B model


def test_single_model_flags(cli: click.Group) -> None:
    code, out, _ = run(
        cli, "--model", "Llama 2 70B", "--precision", "FP8", "--rps", "4", "--server", "xe8640", "--json"
    )
    data = json.loads(out)
    assert code == 0
    assert data["requirements"]["models"][0]["model"] == "llama-2-70b"
    assert data["recommended"]["server"] == "xe8640"


def test_flags_add_to_a_requirements_file(cli: click.Group) -> None:
    code, out, _ = run(
        cli,
        "-r",
        str(EXAMPLES / "guide-example-1.yaml"),
        "--model",
        "llama-2-7b",
        "--precision",
        "fp8",
        "--json",
    )
    assert code == 0
    assert [m["model"] for m in json.loads(out)["requirements"]["models"]] == [
        "llama-2-13b",
        "mistral-7b",
        "llama-2-7b",
    ]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--model", "mistral", "--precision", "fp8", "--input-tokens", "9000"],
            ["models[0].input_tokens", "9000", "2048", "measured"],
        ),
        (["--model", "mistral"], ["--precision", "add it"]),
        (["--model", "bloom", "--precision", "fp8"], ["models[0].model", "bloom", "llama-2-7b"]),
        (["--model", "mistral", "--precision", "fp8", "--server", "r650"], ["candidate_servers[0]", "r650"]),
        ([], ["no model given", "--requirements"]),
        (["-r", "/nonexistent/req.yaml"], ["--requirements", "/nonexistent/req.yaml"]),
    ],
)
def test_bad_input_exits_2_without_traceback(cli: click.Group, args: list[str], words: list[str]) -> None:
    code, out, err = run(cli, *args)
    assert code == 2
    assert "Traceback" not in out + err
    for word in words:
        assert word in err


def test_bad_input_as_json(cli: click.Group, tmp_path: Path) -> None:
    req = tmp_path / "req.yaml"
    req.write_text("models:\n  - model: mistral\n    precision: fp8\n    concurrent_users: -3\n    colour: red\n")
    code, out, _ = run(cli, "-r", str(req), "--json")
    data = json.loads(out)
    assert code == 2 and data["ok"] is False
    paths = {e["path"]: e for e in data["errors"]}
    assert set(paths) == {"models[0].concurrent_users", "models[0].colour"}
    assert "-3" in paths["models[0].concurrent_users"]["message"]
    assert "concurrent_users" in paths["models[0].colour"]["fix"]


def test_nothing_fits_exits_1(cli: click.Group) -> None:
    code, out, _ = run(cli, "--model", "falcon-180b", "--precision", "fp8", "--server", "xe8640", "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False and data["recommended"] is None
    assert "Not supported" in " ".join(data["options"][0]["why_not"])


def test_write_keeps_comments_and_other_keys(cli: click.Group, tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yml"
    inv.write_text(INVENTORY)
    code, out, err = run(cli, "-r", str(EXAMPLES / "guide-example-2.yaml"), "--write", "-i", str(inv))
    assert code == 0, err
    text = inv.read_text()
    assert text.startswith(INVENTORY)  # every original line, comments included, untouched
    data = yaml.safe_load(text)
    section = SizingSection.model_validate(data["sizing"])
    assert section.placement.server == "xe9680"
    assert [m.model for m in section.requirements.models] == ["llama-2-70b", "llama-2-13b", "llama-2-7b"]
    # Sizing again with other requirements replaces the section, still keeping the rest.
    code, out, err = run(cli, "-r", str(EXAMPLES / "guide-example-1.yaml"), "--write", "-i", str(inv), "--json")
    assert code == 0 and json.loads(out)["write"]["written"] is True
    text = inv.read_text()
    assert text.startswith(INVENTORY) and text.count("sizing:") == 1
    assert yaml.safe_load(text)["sizing"]["placement"]["server"] == "r760xa-l40s-4"
    # Same requirements again: nothing to change.
    code, out, _ = run(cli, "-r", str(EXAMPLES / "guide-example-1.yaml"), "--write", "-i", str(inv), "--json")
    assert json.loads(out)["write"] == {**json.loads(out)["write"], "changed": False, "written": False}
    assert not list(tmp_path.glob(".cluster.yml.*"))  # no temp file left behind


def test_dry_run_shows_the_diff_and_writes_nothing(cli: click.Group, tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yml"
    inv.write_text(INVENTORY)
    before = inv.stat().st_mtime_ns
    code, out, _ = run(cli, "-r", str(EXAMPLES / "guide-example-1.yaml"), "--write", "--dry-run", "-i", str(inv))
    assert code == 0
    assert "+sizing:" in out and "+    server: r760xa-l40s-4" in out
    assert inv.read_text() == INVENTORY and inv.stat().st_mtime_ns == before


def test_write_refuses_when_nothing_fits(cli: click.Group, tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yml"
    inv.write_text(INVENTORY)
    code, _, err = run(
        cli, "--model", "falcon-180b", "--precision", "fp8", "--server", "xe8640", "--write", "-i", str(inv)
    )
    assert code == 1 and "nothing written" in err
    assert inv.read_text() == INVENTORY


@pytest.mark.parametrize(
    ("content", "words"),
    [("- a\n- b\n", ["not a mapping"]), ("a: [\n", ["not valid YAML"]), (None, ["does not exist"])],
)
def test_write_to_a_bad_inventory(cli: click.Group, tmp_path: Path, content: str | None, words: list[str]) -> None:
    inv = tmp_path / "cluster.yml"
    if content is not None:
        inv.write_text(content)
    code, _, err = run(cli, "-r", str(EXAMPLES / "guide-example-1.yaml"), "--write", "-i", str(inv))
    assert code == 2 and "Traceback" not in err
    for word in words:
        assert word in err
    assert (inv.read_text() if content is not None else None) == content


def test_dry_run_needs_write(cli: click.Group) -> None:
    code, _, err = run(cli, "-r", str(EXAMPLES / "guide-example-1.yaml"), "--dry-run")
    assert code == 2 and "--write" in err


def test_written_inventory_still_loads(cli: click.Group, tmp_path: Path) -> None:
    # The project's own inventory loader must accept the file --write produced (sizing: is part of it).
    loader = pytest.importorskip("bootstrap.inventory.loader")
    example = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
    if not example.exists():
        pytest.skip("example inventory not present")
    inv = tmp_path / "cluster.yml"
    inv.write_text(example.read_text())
    code, _, err = run(cli, "-r", str(EXAMPLES / "guide-example-2.yaml"), "--write", "-i", str(inv))
    assert code == 0, err
    inventory = loader.load_inventory(inv)
    assert inventory.sizing.placement.server == "xe9680"
    assert inv.read_text().startswith(example.read_text())


def test_precision_is_a_closed_choice(cli: click.Group) -> None:
    code, out, err = run(cli, "--model", "mistral", "--precision", "int4")
    assert code == 2 and "Traceback" not in out + err
    assert "--precision" in err and "'int4' is not one of" in err and "fp8" in err


def test_measured_example_json_shows_arithmetic_and_writes(cli: click.Group, tmp_path: Path) -> None:
    code, out, err = run(cli, "-r", str(EXAMPLES / "measured-rag.yaml"), "--json")
    assert code == 0, err
    data = json.loads(out)
    xe = next(o for o in data["options"] if o["server"] == "xe9680")
    rag = xe["models"][0]["chosen"]
    assert rag["basis"] == "measured" and rag["servers"] == 5 and rag["peak"] == 45.0
    assert rag["formula"] == "ceil(45 / 12.5 requests/s per server) = 4 + 1 spare = 5 server(s); headroom 5 requests/s"
    inv = tmp_path / "cluster.yml"
    inv.write_text(INVENTORY)
    code, _, err = run(cli, "-r", str(EXAMPLES / "measured-rag.yaml"), "--write", "-i", str(inv))
    assert code == 0, err
    section = SizingSection.model_validate(yaml.safe_load(inv.read_text())["sizing"])
    assert section.placement.servers_needed == 6 and section.source.startswith("operator measurements")
    assert section.requirements.models[0].measured[0].requests_per_second == 12.5


def test_human_output_shows_the_arithmetic(cli: click.Group) -> None:
    code, out, _ = run(cli, "-r", str(EXAMPLES / "measured-rag.yaml"))
    out = " ".join(out.split())
    assert code == 0 and "Arithmetic (measured)" in out
    assert "llama-3.1-8b-instruct fp8 on xe9680: ceil(45 / 12.5 requests/s per server) = 4 + 1 spare = 5" in out


def test_peak_rps_and_redundancy_flags(cli: click.Group) -> None:
    code, out, err = run(
        cli, "--model", "llama-2-13b", "--precision", "FP8", "--peak-rps", "3", "--redundancy", "1", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["requirements"]["models"][0]["peak_requests_per_second"] == 3.0
