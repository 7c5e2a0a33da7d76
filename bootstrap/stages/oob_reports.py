"""What ``rackctl discover`` and ``rackctl bios apply`` report after their stage ran: per node, the journal's
state, the stage's verdict and what the run recorded (facts, the BIOS job); the CLI only renders it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from bootstrap.environment import Environment
from bootstrap.inventory import Inventory
from bootstrap.journal import Journal
from bootstrap.oob import FACTS_STAGE, check_facts, desired_bios, mac_diff, policy_for, targets_for
from bootstrap.selection import split_csv
from bootstrap.stages.base import RunOptions
from bootstrap.stages.runner import RunOutcome, plan, select
from redfish_tools.bios import plan_bios
from redfish_tools.discover import DiscoveredNode, Gpu, Nic
from redfish_tools.fleet import Progress, run_fleet


def node_outcome(outcome: RunOutcome, node: str) -> dict[str, Any]:
    """``node``'s result in the run's (only) stage; ``not_run`` with the run's message when it has none."""
    stage = outcome.stages[0] if outcome.stages else None
    return (stage.nodes if stage else {}).get(node) or {"status": "not_run", "message": outcome.message}


def _row(outcome: RunOutcome, name: str, value: Any) -> dict[str, Any]:
    result = node_outcome(outcome, name)
    return {
        "name": name,
        "ok": result["status"] in ("completed", "skipped"),
        "status": result["status"],
        "state": outcome.nodes[name],
        "message": result.get("message", ""),
        "value": value,
    }


def discover_report(inventory: Inventory, state_dir: Path, outcome: RunOutcome) -> dict[str, Any]:
    """Per node: journal state, the stage's verdict and this run's facts; mismatches and the MAC diff."""
    nodes: list[dict[str, Any]] = []
    mismatches: dict[str, list[dict[str, Any]]] = {}
    diff: list[dict[str, Any]] = []
    with Journal(state_dir, readonly=True) as journal:
        for name in outcome.nodes:
            result = node_outcome(outcome, name)
            # facts are this run's unless the stage could not read the BMC (its message starts "BMC: ")
            fresh = result["status"] == "completed" or (
                result["status"] == "failed" and not str(result.get("message", "")).startswith("BMC: ")
            )
            raw = journal.latest_facts(name).get(FACTS_STAGE) if fresh else None
            node = inventory.node(name)
            if raw is not None and node is not None:
                facts = facts_from_dict(raw)
                mismatches[name] = check_facts(inventory, node, facts)
                diff.extend(mac_diff(inventory, node, facts))
            nodes.append(_row(outcome, name, raw))
    return {
        "ok": outcome.ok,
        "run": outcome.run_id,
        "message": outcome.message,
        "nodes": nodes,
        "mismatches": mismatches,
        "mac_diff": diff,
        "facts_store": "journal",
    }


def facts_from_dict(raw: dict[str, Any]) -> DiscoveredNode:
    """The journalled facts back as :class:`DiscoveredNode` (the parts the inventory checks read)."""
    simple: dict[str, Any] = {k: raw.get(k) for k in ("bmc", "service_tag", "manufacturer", "model", "power_state")}
    return DiscoveredNode(
        **simple,
        nics=[Nic(**nic) for nic in raw.get("nics", [])],
        gpus=[Gpu(**gpu) for gpu in raw.get("gpus", [])],
    )


def bios_apply_report(state_dir: Path, outcome: RunOutcome) -> dict[str, Any]:
    """Per node: journal state, the stage's verdict and the run's last ``bios-profile`` step (its job)."""
    nodes = []
    with Journal(state_dir, readonly=True) as journal:
        for name in outcome.nodes:
            steps = [s for s in journal.steps(node=name, run_id=outcome.run_id) if s.step == "bios-profile"]
            nodes.append(_row(outcome, name, steps[-1].detail if steps else None))
    return {"ok": outcome.ok, "applied": True, "run": outcome.run_id, "message": outcome.message, "nodes": nodes}


def as_plain(value: Any) -> Any:
    """A fleet result's value for ``--json``: its ``as_dict()`` where it has one."""
    return value.as_dict() if hasattr(value, "as_dict") else value


def bios_plan_report(
    inventory: Inventory,
    state_dir: Path,
    limit: str | None,
    *,
    environment: Environment,
    progress: Callable[[list[str]], AbstractContextManager[Progress | None]],
) -> dict[str, Any]:
    """The bios stage's plan (journal under ``state_dir``) with each runnable node's attribute changes, read
    from its BMC; ``progress`` is entered with the nodes about to be read. Nodes the stage would not run on are
    ``skip`` with the reason. Changes nothing."""
    selection = select(inventory, stages=["bios"], limit=split_csv(limit), force=True)
    planned = plan(inventory, state_dir, selection, RunOptions(dry_run=True, environment=environment))
    stage = planned["stages"][0]
    to_run = [n for n in inventory.nodes if n.hostname in stage["nodes_to_run"]]
    wanted = {n.hostname: desired_bios(inventory, n) for n in to_run}
    with progress([n.hostname for n in to_run]) as on_result:
        results = run_fleet(
            targets_for(inventory, to_run),
            lambda conn: plan_bios(conn, wanted[conn.target.name]),
            policy=policy_for(state_dir),
            progress=on_result,
        )
    by_name = {r.name: r for r in results}
    skipped = {a["node"]: a["skip"] for a in stage["actions"] if a.get("skip")}
    nodes = []
    for name in selection.nodes:
        if name in by_name:
            nodes.append({**by_name[name].as_dict(as_plain), "status": "run"})
        else:
            nodes.append({"name": name, "ok": True, "status": "skip", "skip": skipped.get(name, ""), "value": None})
    return {
        "ok": all(r.ok for r in results),
        "applied": False,
        "dry_run": True,
        "nodes": nodes,
        "node_states": planned["nodes"],
    }
