"""``rackctl doctor``: what this machine has and lacks."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit
from bootstrap.doctor import GROUPS, run_doctor
from bootstrap.errors import EXIT_ENVIRONMENT


def register(cli: click.Group) -> None:
    """Add ``doctor``."""
    cli.add_command(doctor)


@click.command()
@click.option(
    "--require",
    "required",
    multiple=True,
    type=click.Choice(GROUPS),
    help="Groups that must be complete for exit 0 (default: core). Repeatable.",
)
@flags.json
def doctor(required: tuple[str, ...], as_json: bool) -> None:
    """Check Python, packages, the Ansible plugins the shipped roles use, the extras and lab tools.

    Says how to install what is missing and which commands need each extra. Groups: core (rackctl
    itself), cluster, triton and load-check (the extras ``rackctl[cluster]``, ``rackctl[triton]``,
    ``rackctl[load-check]``), lab and peer (tests).

    Exit 0 when the required groups are complete, 3 otherwise.
    """
    need = set(required or ("core",))
    findings = run_doctor()
    missing_required = [f for f in findings if not f.ok and f.check.group in need]
    data = {
        "ok": not missing_required,
        "required": sorted(need),
        "checks": [f.as_dict() for f in findings],
    }

    def human(d: dict) -> None:
        table = Table(title="rackctl doctor")
        for col in ("group", "name", "status", "found", "purpose"):
            table.add_column(col, overflow="fold")  # fold, never cut with an ellipsis
        for f in findings:
            status = (
                "[green]ok[/green]"
                if f.ok
                else ("[red]missing[/red]" if f.check.group in need else "[yellow]missing[/yellow]")
            )
            needed = f"; needed by {', '.join(f.check.needed_by)}" if f.check.needed_by else ""
            cells = (f.check.group, f.check.name, f.found, f.check.purpose + needed)
            group, name, found, purpose = (escape(c) for c in cells)  # `rackctl[cluster]` is no markup
            table.add_row(group, name, status, found, purpose)
        console.print(table)
        missing = [f for f in findings if not f.ok]
        if missing:
            # plain lines, never wrapped or cut by the terminal width: they are meant to be copied
            click.echo("to install what is missing:")
            for f in missing:
                click.echo(f"  {f.check.name}: {f.check.install}")
        console.print(
            "[green]ok[/green]" if d["ok"] else f"[red]{len(missing_required)} required piece(s) missing[/red]"
        )

    emit(data, as_json, human)
    if missing_required:
        raise SystemExit(EXIT_ENVIRONMENT)
