"""Node labels and taints from the inventory, applied to a live cluster (the kubernetes stage, with a kubeconfig).

What to apply is what ``render cluster`` writes to ``nodes/labels.yaml`` (role, hardware model, GPU product
and count, the GPU operator's per-node labels, the inventory's own ``labels`` and ``taints``). rackctl owns
exactly what it applied last time, recorded on the Node in two annotations
(:data:`MANAGED_LABELS`, :data:`MANAGED_TAINTS`): a label or taint it owns that the inventory no longer gives
is removed; labels and taints of anyone else (users, the kubelet, kubeadm's control-plane taint) are left
alone, unless the inventory names the same key, which the inventory then sets. One JSON merge patch per
node, carrying the Node's ``resourceVersion`` (a Node changed in between is read again); none when nothing
differs, so a second run changes nothing and says so.

Node taints are an atomic list in the API (no per-taint ownership for server-side apply), which is why the
ownership is recorded in annotations rather than left to a field manager.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from bootstrap.kube.api import KubeError, ObjectPatcher

#: The Node annotations that record what rackctl applied (comma-separated label keys / ``key:effect``).
MANAGED_LABELS = "rackctl.io/managed-labels"
MANAGED_TAINTS = "rackctl.io/managed-taints"
#: The rendered file the labels come from (``render cluster``'s ``nodes/labels.yaml``).
LABELS_FILE = "nodes/labels.yaml"
#: How often a patch refused as stale (the Node changed meanwhile) is recomputed.
ATTEMPTS = 3


@dataclass(frozen=True)
class Wanted:
    """The labels and taints the inventory gives one node."""

    labels: dict[str, str]
    taints: list[dict[str, str]]


@dataclass
class LabelOutcome:
    """What applying one node's labels and taints did."""

    node: str
    joined: bool
    changes: list[str] = field(default_factory=list)
    labels: int = 0
    taints: int = 0

    @property
    def message(self) -> str:
        if not self.joined:
            return f"not joined: Node {self.node} not in the cluster"
        if not self.changes:
            counts = f"{self.labels} labels, {self.taints} taints"
            return f"labels/taints applied: unchanged ({counts} already as the inventory says)"
        return "labels/taints applied: " + ", ".join(self.changes)

    def as_fact(self) -> dict[str, Any]:
        return {"joined": self.joined, "changed": bool(self.changes), "changes": self.changes, "message": self.message}


def wanted_from_file(text: str) -> dict[str, Wanted]:
    """Per node, from the text of ``nodes/labels.yaml``; a taint's empty value is left out (as Kubernetes does)."""
    doc = yaml.safe_load(text) or {}
    out = {}
    for node, entry in doc.items():
        taints = [{k: str(v) for k, v in t.items() if k != "value" or v} for t in entry.get("taints") or []]
        out[node] = Wanted({k: str(v) for k, v in (entry.get("labels") or {}).items()}, taints)
    return out


def _taint_id(taint: dict[str, Any]) -> str:
    return f"{taint.get('key')}:{taint.get('effect')}"


def _taint_text(taint: dict[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + value if value else ''}:{taint.get('effect')}"


def _owned(annotations: dict[str, str], key: str) -> set[str]:
    return {item for item in annotations.get(key, "").split(",") if item}


def node_patch(node: dict[str, Any], want: Wanted) -> tuple[dict[str, Any] | None, list[str]]:
    """The merge patch that brings ``node`` to ``want`` (``None`` when nothing differs), and the changes in words."""
    meta = node.get("metadata", {})
    labels, annotations = dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
    owned_labels, owned_taints = _owned(annotations, MANAGED_LABELS), _owned(annotations, MANAGED_TAINTS)
    changes: list[str] = []
    label_patch: dict[str, str | None] = {}
    for key, value in sorted(want.labels.items()):
        if labels.get(key) != value:
            label_patch[key] = value
            changes.append(f"set {key}={value}")
    for key in sorted(owned_labels - set(want.labels)):
        if key in labels:
            label_patch[key] = None
            changes.append(f"removed {key} (no longer in the inventory)")
    current = list(node.get("spec", {}).get("taints") or [])
    wanted_ids = {_taint_id(t) for t in want.taints}
    kept = [t for t in current if _taint_id(t) not in owned_taints | wanted_ids]
    taints = kept + want.taints
    before, after = sorted(_taint_text(t) for t in current), sorted(_taint_text(t) for t in taints)
    taints_change = before != after
    changes += [f"taint {t} added" for t in after if t not in before]
    changes += [f"taint {t} removed" for t in before if t not in after]
    managed = {
        MANAGED_LABELS: ",".join(sorted(want.labels)),
        MANAGED_TAINTS: ",".join(sorted(wanted_ids)),
    }
    annotation_patch = {k: v for k, v in managed.items() if annotations.get(k, "") != v}
    if not label_patch and not annotation_patch and not taints_change:
        return None, []
    patch: dict[str, Any] = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
    if label_patch:
        patch["metadata"]["labels"] = label_patch
    if annotation_patch:
        patch["metadata"]["annotations"] = annotation_patch
    if taints_change:
        patch["spec"] = {"taints": taints}
    return patch, changes


def apply_labels(api: ObjectPatcher, node: str, want: Wanted) -> LabelOutcome:
    """Bring one Node's labels and taints to ``want``; a Node the cluster lacks is reported not joined."""
    for attempt in range(ATTEMPTS):
        found = api.get_object("node", node)
        if found is None:
            return LabelOutcome(node, joined=False)
        patch, changes = node_patch(found, want)
        outcome = LabelOutcome(node, True, changes, len(want.labels), len(want.taints))
        if patch is None:
            return outcome
        try:
            api.merge_patch("node", node, patch)
        except KubeError as exc:
            if "conflict" in exc.message.lower() and attempt + 1 < ATTEMPTS:
                continue  # the Node changed since it was read: compute the patch again
            raise
        return outcome
    raise KubeError(f"Node {node} kept changing while its labels were applied")  # pragma: no cover - loop returns


def apply_all(api: ObjectPatcher, wanted: dict[str, Wanted], nodes: list[str]) -> dict[str, LabelOutcome]:
    """:func:`apply_labels` on each of ``nodes`` that the inventory gives labels for."""
    return {node: apply_labels(api, node, wanted[node]) for node in nodes if node in wanted}
