"""Render the pinned charts with rackctl's values, offline, through Helm's own Go SDK (helm-python-sdk).

A chart comes from a directory the user points at (``--charts DIR``: the head node's mirror, or archives
fetched with ``helm pull``): ``<chart>-<version>.tgz`` (as ``helm package``/``helm pull`` name them) or an
unpacked ``<chart>/`` directory. The chart's version must be the pinned one; its ``values.schema.json``
(when it ships one) checks our values; its ``crds/`` feed the custom-resource checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bootstrap.cluster.charts import Release
from bootstrap.errors import EnvironmentMissing, Problem


@dataclass
class RenderedChart:
    """``helm template`` of one release: manifests per template, the chart's CRDs, problems found."""

    manifests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    crds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def helm_sdk() -> Any:
    """The ``helm_python`` module (helm-python-sdk); missing is a missing tool naming the extra (exit 3)."""
    try:
        import helm_python  # noqa: PLC0415 - optional (the `cluster` extra), 85 MB native library
    except ImportError:
        raise EnvironmentMissing(
            "rendering charts needs helm-python-sdk",
            problems=[Problem("--charts", "helm_python is not importable", "pip install 'rackctl[cluster]'")],
        ) from None
    return helm_python


def chart_source(charts_dir: Path, release: Release) -> Path | None:
    """The archive or directory of ``release``'s chart in ``charts_dir``, if there is one."""
    bare = release.version.removeprefix("v")
    for name in (f"{release.chart}-{release.version}.tgz", f"{release.chart}-{bare}.tgz"):
        if (charts_dir / name).is_file():
            return charts_dir / name
    directory = charts_dir / release.chart
    return directory if (directory / "Chart.yaml").is_file() else None


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d]


def _version_field(release: Release) -> str:
    return next((s for s in release.sources if ".charts." in s or s.startswith("cluster.versions.gpu")), "")


def render_release(release: Release, source: Path) -> RenderedChart:
    """Load the chart, check its version and our values against it, render its templates."""
    helm = helm_sdk()
    out = RenderedChart()
    chart = helm.Chart.load_archive(source.read_bytes()) if source.is_file() else helm.Chart.load(source)
    where = f"chart {release.chart} ({source.name})"
    if chart.version.removeprefix("v") != release.version.removeprefix("v"):
        out.problems.append(
            Problem(
                _version_field(release),
                f"{where} is version {chart.version}, the inventory pins {release.version}",
                f"put {release.chart} {release.version} in the charts directory, or pin {chart.version}",
            )
        )
        return out
    try:
        chart.validate_schema(release.values)
        rendered = chart.render(release.values, name=release.name, namespace=release.namespace, is_install=True)
    except helm.HelmError as exc:
        out.problems.append(
            Problem(
                ", ".join(release.sources), f"{where} rejects rackctl's values: {exc}", f"correct {release.sources[0]}"
            )
        )
        return out
    for template, text in sorted(rendered.items()):
        docs = _documents(text) if template.endswith((".yaml", ".yml")) else []
        if docs:
            out.manifests[template] = docs
    for crd in chart.crds:
        docs = _documents(crd["data"])
        if docs:
            out.crds[crd.get("filename") or crd["name"]] = docs
    return out
