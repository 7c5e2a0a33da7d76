"""One convention for the CLI's options, checked on every command of the real command tree: previews are
``--plan`` (``--dry-run`` a hidden alias that still works), and the environment variables show in ``--help``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import click
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli

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
    for path, command in commands():
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


def test_every_command_that_touches_nodes_takes_limit() -> None:
    for path in (("apply",), ("driver", "upgrade"), ("up",), ("plan",), ("status",), ("discover",)):
        assert "--limit NODES" in help_of(path), path


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
