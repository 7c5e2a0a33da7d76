"""``rackctl runs``: the past runs of the journal, one line each, with what went wrong below."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, handle_errors
from bootstrap.run_history import past_runs

WIDTH = 80
INDENT = " " * 6
#: the most lines of a run's message shown (all of it is in --json and `rackctl journal show`)
MESSAGE_LINES = 4


def register(cli: click.Group) -> None:
    cli.add_command(runs)


def took(seconds: float | None) -> str:
    """``1h02m``, ``12m05s``, ``42s``; ``-`` for a run not finished."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    if whole >= 60:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole}s"


def _wrapped(text: str, first: str = "", limit: int | None = None) -> list[str]:
    lines = textwrap.wrap(text, WIDTH, initial_indent=INDENT + first, subsequent_indent=INDENT + "  ")
    if limit is not None and len(lines) > limit:
        lines = [*lines[: limit - 1], lines[limit - 1][: WIDTH - 1] + "…"]
    return lines


def _command_lines(start: str, command: str) -> list[str]:
    """``start`` and the command, wrapped at spaces and after commas (``--stages a,b,c``), never mid-word."""
    lines, line = [], start
    for piece in re.findall(r"[^\s,]*,|\S+|\s+", command):
        if len(line) + len(piece.rstrip()) > WIDTH and line.strip():
            lines.append(line.rstrip())
            line = INDENT + "  "
        line += piece.lstrip() if not line.strip() else piece
    return [*lines, line.rstrip()]


def _show(data: dict[str, Any]) -> None:
    if not data["runs"]:
        console.print("no run matches" if data["failed_only"] else "no run in the journal yet")
        return
    if data["total"] > len(data["runs"]) and not data["failed_only"]:
        console.print(f"the last {len(data['runs'])} of {data['total']} runs (--last for more):")
    status_width = max(11, *(len(r["status"]) for r in data["runs"]))
    head = f"{'run':>4}  {'started (UTC)':<19}  {'took':>6}  {'outcome':<{status_width}}  "
    console.print(escape(head + "command"))
    for run in data["runs"]:
        start = f"{run['id']:>4}  {run['started'][:19].replace('T', ' '):<19}  {took(run['duration_s']):>6}  "
        start += f"{run['status']:<{status_width}}  "
        lines = _command_lines(start, run["command"])
        if run["stages"]:
            lines += _wrapped(", ".join(run["stages"]), "stages: ")
        if run["failed_nodes"]:
            lines += _wrapped(", ".join(run["failed_nodes"]), f"failed ({len(run['failed_nodes'])}): ")
        if run["message"] and (run["failed_nodes"] or run["status"] not in ("completed", "running")):
            lines += _wrapped(" ".join(run["message"].split()), "", MESSAGE_LINES)
        if run["playbooks"]:
            lines += _wrapped(f"`rackctl logs {run['id']}` ({', '.join(run['playbooks'])})", "ansible output: ")
        for line in lines:
            console.print(escape(line))
    console.print("`rackctl logs RUN [NODE]` shows a run's Ansible output")


@click.command("runs")
@click.option(
    "--last",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="List only the newest N runs.",
)
@click.option("--failed", "failed_only", is_flag=True, help="Only runs that did not complete or left a node failed.")
@flags.state_dir
@flags.json
@handle_errors()
def runs(last: int, failed_only: bool, state_dir: Path, as_json: bool) -> None:
    """The past runs in the journal, oldest first: id, command, start, how long, outcome, failed nodes.

    Below each run: the stages it ran, the nodes it left failed and why, and whether it kept Ansible output
    (`rackctl logs RUN [NODE]` shows it).
    """
    found, total = past_runs(state_dir, last=last, failed_only=failed_only)
    data = {"ok": True, "total": total, "failed_only": failed_only, "runs": [r.as_dict() for r in found]}
    emit(data, as_json, _show)
