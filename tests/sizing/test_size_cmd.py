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
            ["models[0].input_tokens", "9000", "2048", "measurements"],
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


def test_measured_sizing_shows_the_arithmetic(cli: click.Group) -> None:
    code, out, _ = run(cli, "-r", str(EXAMPLES / "measured-rag.yaml"))
    out = " ".join(out.split())
    assert code == 0
    assert "Arithmetic on xe9680" in out
    assert "ceil(36.9 / 12.3) = 3" in out and "redundancy N+1" in out
    assert "headroom: 32 x 1.5375 - 36.9 = 12.3 req/s" in out
    assert "Placement on 4 x PowerEdge XE9680" in out


def test_measured_sizing_as_json(cli: click.Group) -> None:
    code, out, _ = run(cli, "-r", str(EXAMPLES / "measured-rag.yaml"), "--json")
    data = json.loads(out)
    assert code == 0 and data["recommended"]["servers_needed"] == 4
    calc = data["options"][0]["models"][0]["chosen"]["arithmetic"]
    assert (calc["capacity_per_server"], calc["peak"], calc["servers_for_peak"], calc["headroom"]) == (
        12.3,
        36.9,
        3,
        12.3,
    )
    assert data["source"].startswith("operator measurements")


def test_peak_rps_and_redundancy_flags(cli: click.Group) -> None:
    code, out, _ = run(
        cli,
        "--model",
        "mistral",
        "--precision",
        "FP8",
        "--peak-rps",
        "50",
        "--redundancy",
        "1",
        "--server",
        "xe9680",
        "--json",
    )
    assert code == 0
    calc = json.loads(out)["options"][0]["models"][0]["chosen"]["arithmetic"]
    assert "Little's law" in calc["peak_from"]
    assert calc["redundancy"] == 1 and calc["spare_instances"] == 8
    assert json.loads(out)["recommended"]["servers_needed"] == 2


def test_precision_is_a_closed_choice(cli: click.Group) -> None:
    code, _, err = run(cli, "--model", "mistral", "--precision", "int3")
    assert code == 2 and "int3" in err and "fp8" in err and "Traceback" not in err


def test_write_stores_the_measurements(cli: click.Group, tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yml"
    inv.write_text(INVENTORY)
    code, _, err = run(cli, "-r", str(EXAMPLES / "measured-rag.yaml"), "--write", "-i", str(inv))
    assert code == 0, err
    section = SizingSection.model_validate(yaml.safe_load(inv.read_text())["sizing"])
    measurement = section.requirements.models[0].measurements[0]
    assert (measurement.server, measurement.requests_per_second) == ("xe9680", 12.3)
    assert section.requirements.models[0].redundancy == 1
    assert section.placement.servers_needed == 4
    assert section.source.startswith("operator measurements for acme-llama-3.1-8b-rag")


def test_write_stores_a_mixed_fleet(cli: click.Group, tmp_path: Path) -> None:
    req = tmp_path / "req.yaml"
    req.write_text(
        """\
models:
  - model: acme-chat-70b
    precision: fp8
    peak_requests_per_second: 20
    measurements: [{server: xe9680, tensor_parallel: 4, requests_per_second: 10}]
  - model: acme-embed
    precision: fp16
    peak_requests_per_second: 100
    measurements: [{server: r760xa-l40s-2, requests_per_second: 100}]
"""
    )
    inv = tmp_path / "cluster.yml"
    inv.write_text(INVENTORY)
    code, out, err = run(cli, "-r", str(req), "--write", "-i", str(inv))
    out = " ".join(out.split())
    assert code == 0, err
    assert "a mixed fleet" in out
    assert "Placement on 2 x PowerEdge XE9680" in out and "Placement on 1 x PowerEdge R760xa 2 x L40S" in out
    section = SizingSection.model_validate(yaml.safe_load(inv.read_text())["sizing"])
    assert section.placement is None
    assert [(p.server, p.servers_needed) for p in section.fleet] == [("xe9680", 2), ("r760xa-l40s-2", 1)]


def test_example_sizes_the_shipped_file_by_name(cli: click.Group) -> None:
    """``--example NAME`` reads the packaged sample (what a wheel user has), the same as ``-r`` on its file."""
    code, out, _ = run(cli, "--example", "guide-example-1", "--json")
    by_path_code, by_path, _ = run(cli, "-r", str(EXAMPLES / "guide-example-1.yaml"), "--json")
    assert code == by_path_code == 0
    assert json.loads(out) == json.loads(by_path)


def test_example_beside_requirements_and_an_unknown_example_are_refused(cli: click.Group) -> None:
    code, _, err = run(cli, "--example", "guide-example-1", "-r", str(EXAMPLES / "guide-example-2.yaml"))
    assert code == 2
    assert "--example: 'guide-example-1' beside --requirements" in err and "give one of them" in err
    code, _, err = run(cli, "--example", "guide-example-9")
    assert code == 2 and "'guide-example-9' is not one of" in err and "'measured-rag'" in err
    code, _, err = run(cli)
    assert code == 2 and "--example NAME (a shipped file: chat-and-rag, guide-example-1" in err
