"""What ``rackctl discover`` and ``rackctl bios apply`` report after their stage ran: per node, the journal's
state, the stage's verdict and what the run recorded (facts, the BIOS job); the CLI only renders it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bootstrap.inventory import Inventory
from bootstrap.journal import Journal
from bootstrap.stages.oob import FACTS_STAGE, check_facts, mac_diff
from bootstrap.stages.runner import RunOutcome
from redfish_tools.discover import DiscoveredNode, Gpu, Nic


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
