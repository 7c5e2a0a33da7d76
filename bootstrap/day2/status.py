"""``rackctl status``: one row per node from the BMCs (fanned out), the journal and Kubernetes. Reads only.

Every cell is a :class:`Cell`: ``ok`` (a value), ``unavailable`` (nothing to show yet, with the reason:
"not deployed: the nvidia stage has not run") or ``degraded`` (the source failed: the BMC did not answer,
with the error). A cell is never silently empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.inventory.models import Inventory, Node
from bootstrap.inventory.profiles import version_tuple
from bootstrap.journal.store import Journal, StepRecord
from bootstrap.kube import Cluster
from bootstrap.oob import policy_for, targets_for
from redfish_tools.connection import BmcConnection, ConnectionPolicy
from redfish_tools.fleet import BmcResult, run_fleet
from redfish_tools.status import read_status

#: One node's BMC reads (login, system, manager, logout) are cut after this long.
STATUS_POLICY = ConnectionPolicy(deadline_s=30.0, retries=1, request_deadline_s=20.0)
#: the journal facts stage in which the nvidia stage records the driver it installed
DRIVER_FACTS = "nvidia"
COLUMNS = ("power", "health", "lifecycle", "firmware", "driver", "kubernetes", "gpus")


@dataclass(frozen=True)
class Cell:
    """One value of the table: ``status`` is ok | unavailable | degraded."""

    status: str
    value: Any = None
    reason: str = ""
    #: the value in a word, for a table too narrow for it (``below`` for "below baseline: BIOS 1.2 < 1.6");
    #: empty when the value is short already
    short: str = ""
    #: whether the word needs the value written whole below the table (``baseline`` says enough: its
    #: versions are for ``--wide``)
    refer: bool = True

    def as_dict(self) -> dict[str, Any]:
        out = {"status": self.status, "value": self.value, "reason": self.reason}
        if self.short:
            out |= {"short": self.short, "refer": self.refer}
        return out

    def text(self) -> str:
        if self.status == "ok":
            return str(self.value)
        return f"{self.status}: {self.reason}"


def ok(value: Any, short: str = "", *, refer: bool = True) -> Cell:
    return Cell("ok", value, short=short, refer=refer)


def unavailable(reason: str) -> Cell:
    return Cell("unavailable", None, reason)


def degraded(reason: str) -> Cell:
    return Cell("degraded", None, reason)


def read_bmc(conn: BmcConnection) -> dict[str, Any]:
    """Power, health rollup and BIOS/iDRAC versions of one node (two fresh GETs, :mod:`redfish_tools.status`)."""
    status = read_status(conn)
    return {"power": status.power, "health": status.health, "bios": status.bios, "idrac": status.idrac}


def firmware_cell(inventory: Inventory, node: Node, bmc: BmcResult[dict[str, Any]]) -> Cell:
    """Installed BIOS/iDRAC against the model's baseline."""
    if not bmc.ok or bmc.value is None:
        return degraded(_error_text(bmc))
    found = {"bios": bmc.value.get("bios"), "idrac": bmc.value.get("idrac")}
    shown = f"BIOS {found['bios'] or '?'}, iDRAC {found['idrac'] or '?'}"
    baseline = inventory.firmware.baseline.get(node.model)
    if baseline is None:
        return ok(f"{shown} (no baseline for {node.model})", "unchecked")
    behind = []
    for part, label in (("bios", "BIOS"), ("idrac", "iDRAC")):
        want, have = getattr(baseline, part), found[part]
        if want and (not have or version_tuple(str(have)) < version_tuple(want)):
            behind.append(f"{label} {have or 'unknown'} < {want}")
    if behind:
        return ok(f"below baseline: {'; '.join(behind)}", "below")
    return ok(f"{shown} (at baseline)", "baseline", refer=False)


def _error_text(result: BmcResult[Any]) -> str:
    error = result.error or {}
    return f"BMC not answering ({error.get('kind', 'error')}): {error.get('message', 'no detail')}"


