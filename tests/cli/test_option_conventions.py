"""One convention for the CLI's options, checked on every command of the real command tree: previews are
``--plan`` (``--dry-run`` a hidden alias that still works), and the environment variables show in ``--help``."""

from __future__ import annotations

from collections.abc import Iterator

import click
from click.testing import CliRunner

from bootstrap.cli import cli


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
    sample = "inventory/examples/dvd-inference.yml"
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
