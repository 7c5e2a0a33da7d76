"""Charts rendered with rackctl's values by Helm's own Go SDK (helm-python-sdk), offline.

The pinned upstream charts cannot be had here (chart repositories and GitHub are unreachable), so the
mechanism is exercised with a chart that real Helm scaffolds (``helm create``), named and versioned as the
pinned local-path-provisioner, with templates written here that read the same values the upstream chart
reads (``storageClass``, ``nodePathMap``), a ``crds/`` directory and a ``values.schema.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bootstrap.cluster.render import render_cluster
from bootstrap.cluster.validate import validate_bundle
from bootstrap.inventory.loader import load_inventory
from tests import crds as generated_crds
from tests.cluster.scaffold_charts import CONFIGMAP, scaffold_chart

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install 'rackctl[cluster]')")

PINNED_CHARTS = os.environ.get("RACKCTL_CHARTS")

STORAGECLASS = """\
{{- if .Values.storageClass.create }}
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {{ .Values.storageClass.name }}
  annotations:
    storageclass.kubernetes.io/is-default-class: {{ .Values.storageClass.defaultClass | quote }}
provisioner: rancher.io/local-path
volumeBindingMode: {{ .Values.storageClass.volumeBindingMode }}
reclaimPolicy: {{ .Values.storageClass.reclaimPolicy }}
{{- end }}
"""
MONITOR = """\
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ .Release.Name }}
spec:
  selector:
    matchLabels: {app: local-path-provisioner}
  endpoints:
    - port: metrics
      {{ .Values.monitorIntervalKey | default "interval" }}: 30s
"""


def _chart(root: Path, version: str = "0.0.32", schema: dict[str, Any] | None = None) -> Path:
    """The scaffold with our templates, the ServiceMonitor CRD and ``schema``, packaged; the charts dir."""
    files = {"crds/servicemonitors.yaml": generated_crds.service_monitor_text()}
    if schema is not None:
        files["values.schema.json"] = json.dumps(schema)
    templates = {"storageclass.yaml": STORAGECLASS, "configmap.yaml": CONFIGMAP, "servicemonitor.yaml": MONITOR}
    return scaffold_chart(helm, root, "local-path-provisioner", version, templates=templates, files=files)


def test_chart_rendered_with_our_values(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"local_path": "/mnt/nvme1/lp"}

    charts = _chart(tmp_path)
    assert (charts / "local-path-provisioner-0.0.32.tgz").is_file()
    inv = load_inventory(write_inventory(edit))
    bundle = render_cluster(inv, charts)
    assert validate_bundle(inv, bundle) == []
    files = {f.path: f for f in bundle.files}
    (storage,) = files["manifests/local-path-provisioner/templates/storageclass.yaml"].objects
    assert storage["volumeBindingMode"] == "WaitForFirstConsumer"
    (config,) = files["manifests/local-path-provisioner/templates/configmap.yaml"].objects
    assert json.loads(config["data"]["config.json"])["nodePathMap"][0]["paths"] == ["/mnt/nvme1/lp"]
    assert config["metadata"]["namespace"] == "local-path-storage"
    assert "crds/local-path-provisioner/servicemonitors.yaml" in files
    monitor = files["manifests/local-path-provisioner/templates/servicemonitor.yaml"]
    assert monitor.checks == ["CRD openAPIV3Schema (strict)"]  # checked against the chart's own CRD
    deployment = files["manifests/local-path-provisioner/templates/deployment.yaml"]
    assert deployment.checks == ["kubernetes-validate --strict 1.37"]
    (missing,) = [n for n in bundle.not_rendered if n["what"].startswith("chart manifests")]
    assert "local-path-provisioner" not in missing["what"]
    assert "gpu-operator v26.7.0" in missing["what"]


def test_chart_objects_checked_strictly(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    """A ServiceMonitor the chart renders with a misspelt field fails against the chart's CRD."""
    charts = _chart(tmp_path)
    chart_dir = tmp_path / "unpacked"
    helm.expand(chart_dir, charts / "local-path-provisioner-0.0.32.tgz")
    values = chart_dir / "local-path-provisioner" / "values.yaml"
    values.write_text(values.read_text() + "\nmonitorIntervalKey: intervall\n")
    inv = load_inventory(write_inventory())
    bundle = render_cluster(inv, chart_dir)
    problems = validate_bundle(inv, bundle)
    assert len(problems) == 1
    assert "'intervall' was unexpected" in problems[0].message
    assert "kubernetes.local_path" in problems[0].path


def test_chart_version_must_be_the_pinned_one(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    charts = _chart(tmp_path, version="0.0.31")
    unpacked = tmp_path / "unpacked"
    helm.expand(unpacked, charts / "local-path-provisioner-0.0.31.tgz")
    inv = load_inventory(write_inventory())
    bundle = render_cluster(inv, unpacked)
    problems = validate_bundle(inv, bundle)
    assert [p.path for p in problems] == ["kubernetes.charts.local_path_provisioner"]
    assert "0.0.31" in problems[0].message and "0.0.32" in problems[0].message


def test_chart_values_schema_rejects_our_values(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"storageClass": {"type": "object", "properties": {"reclaimPolicy": {"enum": ["Retain"]}}}},
    }
    inv = load_inventory(write_inventory())
    problems = validate_bundle(inv, render_cluster(inv, _chart(tmp_path, schema=schema)))
    assert len(problems) == 1
    assert "rejects rackctl's values" in problems[0].message and "reclaimPolicy" in problems[0].message
    assert problems[0].path.startswith("kubernetes.local_path")


@pytest.mark.skipif(
    not PINNED_CHARTS,
    reason="the pinned chart archives (tigera-operator, local-path-provisioner, kube-prometheus-stack, gpu-operator) "
    "cannot be had offline here (chart repositories and GitHub unreachable); set RACKCTL_CHARTS to a directory of "
    "<chart>-<version>.tgz from `helm pull` to run this",
)
def test_pinned_charts_render_and_validate(write_inventory: Callable[..., Path]) -> None:
    inv = load_inventory(write_inventory())
    bundle = render_cluster(inv, Path(str(PINNED_CHARTS)))
    assert validate_bundle(inv, bundle) == []
    assert not any(n["what"].startswith("chart manifests") for n in bundle.not_rendered)
