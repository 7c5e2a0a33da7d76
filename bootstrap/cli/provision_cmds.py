"""``rackctl provision [--limit NODES]``: the provision stage alone, journalled like ``rackctl up``.

A node already provisioned is not reinstalled unless ``--force``. ``--plan`` shows what would happen.
Positional NODES are a synonym of ``--limit`` (same grammar, :mod:`bootstrap.selection`).
"""

from __future__ import annotations

from pathlib import Path

import click

from bootstrap.cli import flags
from bootstrap.cli.common import environment_for, handle_errors
from bootstrap.cli.run_cmds import run_or_plan
from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory import load_inventory
from bootstrap.selection import split_csv
from bootstrap.stages.base import RunOptions
from bootstrap.stages.options import ProvisionOptions
from bootstrap.stages.runner import select


@click.command("provision")
@click.argument("nodes", nargs=-1)
@flags.limit
@click.option("--force", is_flag=True, help="Reinstall nodes that are already provisioned.")
@flags.plan("Show what would happen; change nothing.", "dry_run")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before rewriting disks.")
@click.option("--kernel", type=click.Path(path_type=Path, dir_okay=False), help="Deploy/installer kernel.")
@click.option("--initrd", type=click.Path(path_type=Path, dir_okay=False), help="Deploy ramdisk/installer initrd.")
@click.option("--image", type=click.Path(path_type=Path, dir_okay=False), help="Gzipped raw disk image (image).")
@click.option("--ssh-key", type=click.Path(path_type=Path, dir_okay=False), help="Admin private key for SSH.")
@click.option(
    "--ssh-user", default=None, help="Admin user to log in as (default: root for image, rackctl for autoinstall)."
)
@click.option("--callback-timeout", type=click.IntRange(10, 7200), default=900, show_default=True, help="Seconds.")
@click.option(
    "--parallel",
    type=click.IntRange(1, 1024),
    default=32,
    show_default=True,
    help="Nodes installing at once (the rest queue); see docs/provisioning.md for how to size it.",
)
@click.option("--ssh-timeout", type=click.IntRange(10, 7200), default=600, show_default=True, help="Seconds.")
@flags.inventory
@flags.state_dir
@flags.json
@handle_errors()
def provision_cmd(
    *,
    nodes: tuple[str, ...],
    limit: str | None,
    force: bool,
    dry_run: bool,
    yes: bool,
    kernel: Path | None,
    initrd: Path | None,
    image: Path | None,
    ssh_key: Path | None,
    ssh_user: str | None,
    callback_timeout: int,
    ssh_timeout: int,
    parallel: int,
    inventory_path: Path,
    state_dir: Path,
    as_json: bool,
) -> None:
    """PXE-install the --limit nodes (default: every node but the head node) and prove them over pinned SSH.

    NODES, if given, are the same selection as --limit (hostnames, globs, roles).
    """

    if nodes and limit is not None:
        raise InvalidInput(
            "give the nodes either as NODES or as --limit, not both",
            problems=[Problem("NODES", " ".join(nodes), f"use --limit {','.join(nodes)},{limit}")],
        )
    inventory = load_inventory(inventory_path)
    chosen = split_csv(nodes if nodes else limit)
    patterns = chosen or [n.hostname for n in inventory.nodes if n.role.value != "head"]
    selection = select(inventory, stages=["provision"], limit=patterns, force=force)
    overrides = ProvisionOptions(
        kernel=kernel,
        initrd=initrd,
        image=image,
        ssh_key=ssh_key,
        ssh_user=ssh_user,
        callback_timeout_s=float(callback_timeout),
        ssh_timeout_s=float(ssh_timeout),
        max_parallel=parallel,
    )
    options = RunOptions(
        dry_run=dry_run, force=force, yes=yes, provision=overrides, environment=environment_for(inventory)
    )
    command = "provision" + (f" --limit {','.join(chosen)}" if chosen else "") + (" --force" if force else "")
    run_or_plan(inventory, state_dir, selection, options, command=command, as_json=as_json)


def register(cli: click.Group) -> None:
    """Add ``rackctl provision`` to the root group."""
    cli.add_command(provision_cmd)
