"""Out-of-band stages of ``rackctl up`` (discover, bios) and the inventory <-> redfish_tools glue.

Stage functions share one simple signature so the lead's orchestrator can call them directly::

    run_discover_stage(inventory, nodes, state_dir, progress=None) -> DiscoverReport
    run_bios_stage(inventory, nodes, state_dir, progress=None, *, reboot=False, dry_run=False) -> BiosReport

``nodes`` are :class:`bootstrap.inventory.Node` objects (use :func:`select_nodes` for ``--limit``),
``progress`` is called once per finished node with its :class:`redfish_tools.fleet.NodeResult`.
Neither raises for a node's failure: failures are in the report (``report.ok`` is False).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from bootstrap.errors import InvalidInput, Problem
from bootstrap.fsutil import atomic_write_text
from bootstrap.inventory.models import Inventory, Node
from bootstrap.inventory.secrets import resolve_bmc_credentials
from bootstrap.journal.store import Journal
from redfish_tools.bios import apply_bios, plan_bios
from redfish_tools.connection import BmcTarget, ConnectionPolicy
from redfish_tools.discover import NodeFacts, discover
from redfish_tools.fleet import NodeResult, run_fleet

Progress = Callable[[NodeResult[Any]], None]
FACTS_STAGE = "discover"
#: Discovery of one node (login, ~25 reads, logout) is cut after two minutes, whatever the BMC does.
DISCOVER_POLICY = ConnectionPolicy(deadline_s=120.0)


# -- inventory -> targets --------------------------------------------------------------------------
def select_nodes(inventory: Inventory, limit: str | None) -> list[Node]:
    """Nodes matching ``--limit`` (comma-separated hostnames, globs or roles); all when ``limit`` is empty."""
    if not limit:
        return list(inventory.nodes)
    chosen: list[Node] = []
    problems: list[Problem] = []
    for pattern in (p.strip() for p in limit.split(",") if p.strip()):
        hits = [n for n in inventory.nodes if fnmatch.fnmatch(n.hostname, pattern) or n.role.value == pattern]
        if not hits:
            known = ", ".join(n.hostname for n in inventory.nodes[:10])
            problems.append(Problem("--limit", f"{pattern!r} matches no node", f"use one of: {known}"))
        chosen.extend(n for n in hits if n not in chosen)
    if problems:
        raise InvalidInput("--limit selects unknown nodes", problems=problems)
    return chosen


def target_for(inventory: Inventory, node: Node) -> BmcTarget:
    """The BMC target of a node: URL, resolved credentials and TLS settings (defaults < groups < node)."""
    settings = inventory.bmc_settings(node)
    creds = resolve_bmc_credentials(inventory, node)
    return BmcTarget(
        name=node.hostname,
        url=node.bmc.url,
        username=creds.username,
        password=creds.password,
        ca_file=inventory.resolve_path(settings.ca_file) if settings.ca_file else None,
        fingerprint=settings.fingerprint,
        insecure=bool(settings.insecure),
    )


def targets_for(inventory: Inventory, nodes: list[Node]) -> list[BmcTarget]:
    """Targets of ``nodes``; every unresolved credential is reported at once."""
    targets, problems = [], []
    for node in nodes:
        try:
            targets.append(target_for(inventory, node))
        except InvalidInput as exc:
            problems.extend(exc.problems or [Problem(f"nodes.{node.hostname}.bmc", exc.message)])
    if problems:
        raise InvalidInput("BMC credentials cannot be resolved", problems=problems)
    return targets


# -- discover ---------------------------------------------------------------------------------------
def check_facts(inventory: Inventory, node: Node, facts: NodeFacts) -> list[dict[str, Any]]:
    """Differences between the inventory and what the BMC reports: model, GPU count, service tag."""
    found: list[dict[str, Any]] = []
    hw = inventory.hardware(node.model)
    expected_model = hw.redfish_model if hw else node.model
    if facts.model and facts.model != expected_model and facts.short_model != node.model:
        found.append({"field": "model", "inventory": node.model, "discovered": facts.model})
    gpus = inventory.gpus_of(node)
    if gpus.count != facts.gpu_count:
        found.append({"field": "gpus.count", "inventory": gpus.count, "discovered": facts.gpu_count})
    if node.service_tag and facts.service_tag and node.service_tag != facts.service_tag.upper():
        found.append({"field": "service_tag", "inventory": node.service_tag, "discovered": facts.service_tag})
    return found


def interface_fqdd(inventory: Inventory, node: Node, iface: Any) -> str | None:
    """An interface's NIC FQDD: its own, else the model's default for its network."""
    if iface.fqdd:
        return iface.fqdd
    hw = inventory.hardware(node.model)
    return hw.nics.get(iface.network) if (hw and iface.network) else None


def mac_diff(inventory: Inventory, node: Node, facts: NodeFacts) -> list[dict[str, Any]]:
    """Interfaces whose MAC in the inventory is missing or differs from the discovered one."""
    macs = facts.macs()
    diff = []
    for index, iface in enumerate(node.interfaces):
        fqdd = interface_fqdd(inventory, node, iface)
        found = macs.get(fqdd) if fqdd else None
        if found and found != (iface.mac or "").lower():
            diff.append(
                {
                    "node": node.hostname,
                    "interface": iface.name,
                    "index": index,
                    "fqdd": fqdd,
                    "inventory": iface.mac,
                    "discovered": found,
                }
            )
    return diff


def write_mac_diff(inventory_path: Path, diff: list[dict[str, Any]]) -> int:
    """Apply a MAC diff to the inventory YAML atomically, keeping comments, order and the rest of the file."""
    if not diff:
        return 0
    yaml = YAML()  # round-trip mode keeps comments and layout
    yaml.preserve_quotes = True
    data = yaml.load(inventory_path.read_text(encoding="utf-8"))
    by_name = {str(n.get("hostname")): n for n in data.get("nodes", [])}
    changed = 0
    for item in diff:
        node = by_name.get(item["node"])
        if node is None:
            continue
        for iface in node.get("interfaces", []) or []:
            if iface.get("name") == item["interface"]:
                iface["mac"] = item["discovered"]
                changed += 1
    out = StringIO()
    yaml.dump(data, out)
    atomic_write_text(inventory_path, out.getvalue())
    return changed


@dataclass
class DiscoverReport:
    """Discovery of many nodes: per-node results, inventory mismatches, and the MAC diff to offer."""

    results: list[NodeResult[NodeFacts]]
    mismatches: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    mac_diff: list[dict[str, Any]] = field(default_factory=list)
    facts_store: str = "journal"

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results) and not any(self.mismatches.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "nodes": [r.as_dict(lambda f: f.as_dict()) for r in self.results],
            "mismatches": self.mismatches,
            "mac_diff": self.mac_diff,
            "facts_store": self.facts_store,
        }


def record_facts(state_dir: Path, results: list[NodeResult[NodeFacts]]) -> str:
    """Store discovered facts in the run journal (``discover`` stage)."""
    with Journal(state_dir) as journal:
        for result in results:
            if result.ok and result.value is not None:
                journal.record_facts(result.name, FACTS_STAGE, result.value.as_dict())
    return "journal"


def run_discover_stage(
    inventory: Inventory,
    nodes: list[Node],
    state_dir: Path,
    progress: Progress | None = None,
    *,
    policy: ConnectionPolicy | None = None,
) -> DiscoverReport:
    """Discover ``nodes`` through their BMCs, record facts, compare with the inventory."""
    targets = targets_for(inventory, nodes)
    # Read-only and fleet-wide: each node is cut at its deadline, the healthy ones are reported meanwhile.
    results = run_fleet(targets, discover, policy=policy or DISCOVER_POLICY, progress=progress)
    report = DiscoverReport(results=results)
    report.facts_store = record_facts(state_dir, results)
    by_name = {n.hostname: n for n in nodes}
    for result in results:
        if result.ok and result.value is not None:
            node = by_name[result.name]
            report.mismatches[result.name] = check_facts(inventory, node, result.value)
            report.mac_diff.extend(mac_diff(inventory, node, result.value))
    return report


# -- bios -------------------------------------------------------------------------------------------
def desired_bios(inventory: Inventory, node: Node) -> dict[str, Any]:
    """The BIOS attributes the node's profile asks for ({} when it has none)."""
    name = inventory.node_bios_profile(node)
    if not name:
        return {}
    profile = inventory.bios_profile(name)
    if profile is None:
        raise InvalidInput(
            f"BIOS profile {name!r} of {node.hostname} is not defined",
            problems=[
                Problem(
                    f"nodes.{node.hostname}.bios_profile",
                    f"{name!r} unknown",
                    "define it under bios_profiles",
                )
            ],
        )
    return dict(profile)


@dataclass
class BiosReport:
    """BIOS plan or apply over many nodes."""

    results: list[NodeResult[Any]]
    applied: bool

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "applied": self.applied,
            "nodes": [r.as_dict(lambda v: v.as_dict()) for r in self.results],
        }


def run_bios_stage(
    inventory: Inventory,
    nodes: list[Node],
    state_dir: Path,
    progress: Progress | None = None,
    *,
    reboot: bool = False,
    dry_run: bool = False,
    policy: ConnectionPolicy | None = None,
) -> BiosReport:
    """Plan (``dry_run``) or apply each node's BIOS profile. Reboots only with ``reboot=True``."""
    del state_dir  # reserved: the journal of BIOS steps is recorded by the orchestrator
    targets = targets_for(inventory, nodes)
    wanted = {n.hostname: desired_bios(inventory, n) for n in nodes}

    def operation(conn: Any) -> Any:
        desired = wanted[conn.target.name]
        if dry_run:
            return plan_bios(conn, desired)
        return apply_bios(conn, desired, reboot=reboot)

    results = run_fleet(targets, operation, policy=policy, progress=progress)
    return BiosReport(results=results, applied=not dry_run)
