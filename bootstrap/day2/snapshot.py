"""The normalised, per-node snapshot of what the inventory asks of a node, and where ``apply`` records it.

A node's snapshot is its *effective* configuration in sections (BMC, hardware, firmware baseline, BIOS
attributes, interfaces with the networks they sit on, OS install, Kubernetes role/labels/taints, GPU
settings): cluster-wide defaults are resolved into it, so an edit of a BIOS profile or a network's MTU
shows as a change of exactly the nodes it reaches. It holds names of credentials, never their values.

``rackctl apply`` stores, per node, the sections it applied as journal facts (stage ``apply``): the
newest record is the last applied state of that node; a node removed by ``apply`` is recorded as removed.
"""

from __future__ import annotations

from typing import Any

from bootstrap.inventory.models import Inventory, Node
from bootstrap.journal.store import Journal

#: the journal facts stage under which ``apply`` records what it applied
APPLY_FACTS = "apply"

#: the snapshot's sections, in the order plans show them
SECTIONS: tuple[str, ...] = ("bmc", "hardware", "firmware", "bios", "interfaces", "os", "kubernetes", "gpu")


def node_snapshot(inventory: Inventory, node: Node) -> dict[str, Any]:
    """The node's effective configuration, section by section (JSON data, no secret values)."""
    settings = inventory.bmc_settings(node)
    baseline = inventory.firmware.baseline.get(node.model)
    profile = inventory.node_bios_profile(node)
    gpus = inventory.gpus_of(node)
    networks = inventory.networks.named()
    used = sorted({i.network for i in node.interfaces if i.network} | {b.network for b in node.bonds})
    return {
        "bmc": {
            "address": node.bmc.address,
            # the credential's *name* ("credentials" is a secret-looking key the journal refuses)
            "login": settings.credentials,
            "ca_file": str(inventory.resolve_path(settings.ca_file)) if settings.ca_file else None,
            "fingerprint": settings.fingerprint,
            "insecure": bool(settings.insecure),
        },
        "hardware": {"model": node.model, "service_tag": node.service_tag},
        "firmware": baseline.model_dump(mode="json") if baseline else None,
        "bios": {"profile": profile, "attributes": dict(inventory.bios_profile(profile) or {}) if profile else {}},
        "interfaces": {
            "interfaces": [i.model_dump(mode="json", exclude_none=True) for i in node.interfaces],
            "bonds": [b.model_dump(mode="json", exclude_none=True) for b in node.bonds],
            "networks": {name: networks[name].model_dump(mode="json") for name in used if name in networks},
        },
        "os": {"install_method": inventory.cluster.install_method.value, "root_disk_hint": node.root_disk_hint},
        "kubernetes": {
            "role": node.role.value,
            "labels": dict(node.labels),
            "taints": [t.model_dump(mode="json") for t in node.taints],
        },
        "gpu": {"type": gpus.type, "count": gpus.count, "mig_profile": node.mig_profile},
    }


def inventory_snapshot(inventory: Inventory) -> dict[str, dict[str, Any]]:
    """Every node's snapshot, by hostname."""
    return {node.hostname: node_snapshot(inventory, node) for node in inventory.nodes}


def applied_snapshots(journal: Journal) -> dict[str, dict[str, Any]]:
    """What ``apply`` last recorded per node: ``{node: record}``; a record has ``sections`` (the applied
    values) or ``removed: true``. Nodes ``apply`` never recorded are absent."""
    out: dict[str, dict[str, Any]] = {}
    for node in journal.nodes():
        record = journal.latest_facts(node).get(APPLY_FACTS)
        if record is not None:
            out[node] = record
    return out


def record_applied(
    journal: Journal, node: str, sections: dict[str, Any], *, run_id: int, previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Record ``sections`` of ``node`` as applied by run ``run_id`` (merged over ``previous`` sections)."""
    merged = {**(previous or {}), **sections}
    record = {"run": run_id, "removed": False, "sections": merged}
    journal.record_facts(node, APPLY_FACTS, record)
    return record


def record_removed(journal: Journal, node: str, *, run_id: int, sections: dict[str, Any] | None) -> None:
    """Record that ``apply`` removed ``node`` (its last sections kept, for the record)."""
    journal.record_facts(node, APPLY_FACTS, {"run": run_id, "removed": True, "sections": sections or {}})
