"""One ``rackctl triton deliver`` run: select the models, plan, check the files, hash, copy, sum up.

A model without ``source_dir`` (its files placed on the nodes beforehand) is checked on its nodes instead:
the directory is there and holds a ``config.json``; nothing is changed.

Each delivered model goes to the version its files make (:mod:`bootstrap.triton.weights_version`); the run
records what each node holds in the state dir (what the render points the Deployment at, and what the next
``--plan`` reads: the plan hashes the source to name the version, and contacts no node).

The command parses its options, calls :func:`run_delivery` and renders the dict it returns. Progress goes
through ``track(label, total)``, which returns the callback to tell each block of bytes done: the command
shows it as bars on a terminal or stamped lines in a log.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.journal.run import journal_run
from bootstrap.journal.store import Journal
from bootstrap.selection import match_nodes, split_csv
from bootstrap.triton.deliver import (
    ModelPlan,
    NodeDelivery,
    check_before_copy,
    check_limit,
    check_placed,
    deliver_model,
    plan_model,
)
from bootstrap.triton.source_listing import SourceFile, source_files, source_sizes
from bootstrap.triton.weights_version import (
    KEEP,
    choose_versions,
    in_use,
    load_record,
    record_delivery,
    save_record,
    version_id,
    why_unversioned,
)

if TYPE_CHECKING:
    from bootstrap.inband.access import NodeAccess

#: ``track(label, total bytes)`` → the callback told each block of bytes done.
Track = Callable[[str, int], Callable[[int], None]]


def _model_dict(spec: ModelSpec, plan: ModelPlan, sizes: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "model": plan.model,
        "source": str(plan.source) if plan.source else None,
        "dest": plan.dest,
        "nodes": list(plan.nodes),
        "skipped": plan.skipped,
        "files": len(sizes) if plan.source else None,
        "bytes": sum(size for _, size in sizes) if plan.source else None,
        # the version id once the source is hashed; why there is none for a model rackctl does not version
        "version": None,
        "version_note": why_unversioned(spec),
    }


def _node_plan(entry: dict[str, Any], node: str, listing: list[SourceFile], vid: str, prune: bool) -> dict:
    """What delivering version ``vid`` would do on ``node``, from the record of earlier deliveries: what is
    sent (the files its newest version lacks), which versions stay and which go."""
    held: list[str] = entry.get("nodes", {}).get(node, [])
    base = {(rel, size, sha) for rel, size, sha in entry.get("files", {}).get(held[0], [])} if held else set()
    send = [] if vid in held else [f for f in listing if (f.rel, f.size, f.sha256) not in base]
    kept, old = choose_versions(vid, held, KEEP, in_use(entry))
    return {
        "node": node,
        "dest_version": vid,
        "held": held,
        "send_files": [f.rel for f in send],
        "send_bytes": sum(f.size for f in send),
        "versions_kept": kept,
        "versions_old": [] if prune else old,
        "versions_removed": old if prune else [],
    }


def select_models(inventory: Inventory, only: tuple[str, ...], inventory_path: Path) -> list[Any]:
    """The models named by ``--model`` (all when none is named); an unknown name is refused (exit 2)."""
    specs = [m for m in inventory.models if not only or m.name in only]
    unknown = sorted(set(only) - {m.name for m in inventory.models})
    if unknown or not specs:
        names = ", ".join(m.name for m in inventory.models) or "(none)"
        raise InvalidInput(
            f"no model {', '.join(unknown) or 'declared'} in {inventory_path}",
            problems=[Problem("--model", f"unknown model {', '.join(unknown)}", f"use one of {names}")],
        )
    return specs


def run_delivery(
    inventory: Inventory,
    inventory_path: Path,
    only: tuple[str, ...],
    *,
    limit: str | None,
    state_dir: Path,
    plan_only: bool,
    prune: bool,
    access: Callable[[], dict[str, NodeAccess]],
    track: Track,
) -> dict[str, Any]:
    """Plan (and unless ``plan_only``, run) the delivery of the selected models; the files of every model
    are checked before any node is contacted. ``access`` gives the nodes' SSH access when first needed.
    ``limit`` (``--limit``): only to the selected nodes. The node work is one journal run (``triton deliver
    <models>``, under the state dir's run lock)."""
    specs = select_models(inventory, only, inventory_path)
    chosen = None if limit is None else match_nodes(inventory, split_csv(limit))
    plans = [plan_model(inventory, spec, chosen) for spec in specs]
    if chosen is not None:
        check_limit(plans, split_csv(limit or ""))
    check_before_copy(specs, plans)
    sizes = {p.model: source_sizes(p.source) for p in plans if p.source is not None}
    models = [_model_dict(s, p, sizes.get(p.model, [])) for s, p in zip(specs, plans, strict=True)]
    listings: dict[str, list[SourceFile]] = {}
    for plan, model in zip(plans, models, strict=True):
        if plan.source is not None and plan.nodes:
            listings[plan.model] = source_files(plan.source, track(f"{plan.model}: sha256", model["bytes"]))
            model["version"] = version_id(listings[plan.model])
    record = load_record(state_dir)
    if plan_only:
        for plan, model in zip(plans, models, strict=True):
            if plan.model in listings:
                entry = record.get(plan.model, {})
                args = (listings[plan.model], model["version"], prune)
                model["node_plans"] = [_node_plan(entry, node, *args) for node in plan.nodes]
        return {"ok": True, "plan": True, "prune": prune, "models": models}
    placed = [p for p in plans if p.source is None and p.dest is not None and p.nodes]
    if not listings and not placed:
        return {"ok": True, "plan": False, "prune": prune, "models": models}
    command = f"triton deliver {' '.join(p.model for p in plans)}"
    with Journal(state_dir) as journal, journal_run(journal, command) as run:
        ok = _on_nodes(plans, models, listings, placed, access(), track, prune=prune, record=record)
        _record(state_dir, record, specs, plans, models, listings)
        run.end("completed" if ok else "failed", _summary(models))
    return {"ok": ok, "plan": False, "prune": prune, "models": models}


def _record(  # noqa: PLR0917 - the run's parts
    state_dir: Path,
    record: dict[str, Any],
    specs: list[ModelSpec],
    plans: list[ModelPlan],
    models: list[dict[str, Any]],
    listings: dict[str, list[SourceFile]],
) -> None:
    """Note what every node that took its version holds now (the render points at a version every serving
    node holds)."""
    for spec, plan, model in zip(specs, plans, models, strict=True):
        results = [r for r in model.get("results", []) if r["ok"]]
        if plan.model not in listings or not results:
            continue
        held = {r["node"]: [*r["versions_kept"], *r["versions_old"]] for r in results}
        serving = [*plan.nodes, *plan.limited_out]
        record_delivery(record, spec, model["version"], listings[plan.model], held, serving)
    save_record(state_dir, record)


def _summary(models: list[dict[str, Any]]) -> str:
    """The journal's line for the run: what failed where, or what was sent."""
    failed = [
        f"{m['model']} on {r['node']}: {r['error']}"
        for m in models
        for r in [*m.get("results", []), *m.get("checked", [])]
        if not r["ok"]
    ]
    if failed:
        return "; ".join(failed)
    sent = sum(r["sent_bytes"] for m in models for r in m.get("results", []))
    return f"sent {sent / 1e9:.2f} GB"


def _on_nodes(  # noqa: PLR0917 - the run's parts
    plans: list[ModelPlan],
    models: list[dict[str, Any]],
    listings: dict[str, list[SourceFile]],
    placed: list[ModelPlan],
    nodes: dict[str, NodeAccess],
    track: Track,
    *,
    prune: bool,
    record: dict[str, Any],
) -> bool:
    """Copy (or check) every model on its nodes, filling ``models`` with the per-node results; the versions
    each model's record names in use (rendered, or applied by the triton stage) are never removed."""
    ok = True
    lock = threading.Lock()  # the nodes' threads report through one tracker
    for plan, model in zip(plans, models, strict=True):
        if plan in placed:
            model["checked"] = [c.as_dict() for c in check_placed(plan, nodes)]
            ok = ok and all(c["ok"] for c in model["checked"])
        if plan.model not in listings:
            continue
        done = {n: track(f"{plan.model} → {n}", model["bytes"]) for n in plan.nodes}

        def advance(node: str, sent: int, done: dict[str, Callable[[int], None]] = done) -> None:
            with lock:
                done[node](sent)

        protect = in_use(record.get(plan.model, {}))
        results: list[NodeDelivery] = deliver_model(
            plan, nodes, advance, listings[plan.model], prune=prune, protect=protect
        )
        model["results"] = [r.as_dict() for r in results]
        ok = ok and all(r.error is None for r in results)
    return ok
