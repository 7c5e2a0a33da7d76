"""Charts that real Helm scaffolds (``helm create``, through helm-python-sdk), named and versioned as pinned charts.

The pinned upstream charts cannot be had here (chart repositories and GitHub are unreachable), so the Helm
install tests use the scaffold: a Deployment (nginx), a Service and a ServiceAccount that a real API server
accepts, plus templates a test adds (the local-path-provisioner's StorageClass and ConfigMap read the same
values the upstream chart reads: ``storageClass``, ``nodePathMap``). Packaged as ``<chart>-<version>.tgz``,
as ``helm pull`` names them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STORAGECLASS = """\
{{- if .Values.storageClass.create }}
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {{ .Values.storageClass.name }}-{{ .Release.Namespace }}
provisioner: rancher.io/local-path
volumeBindingMode: {{ .Values.storageClass.volumeBindingMode }}
reclaimPolicy: {{ .Values.storageClass.reclaimPolicy }}
{{- end }}
"""
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-path-config
  namespace: {{ .Release.Namespace }}
data:
  config.json: |-
    {{ dict "nodePathMap" .Values.nodePathMap | toJson }}
"""
#: What the local-path-provisioner stand-in adds to the scaffold.
LOCAL_PATH_TEMPLATES = {"storageclass.yaml": STORAGECLASS, "configmap.yaml": CONFIGMAP}


def scaffold_chart(
    helm: Any,
    root: Path,
    chart: str,
    version: str,
    *,
    templates: dict[str, str] | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """Scaffold ``chart`` with Helm under ``root/src``, add ``templates`` (file name → text; an existing file is
    replaced) and ``files`` (path in the chart → text, e.g. ``crds/x.yaml``, ``values.schema.json``), package it
    into ``root/charts`` as ``<chart>-<version>.tgz``; return ``root/charts``."""
    src = root / "src" / f"{chart}-{version}"
    src.mkdir(parents=True)
    helm.Chart.create(chart, src).close()
    extra = {f"templates/{name}": text for name, text in (templates or {}).items()} | (files or {})
    for name, text in extra.items():
        path = src / chart / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    charts = root / "charts"
    charts.mkdir(exist_ok=True)
    helm.package(src / chart, destination=charts, version=version)
    return charts
