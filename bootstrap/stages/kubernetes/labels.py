"""The kubernetes stage's live part: node labels and taints applied where a cluster already exists.

When ``<state-dir>/kubeconfig`` is there (the stage's contract, :func:`bootstrap.kube.cluster_for`),
every selected node the cluster knows gets the labels and taints of the rendered ``nodes/labels.yaml``
(:mod:`bootstrap.kube.node_labels`); a node it does not know says "not joined: Node <name> not in the
cluster". Each node's outcome is appended to its message, kept in its result's ``data`` and recorded as the
stage's journal fact ``node_labels``. The stage itself stays "rendered + validated, not applied": kubeadm
init/join are not built; only the labels part is applied, and said so per node.
"""

from __future__ import annotations

from bootstrap.cluster.render import Bundle
from bootstrap.kube import Kubectl, KubeError
from bootstrap.kube.node_labels import LABELS_FILE, apply_labels, wanted_from_file
from bootstrap.stages.base import NodeResult, StageContext, StageResult

#: The journal fact each node's outcome is recorded under.
FACT = "node_labels"


def labels_text(bundle: Bundle) -> str:
    """The rendered ``nodes/labels.yaml``."""
    return next(f.content() for f in bundle.files if f.path == LABELS_FILE)


def with_live_labels(ctx: StageContext, result: StageResult, cluster: Kubectl, bundle: Bundle) -> StageResult:
    """``result`` with each selected node's labels/taints applied to the live cluster (or why not)."""
    wanted = wanted_from_file(labels_text(bundle))
    joined = 0
    for node in ctx.nodes:
        if node not in wanted:
            continue
        res = result.nodes.setdefault(node, NodeResult(node, ok=True, applied=False))
        try:
            outcome = apply_labels(cluster, node, wanted[node])
        except KubeError as exc:
            result.nodes[node] = NodeResult(node, ok=False, message=f"labels/taints not applied: {exc.message}")
            ctx.progress.node_done(ctx.stage, node, False, result.nodes[node].message)
            continue
        joined += outcome.joined
        res.message = f"{res.message}; {outcome.message}" if res.message else outcome.message
        res.data[FACT] = outcome.as_fact()
        ctx.record_facts(node, {FACT: outcome.as_fact()})
    total = len([n for n in ctx.nodes if n in wanted])
    result.message += (
        f"; node labels/taints applied on the live cluster ({cluster.reason}) to {joined} of {total} node(s)"
        + (f" ({total - joined} not joined)" if joined < total else "")
    )
    result.ok = all(r.ok for r in result.nodes.values())
    return result
