"""``rackctl triton deliver``: copy each model's files from ``source_dir`` to the GPU nodes serving it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from bootstrap.cli.common import (
    console,
    emit,
    environment_for,
    err_console,
    escape,
    handle_errors,
    inventory_option,
    json_option,
    limit_option,
    plan_option,
    state_dir_option,
)
from bootstrap.errors import EXIT_FAILED, InvalidInput, Problem
from bootstrap.inband.access import node_access
from bootstrap.inventory.loader import load_inventory
from bootstrap.selection import match_nodes, split_csv
from bootstrap.triton.deliver import (
    ModelPlan,
    check_before_copy,
    check_limit,
    deliver_model,
    plan_model,
    source_files,
)


def _plan_dict(plan: ModelPlan, files: int | None = None, size: int | None = None) -> dict[str, Any]:
    return {
        "model": plan.model,
        "source": str(plan.source) if plan.source else None,
        "dest": plan.dest,
        "nodes": list(plan.nodes),
        "skipped": plan.skipped,
        "files": files,
        "bytes": size,
    }


def _print(data: dict[str, Any]) -> None:
    verb = "would copy" if data["plan"] else "copied"
    for model in data["models"]:
        name = escape(model["model"])
        if model["skipped"]:
            console.print(f"{name}: nothing to deliver: {escape(model['skipped'])}")
            continue
        console.print(f"{name}: {verb} {model['files']} file(s), {model['bytes'] / 1e9:.2f} GB")
        console.print(f"  from {escape(model['source'])}")
        console.print(f"  to   {escape(model['dest'])}")
        console.print(f"  on   {', '.join(model['nodes'])}")
        if data["plan"]:
            console.print("  a node gets only the files whose size or sha256 differ")
        for node in model.get("results", []):
            state = "ok" if node["ok"] else f"FAILED: {escape(node['error'] or '')}"
            resumed = f", resumed {len(node['resumed_from'])}" if node["resumed_from"] else ""
            console.print(
                f"  {node['node']}: {state}; sent {len(node['sent_files'])} file(s), "
                f"{node['sent_bytes'] / 1e9:.2f} GB, {node['unchanged']} unchanged{resumed}"
            )


@click.command("deliver")
@inventory_option
@state_dir_option
@limit_option
@click.option("--model", "only", multiple=True, help="Deliver only this model (repeatable).")
@plan_option("Show what would be copied where; copy nothing, contact no node.")
@json_option
@handle_errors()
def deliver_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path, state_dir: Path, limit: str | None, only: tuple[str, ...], plan_only: bool, as_json: bool
) -> None:
    """Copy each model's source_dir to the GPU nodes that serve it (SSH, parallel, resumable, verified).

    The files are checked against the model's declaration first (TP/PP, precision, GPU, release); a node
    gets only the files whose sha256 differs from what it holds. --limit: only to the selected nodes (a model
    none of whose nodes is selected is skipped).
    """
    inventory = load_inventory(inventory_path)
    specs = [m for m in inventory.models if not only or m.name in only]
    unknown = sorted(set(only) - {m.name for m in inventory.models})
    if unknown or not specs:
        names = ", ".join(m.name for m in inventory.models) or "(none)"
        raise InvalidInput(
            f"no model {', '.join(unknown) or 'declared'} in {inventory_path}",
            problems=[Problem("--model", f"unknown model {', '.join(unknown)}", f"use one of {names}")],
        )
    chosen = None if limit is None else match_nodes(inventory, split_csv(limit))
    plans = [plan_model(inventory, spec, chosen) for spec in specs]
    if chosen is not None:
        check_limit(plans, split_csv(limit))
    check_before_copy(specs, plans)
    listings = {p.model: source_files(p.source) for p in plans if p.source is not None and not p.skipped}
    models = [
        _plan_dict(p, len(listings.get(p.model, [])), sum(f.size for f in listings.get(p.model, []))) for p in plans
    ]
    if plan_only:
        emit({"ok": True, "plan": True, "models": models}, as_json, _print)
        return
    access = node_access(inventory, state_dir, environment_for(inventory))
    lock = threading.Lock()
    ok = True
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err_console,
        disable=as_json,
    ) as progress:
        for plan, model in zip(plans, models, strict=True):
            if plan.source is None or plan.skipped:
                continue
            tasks = {n: progress.add_task(f"{plan.model} → {n}", total=model["bytes"]) for n in plan.nodes}

            def advance(node: str, sent: int, tasks: dict[str, Any] = tasks) -> None:
                with lock:
                    progress.advance(tasks[node], sent)

            results = deliver_model(plan, access, advance, listings[plan.model])
            model["results"] = [r.as_dict() for r in results]
            ok = ok and all(r.error is None for r in results)
    emit({"ok": ok, "plan": False, "models": models}, as_json, _print)
    if not ok:
        sys.exit(EXIT_FAILED)