def collect(
    inventory: Inventory,
    nodes: list[Node],
    state_dir: Path,
    cluster: Cluster,
    *,
    policy: ConnectionPolicy | None = None,
) -> dict[str, Any]:
    """The status table as data: ``{"ok", "nodes": [{"node", "role", <column>: cell...}], "kubernetes"}``."""
    results = run_fleet(targets_for(inventory, nodes), read_bmc, policy=policy_for(state_dir, policy or STATUS_POLICY))
    by_node = {r.name: r for r in results}
    with Journal(state_dir, readonly=True) as journal:
        states = journal.nodes()
        driver_facts = {n.hostname: journal.latest_facts(n.hostname).get(DRIVER_FACTS) for n in nodes}
        rendered = {
            n.hostname: {r.stage: r for r in journal.not_applied(n.hostname)} if n.hostname in states else {}
            for n in nodes
        }
    kube_nodes: dict[str, Any] = {}
    kube_error = ""
    if cluster.deployed:
        try:
            kube_nodes = cluster.nodes()
        except Exception as exc:  # the API server not answering is degraded data, not a crash
            kube_error = f"Kubernetes API not answering: {exc}"
    rows = []
    for node in nodes:
        bmc = by_node[node.hostname]
        state = states.get(node.hostname)
        row: dict[str, Any] = {"node": node.hostname, "role": node.role.value, "model": node.model}
        if bmc.ok and bmc.value is not None:
            row["power"] = ok(bmc.value.get("power") or "unknown")
            row["health"] = ok(bmc.value.get("health") or "unknown")
        else:
            row["power"] = row["health"] = degraded(_error_text(bmc))
        row["lifecycle"] = (
            ok(state.state.value) if state else unavailable("not in the journal: `rackctl up` registers it")
        )
        row["firmware"] = firmware_cell(inventory, node, bmc)
        not_applied = rendered[node.hostname]
        row["driver"] = _driver_cell(inventory, node, driver_facts.get(node.hostname), not_applied.get("nvidia"))
        row["kubernetes"], row["gpus"] = _kube_cells(node.hostname, cluster, kube_nodes, kube_error)
        if not cluster.deployed and "kubernetes" in not_applied:
            cell = not_applied_cell(not_applied["kubernetes"])
            row["kubernetes"], row["gpus"] = cell, cell
        row["not_applied"] = sorted(not_applied)
        rows.append(row)
    out_rows = [{k: (v.as_dict() if isinstance(v, Cell) else v) for k, v in row.items()} for row in rows]
    degraded_nodes = [
        r["node"] for r in rows if any(isinstance(v, Cell) and v.status == "degraded" for v in r.values())
    ]
    return {
        "ok": not degraded_nodes,
        "nodes": out_rows,
        "degraded": degraded_nodes,
        "kubernetes": {"deployed": cluster.deployed, "reason": kube_error or cluster.reason},
    }


def not_applied_cell(record: StepRecord) -> Cell:
    """Unavailable, saying the stage only rendered and validated (its run and artefacts), nothing applied."""
    where = record.detail.get("artefacts")
    return unavailable(
        f"not deployed: the {record.stage} stage only rendered and validated (run {record.run}"
        + (f", {where}" if where else "")
        + "), nothing applied"
    )


def _driver_cell(
    inventory: Inventory, node: Node, facts: dict[str, Any] | None, rendered: StepRecord | None = None
) -> Cell:
    if inventory.gpus_of(node).count == 0:
        return ok("no GPUs")
    if facts and facts.get("driver_version"):
        return ok(str(facts["driver_version"]))
    if rendered is not None:
        return not_applied_cell(rendered)
    return unavailable("not deployed: the nvidia stage has not run on this node")


def _kube_cells(name: str, cluster: Cluster, kube_nodes: dict[str, Any], error: str) -> tuple[Cell, Cell]:
    if not cluster.deployed:
        return unavailable(cluster.reason), unavailable(cluster.reason)
    if error:
        return degraded(error), degraded(error)
    kn = kube_nodes.get(name)
    if kn is None:
        return unavailable("not a Kubernetes node (not joined)"), unavailable("not a Kubernetes node (not joined)")
    readiness = ("Ready" if kn.ready else "NotReady") + (", cordoned" if kn.unschedulable else "")
    return ok(readiness, "cordoned" if kn.unschedulable else ""), ok(kn.allocatable_gpus)
