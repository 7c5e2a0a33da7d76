"""The kubernetes stage's live part for Grafana: the dashboard ConfigMaps applied where a cluster exists.

After the Helm releases (kube-prometheus-stack's Grafana and its sidecar), the rendered
``monitoring/dashboards.yaml`` (:mod:`bootstrap.cluster.dashboards`) is applied server-side as rackctl
(:func:`bootstrap.kube.apply.apply_objects`); the stage's message says what was created, changed or left
unchanged, or why nothing was applied (a refused apply fails the stage on every selected node). Without
Grafana nothing is rendered and nothing is said.
"""

from __future__ import annotations

from bootstrap.cluster.render import DASHBOARDS_FILE, Bundle
from bootstrap.kube import Kubectl, KubeError
from bootstrap.kube.apply import apply_objects
from bootstrap.stages.base import NodeResult, StageContext, StageResult


def with_dashboards(ctx: StageContext, result: StageResult, cluster: Kubectl, bundle: Bundle) -> StageResult:
    """``result`` with the bundle's Grafana dashboard ConfigMaps applied to the live cluster (or why not); a
    refused apply fails the stage on every selected node, as a failed Helm release does."""
    rendered = next((f for f in bundle.files if f.path == DASHBOARDS_FILE), None)
    if rendered is None:
        return result
    if not result.ok:  # the labels or a Helm release failed: that failure stays the stage's message
        result.message += "; Grafana dashboards: not applied (the stage failed before it)"
        return result
    try:
        report = apply_objects(cluster, rendered.objects)
    except KubeError as exc:
        why = f"Grafana dashboards not applied: {exc.message}"
        result.message += f"; {why}"
        for node in ctx.nodes:
            before = result.nodes.get(node)
            result.nodes[node] = NodeResult(node, ok=False, message=why, data=before.data if before else {})
        result.ok = False
        return result
    result.message += f"; Grafana dashboards ({DASHBOARDS_FILE}): {report.summary()}"
    return result
