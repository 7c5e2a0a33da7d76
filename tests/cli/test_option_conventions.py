"""One convention for the CLI's options, checked on every command of the real command tree: previews are
``--plan`` (``--dry-run`` a hidden alias that still works), nodes are selected with ``--limit`` wherever an
inventory's nodes are touched, output paths are ``-o/--out``, every command offers ``--json``, and the
environment variables show in ``--help`` and the operator's guide."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import click
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.selection import LIMIT_HELP

SAMPLE = str(Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml")


def commands(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden or (*prefix, name) == ("lab",):  # the lab: a package of its own
            continue
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))


def help_of(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_preview_is_plan_with_dry_run_a_hidden_alias() -> None:
    previews = []
    lab = cli.get_command(click.Context(cli), "lab")
    assert isinstance(lab, click.Group)  # the lab's own commands keep the convention too (`lab up --plan`)
    for path, command in (*commands(), *commands(lab, ("lab",))):
        names = {n for p in command.params for n in getattr(p, "opts", [])}
        if not names & {"--plan", "--dry-run"}:
            continue
        previews.append(path)
        assert {"--plan", "--dry-run"} <= names, f"rackctl {' '.join(path)}: {sorted(names)}"
        text = help_of(path)
        assert "--plan" in text and "--dry-run" not in text, f"rackctl {' '.join(path)}"
    assert len(previews) >= 15, previews  # up, apply, redeploy, driver upgrade, firmware, bios, image, size...


def test_the_hidden_dry_run_alias_still_previews(tmp_path) -> None:
    sample = SAMPLE
    out = tmp_path / "out"
    for flag in ("--plan", "--dry-run"):
        result = CliRunner().invoke(
            cli, ["inventory", "render", "-i", sample, "--state-dir", str(tmp_path), "-o", str(out), flag, "--json"]
        )
        assert result.exit_code == 0, result.output
        assert '"dry_run": true' in result.output and not out.exists()


def test_the_environment_variables_are_shown_in_help() -> None:
    top = help_of(())
    for name in ("RACKCTL_INVENTORY", "RACKCTL_STATE_DIR", "RACKCTL_ENV"):
        assert name in top
    assert "env var: RACKCTL_INVENTORY" in help_of(("validate",))
    up = help_of(("up",))
    assert "env var: RACKCTL_INVENTORY" in up and "env var: RACKCTL_STATE_DIR" in up


#: commands that read an inventory but touch no node one by one, each with why (a new command that reads an
#: inventory takes --limit, or says here why not)
NO_LIMIT = {
    ("validate",): "reads the file only",
    ("inventory", "render"): "writes Ansible's inventory of the whole cluster",
    ("render", "cluster"): "renders the cluster-wide manifests, touches nothing",
    ("mirror", "build"): "builds the head node's mirror for every node's roles",
    ("mirror", "check"): "checks the mirror against every node's roles",
    ("mirror", "images"): "looks up and imports the cluster's images",
    ("image", "build"): "builds the OS image on this machine",
    ("triton", "render"): "renders the model repositories, touches nothing",
    ("triton", "manifests"): "renders the cluster's Triton manifests, touches nothing",
    ("size",): "sizes servers for models and demand",
    ("redeploy",): "takes the one NODE it reinstalls as its argument",
    ("validate-cluster",): "checks the running cluster as a whole through its API",
}


def _opts(command: click.Command) -> set[str]:
    return {o for p in command.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}


def test_every_command_that_touches_nodes_takes_limit() -> None:
    """Walks the command tree: a command reading an inventory selects nodes with the shared --limit (same
    metavar and help everywhere) unless NO_LIMIT says why not; NO_LIMIT names only such commands."""
    exempt = []
    for path, command in commands():
        opts = _opts(command)
        if "--limit" in opts:
            (limit,) = [p for p in command.params if "--limit" in getattr(p, "opts", [])]
            assert limit.metavar == "NODES" and limit.help == LIMIT_HELP, path
        elif "--inventory" in opts:
            assert path in NO_LIMIT, f"rackctl {' '.join(path)} reads an inventory but has no --limit"
            exempt.append(path)
    assert sorted(exempt) == sorted(NO_LIMIT)  # none stale: each still reads an inventory without --limit
    for path in (("apply",), ("driver", "upgrade"), ("triton", "deliver"), ("up",), ("status",), ("discover",)):
        assert "--limit NODES" in help_of(path), path


def test_every_command_offers_json() -> None:
    for path, command in commands():
        if not isinstance(command, click.Group):
            assert "--json" in _opts(command), f"rackctl {' '.join(path)}"


def test_every_environment_variable_of_an_option_shows_in_its_help() -> None:
    shown = 0
    for path, command in commands():
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                assert param.show_envvar, (path, param.name)
                assert f"env var: {param.envvar}" in help_of(path), (path, param.envvar)
                shown += 1
    assert shown >= 40  # -i and --state-dir on most commands


ROOT = Path(__file__).resolve().parents[2]
READS = re.compile(r'(?:environ(?:\.get)?\(|environ\[|getenv\(|envvar=|_ENV = )\s*"(RACKCTL_[A-Z_]+)"')


def test_every_environment_variable_rackctl_reads_is_documented() -> None:
    """Every RACKCTL_* variable the product's code reads is in ``rackctl --help`` and in docs/operators.md."""
    names = {m for f in (ROOT / "bootstrap").rglob("*.py") for m in READS.findall(f.read_text())}
    assert {"RACKCTL_INVENTORY", "RACKCTL_SSH_KEY", "RACKCTL_ANSIBLE_STRATEGY"} <= names  # the scan finds them
    top, guide = help_of(()), (ROOT / "docs" / "operators.md").read_text()
    for name in sorted(names):
        assert name in top, name
        assert f"`{name}`" in guide, name


