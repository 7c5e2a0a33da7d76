"""The inventory <-> ``redfish_tools`` glue shared by the out-of-band stages (discover, bios, firmware,
provision), day-2 and the CLI.

BMC targets of nodes (credentials resolved, TLS settings merged), the checks of discovered facts against
the inventory, the MAC diff and its in-place write, and each node's desired BIOS attributes. The stages
themselves (``bootstrap.stages.discover``, ``bootstrap.stages.bios``) are run by the runner, for ``up``
and for the standalone ``rackctl discover`` / ``rackctl bios`` alike.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from bootstrap import selection
from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.models import Inventory, Node
from bootstrap.inventory.secrets import resolve_bmc_credentials
from bootstrap.inventory.yamledit import YamlEditor
from redfish_tools.connection import BmcTarget, ConnectionPolicy
from redfish_tools.discover import DiscoveredNode

#: the stage whose journalled facts hold what discovery read
FACTS_STAGE = "discover"
#: Discovery of one node (login, ~25 reads, logout) is cut after two minutes, whatever the BMC does.
DISCOVER_POLICY = ConnectionPolicy(deadline_s=120.0)
#: ``<state-dir>/redfish-sessions/``: the ledger of open BMC sessions (``redfish_tools.session_ledger``).
SESSION_LEDGER_DIR = "redfish-sessions"


def policy_for(state_dir: Path, base: ConnectionPolicy | None = None) -> ConnectionPolicy:
    """``base`` (default policy) with the state dir's session ledger: every command that talks to BMCs uses
    it, so sessions a killed run left open are closed by the next login to those BMCs."""
    return replace(base or ConnectionPolicy(), session_ledger=Path(state_dir) / SESSION_LEDGER_DIR)


# -- inventory -> targets --------------------------------------------------------------------------
def select_nodes(inventory: Inventory, limit: str | None) -> list[Node]:
    """Nodes matching ``--limit`` (see :mod:`bootstrap.selection`); all when ``limit`` is ``None``."""
    return selection.select_nodes(inventory, limit)


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
    """Targets of ``nodes``; every unresolved credential is reported at once, once (nodes share them)."""
    targets: list[BmcTarget] = []
    problems: list[Problem] = []
    for node in nodes:
        try:
            targets.append(target_for(inventory, node))
        except InvalidInput as exc:
            for problem in exc.problems or [Problem(f"nodes.{node.hostname}.bmc", exc.message)]:
                if problem not in problems:
                    problems.append(problem)
    if problems:
        raise InvalidInput("BMC credentials cannot be resolved", problems=problems)
    return targets


# -- discover ---------------------------------------------------------------------------------------
def check_facts(inventory: Inventory, node: Node, facts: DiscoveredNode) -> list[dict[str, Any]]:
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


def mac_diff(inventory: Inventory, node: Node, facts: DiscoveredNode) -> list[dict[str, Any]]:
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
    """Apply a MAC diff to the inventory in place (one line per MAC; the rest of the file untouched), atomically."""
    if not diff:
        return 0
    editor = YamlEditor.load(inventory_path)
    doc = YAML(typ="safe", pure=True).load(editor.text) or {}
    where = {
        (str(node.get("hostname")), str(iface.get("name"))): (n, i)
        for n, node in enumerate(doc.get("nodes") or [])
        for i, iface in enumerate(node.get("interfaces") or [])
    }
    changed = 0
    for item in diff:
        spot = where.get((item["node"], item["interface"]))
        if spot is not None:
            editor.set_scalar(("nodes", spot[0], "interfaces", spot[1], "mac"), item["discovered"])
            changed += 1
    if editor.changed:
        editor.save()
    return changed


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
