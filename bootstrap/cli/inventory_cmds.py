"""Inventory commands: ``validate``, ``init`` and ``inventory render``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, emit_json, environment_for, err_console, escape, handle_errors, say_item
from bootstrap.errors import EXIT_INVALID, InvalidInput, Problem
from bootstrap.fsutil import atomic_write_text, replace_tree
from bootstrap.inband.render import inventory_dir, render_for
from bootstrap.inventory import check_inventory
from bootstrap.inventory.environment_checks import machine_warnings
from bootstrap.resources import examples_dir


def _examples() -> dict[str, Path]:
    """Shipped sample inventories by name (and, in a checkout, the built-in lab's ``inventory/lab.yml``)."""
    folder = examples_dir().resolve()
    found = {file.stem: file for file in sorted(folder.glob("*.yml"))}
    lab = folder.parent / "lab.yml"
    if lab.is_file():
        found.setdefault("lab", lab)
    return found


def register(cli: click.Group) -> None:
    """Add the inventory commands."""
    cli.add_command(validate)
    cli.add_command(init)
    cli.add_command(inventory)


@click.command()
@flags.inventory
@flags.json
def validate(inventory_path: Path, as_json: bool) -> None:
    """Check the inventory; list every problem with its path, line and fix (exit 2 if any).

    Also warns (the file stays valid) when what it references is absent on this machine: a password
    variable not set, a password file missing or open to others, a CA bundle missing.
    """
    try:
        result = check_inventory(inventory_path)
    except InvalidInput as exc:
        problems = exc.problems or [Problem("", exc.message)]
        if as_json:
            emit_json({"ok": False, "errors": [p.as_dict() for p in problems], "warnings": []})
        else:
            say_item(err_console, "", f"{inventory_path}: {exc.message}", style="bold red")
            for problem in problems:
                say_item(err_console, "  [red]error[/red]   ", str(problem))
        raise SystemExit(EXIT_INVALID) from None
    inv = result.inventory
    warnings = [*result.warnings, *machine_warnings(inv)]
    data: dict[str, Any] = {
        "ok": True,
        "errors": [],
        "warnings": [w.as_dict() for w in warnings],
        "summary": {
            "cluster": inv.cluster.name,
            "nodes": len(inv.nodes),
            "control_planes": len(inv.control_planes),
            "workers": len(inv.workers),
            "gpus": sum(inv.gpus_of(n).count for n in inv.nodes),
            "profile": inv.cluster.software_profile,
        },
    }

    def human(d: dict[str, Any]) -> None:
        s = d["summary"]
        console.print(
            f"[green]ok[/green] {escape(str(inventory_path))}: cluster {s['cluster']}, {s['nodes']} nodes "
            f"({s['control_planes']} control planes, {s['workers']} workers, {s['gpus']} GPUs), "
            f"profile {s['profile']}"
        )
        for w in warnings:
            say_item(console, "  [yellow]warning[/yellow] ", str(w))

    emit(data, as_json, human)


@click.command()
@click.option("--example", "name", default="dvd-inference", show_default=True, help="Sample to write.")
@click.option(
    "-o",
    "--out",
    "--output",
    "output",
    cls=flags.AliasedOption,
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("inventory/cluster.yml"),
    show_default=True,
    help="Where to write it.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option("--list", "list_only", is_flag=True, help="List the samples and exit.")
@flags.json
@handle_errors()
def init(name: str, output: Path, force: bool, list_only: bool, as_json: bool) -> None:
    """Write a sample inventory to start from."""
    examples = _examples()
    if list_only:
        emit(
            {"ok": True, "examples": sorted(examples)},
            as_json,
            lambda d: console.print("\n".join(d["examples"])),
        )
        return
    if name not in examples:
        raise InvalidInput(
            f"no sample named {name!r}",
            problems=[Problem("--example", f"unknown sample {name!r}", "use one of " + ", ".join(sorted(examples)))],
        )
    if output.exists() and not force:
        raise InvalidInput(
            f"{output} already exists",
            problems=[Problem("--out", f"{output} exists", "choose another path or pass --force")],
        )
    atomic_write_text(output, examples[name].read_text(encoding="utf-8"))
    emit(
        {"ok": True, "written": str(output), "example": name},
        as_json,
        lambda d: console.print(
            f"wrote {d['written']} from sample {d['example']}; next: rackctl validate -i {d['written']}"
        ),
    )


@click.group()
def inventory() -> None:
    """Views derived from the inventory."""


@inventory.command("render")
@flags.inventory
@flags.state_dir
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Output directory (default: <state-dir>/ansible/inventory, the one every playbook run uses).",
)
@flags.plan("Show what would be written, write nothing.", "dry_run")
@flags.json
@handle_errors()
def render(inventory_path: Path, state_dir: Path, out: Path | None, dry_run: bool, as_json: bool) -> None:
    """Render the Ansible inventory (groups, layered group_vars, host and SSH connection vars), atomically.

    How each node is reached (address, user, key, pinned known_hosts, proxy) comes from the environment
    (``--env``; the host by default, the lab for a lab inventory).
    """
    inv = check_inventory(inventory_path).inventory
    environment = environment_for(inv)
    files = render_for(inv, state_dir, environment)
    target = out or inventory_dir(state_dir)
    if not dry_run:
        replace_tree(target, files)
    data = {"ok": True, "dry_run": dry_run, "out": str(target), "files": sorted(files)}

    def human(d: dict[str, Any]) -> None:
        table = Table(title=("would write" if dry_run else "wrote") + f" {target}")
        table.add_column("file")
        for f in d["files"]:
            table.add_row(f)
        console.print(table)

    emit(data, as_json, human)