def _invoke(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    return result.exit_code, json.loads(result.output)


def test_apply_limit_keeps_only_the_selected_nodes_changes(tmp_path) -> None:
    state = str(tmp_path / "state")
    code, everything = _invoke("apply", "--plan", "-i", SAMPLE, "--state-dir", state)
    assert code == 0 and len(everything["plan"]["nodes"]) == 5
    code, out = _invoke("apply", "--plan", "-i", SAMPLE, "--state-dir", state, "--limit", "gpu-*")
    assert code == 0, out
    assert [n["node"] for n in out["plan"]["nodes"]] == ["gpu-l40s-01", "gpu-xe9680-01"]
    assert out["plan"]["contacted"] == ["gpu-l40s-01", "gpu-xe9680-01"]
    code, out = _invoke("apply", "--plan", "-i", SAMPLE, "--state-dir", state, "--limit", "gpu-l4os-01")
    assert code == 2 and out["errors"][0]["path"] == "--limit" and "gpu-l40s-01" in out["errors"][0]["fix"]


def test_driver_upgrade_limit_on_the_host_path_and_refused_on_the_operators(tmp_path) -> None:
    data = yaml.safe_load(Path(SAMPLE).read_text())
    data["cluster"]["gpu_driver"] = "host"
    host = tmp_path / "host.yml"
    host.write_text(yaml.safe_dump(data, sort_keys=False))
    args = ("driver", "upgrade", "--version", "580.95.05", "--plan", "--state-dir", str(tmp_path / "s"))
    code, out = _invoke(*args, "-i", str(host), "--limit", "gpu-xe9680-01")
    assert code == 0, out
    assert list(out["plan"]["steps"]) == ["gpu-xe9680-01"]
    assert [n for batch in out["plan"]["batches"] for n in batch] == ["gpu-xe9680-01"]
    code, out = _invoke(*args, "-i", str(host), "--limit", "head-01")
    assert code == 2 and "no GPU" in out["errors"][0]["message"]
    code, out = _invoke(*args, "-i", SAMPLE, "--limit", "gpu-xe9680-01")
    assert code == 2 and out["errors"][0]["fix"] == "drop --limit"


def test_every_output_path_is_o_out() -> None:
    outputs = []
    for path, command in commands():
        for param in command.params:
            opts = set(getattr(param, "opts", []))
            if opts & {"--out", "--output", "-o"}:
                outputs.append(path)
                assert {"-o", "--out"} <= opts, f"rackctl {' '.join(path)}: {sorted(opts)}"
        if path in outputs:
            assert "--output" not in help_of(path), path
        shorts = [o for p in command.params for o in getattr(p, "opts", []) if o == "-o"]
        assert len(shorts) <= 1, path
    assert ("init",) in outputs and ("render", "cluster") in outputs and ("triton", "render") in outputs


def test_init_still_accepts_the_old_output_spelling(tmp_path) -> None:
    for flag in ("-o", "--out", "--output"):
        target = tmp_path / f"{flag.strip('-')}.yml"
        result = CliRunner().invoke(cli, ["init", flag, str(target), "--json"])
        assert result.exit_code == 0 and target.is_file(), result.output
