"""``rackctl triton deliver``: copy each model's files from ``source_dir`` to the GPU nodes serving it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, environment_for, err_console, escape, handle_errors
from bootstrap.errors import EXIT_FAILED
from bootstrap.inband.access import node_access
from bootstrap.inventory.loader import load_inventory
from bootstrap.triton.delivery_run import Track, run_delivery

#: Piped, a line per task at each tenth of its bytes.
STEPS = 10


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


@contextmanager
def _tracker(quiet: bool) -> Iterator[Track]:
    """Progress per task (hashing the source, each node's copy): bars with bytes and rate on a terminal;
    piped, a line stamped with the time since the start at each tenth; nothing with ``--json``."""
    if quiet:
        yield lambda _label, _total: lambda _n: None
        return
    if err_console.is_terminal:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=err_console
        ) as progress:

            def bar(label: str, total: int) -> Callable[[int], None]:
                task = progress.add_task(escape(label), total=total)
                return lambda n: progress.advance(task, n)

            yield bar
        return
    start = time.monotonic()

    def lines(label: str, total: int) -> Callable[[int], None]:
        state = {"done": 0, "said": -1}

        def advance(n: int) -> None:
            state["done"] += n
            step = min(state["done"] * STEPS // total if total else STEPS, STEPS)  # a re-sent file goes past
            if step > state["said"]:
                state["said"] = step
                spent = int(time.monotonic() - start)
                err_console.print(
                    f"[{spent // 60}:{spent % 60:02d}] {escape(label)}: {step * 100 // STEPS}% of {_size(total)}"
                )

        advance(0)
        return advance

    yield lines


def _print(data: dict[str, Any]) -> None:
    verb = "would copy" if data["plan"] else "copied"
    for model in data["models"]:
        name = escape(model["model"])
        if model["skipped"]:
            console.print(f"{name}: nothing to copy")
            console.print(f"  {escape(model['skipped'])}")
            if model["version_note"]:
                console.print(f"  version: {escape(model['version_note'])}")
            if model["dest"] and model["nodes"]:
                console.print(f"  {'checks' if data['plan'] else 'checked'} {escape(model['dest'])}")
                console.print(f"  on   {', '.join(model['nodes'])}")
            for check in model.get("checked", []):
                state = f"{check['files']} file(s), {_size(check['bytes'])}" if check["ok"] else "MISSING"
                console.print(f"  {check['node']}: {state}")
                if check["error"]:
                    console.print(f"    {escape(check['error'])}")
            continue
        console.print(f"{name}: {verb} {model['files']} file(s), {model['bytes'] / 1e9:.2f} GB")
        console.print(f"  from {escape(model['source'])}")
        console.print(f"  to   {escape(model['dest'])}@{model['version']} (version {model['version']})")
        console.print(f"  on   {', '.join(model['nodes'])}")
        if data["plan"]:
            console.print("  a node gets only the files whose size or sha256 differ")
            if data["prune"]:
                console.print("  files a node holds there that the source lacks are removed, and old versions")
        for planned in model.get("node_plans", []):
            _print_node_plan(planned)
        for node in model.get("results", []):
            _print_node(node)


def _print_node_plan(node: dict[str, Any]) -> None:
    """One node's line of the plan (from the record of earlier deliveries; the node is not asked)."""
    send = f"new: sends {len(node['send_files'])} file(s), {_size(node['send_bytes'])}"
    if node["dest_version"] in node["held"]:
        send = "holds it already: nothing to send"
    elif node["held"]:
        send += f", links the rest from {node['held'][0]}"
    console.print(f"  {node['node']}: {send}")
    _print_versions(node, "would remove")


def _print_versions(node: dict[str, Any], removed: str) -> None:
    console.print(f"    keeps {', '.join(node['versions_kept'])}")
    if node["versions_removed"]:
        console.print(f"    {removed} {', '.join(node['versions_removed'])}")
    if node["versions_old"]:
        console.print(f"    older, kept: {', '.join(node['versions_old'])} (--prune removes them)")


def _print_node(node: dict[str, Any]) -> None:
    state = "ok" if node["ok"] else f"FAILED: {escape(node['error'] or '')}"
    resumed = f", resumed {len(node['resumed_from'])}" if node["resumed_from"] else ""
    console.print(
        f"  {node['node']}: {state}; sent {len(node['sent_files'])} file(s), "
        f"{node['sent_bytes'] / 1e9:.2f} GB, {node['unchanged']} unchanged{resumed}"
    )
    if node["versions_kept"]:
        _print_versions(node, "removed")
    if node["pruned"]:
        console.print(f"    removed {len(node['pruned'])} file(s) the source lacks")
    if node["extra_files"]:
        shown = ", ".join(escape(rel) for rel in node["extra_files"][:3])
        more = f" and {len(node['extra_files']) - 3} more" if len(node["extra_files"]) > 3 else ""
        console.print(f"    {len(node['extra_files'])} file(s) the source lacks: {shown}{more}")
        console.print("    (a loader may read them; --prune removes them)")


@click.command("deliver")
@flags.inventory
@flags.state_dir
@flags.limit
@click.option("--model", "only", multiple=True, help="Deliver only this model (repeatable).")
@click.option(
    "--prune",
    is_flag=True,
    help="Remove files a node holds in the version's directory that the source lacks, and versions older than "
    "the delivered one and the one before it (never the one the rendered Deployment uses).",
)
@flags.plan("Show the version, what would be copied where and which versions stay; copy nothing, contact no node.")
@flags.json
@handle_errors()
def deliver_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path,
    state_dir: Path,
    limit: str | None,
    only: tuple[str, ...],
    prune: bool,
    plan_only: bool,
    as_json: bool,
) -> None:
    """Copy each model's source_dir to the GPU nodes that serve it (SSH, parallel, resumable, verified).

    The files are checked against the model's declaration first (TP/PP, precision, GPU, release). Each
    delivery is a version: <model dir>@<id> on the node, id from the files' sha256; a new version starts from
    the previous one's files (hard links), so a node gets only the files whose sha256 differs. `rackctl triton
    render` points the Deployment at the version every serving node holds. --limit: only to the selected nodes
    (a model none of whose nodes is selected is skipped). --plan hashes the source to name the version and
    reads the record of earlier deliveries; it contacts no node.
    """
    inventory = load_inventory(inventory_path)
    with _tracker(as_json) as track:  # the plan hashes the source too, to name the version
        data = run_delivery(
            inventory,
            inventory_path,
            only,
            limit=limit,
            state_dir=state_dir,
            plan_only=plan_only,
            prune=prune,
            access=lambda: node_access(inventory, state_dir, environment_for(inventory)),
            track=track,
        )
    emit(data, as_json, _print)
    if not data["ok"]:
        sys.exit(EXIT_FAILED)
