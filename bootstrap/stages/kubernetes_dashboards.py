"""The kubernetes stage's live part for Grafana: the dashboard ConfigMaps applied where a cluster exists.

After the Helm releases (kube-prometheus-stack's Grafana and its sidecar), the rendered
``monitoring/dashboards.yaml`` (:mod:`bootstrap.cluster.dashboards`) is applied server-side as rackctl
(:func:`bootstrap.kube.apply.apply_objects`); the stage's message says what was created, changed or left
unchanged, or why nothing was applied. Without Grafana nothing is rendered and nothing is said.
"""

from __future__ import annotations

from bootstrap.cluster.render import DASHBOARDS_FILE, Bundle
from bootstrap.kube import Kubectl, KubeError
from bootstrap.kube.apply import apply_objects
from bootstrap.stages.base import StageResult


def with_dashboards(result: StageResult, cluster: Kubectl, bundle: Bundle) -> StageResult:
    """``result`` with the bundle's Grafana dashboard ConfigMaps applied to the live cluster (or why not)."""
    rendered = next((f for f in bundle.files if f.path == DASHBOARDS_FILE), None)
    if rendered is None:
        return result
    try:
        report = apply_objects(cluster, rendered.objects)
    except KubeError as exc:
        result.message += f"; Grafana dashboards not applied: {exc.message}"
        result.ok = False
        return result
    result.message += f"; Grafana dashboards ({DASHBOARDS_FILE}): {report.summary()}"
    return result
