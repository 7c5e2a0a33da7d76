"""Custom resources against CRD schemas (strict about unknown fields, as ``kubectl --validate=strict``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.cluster.render import render_cluster
from bootstrap.cluster.validate import check_custom, load_crds, validate_bundle
from bootstrap.inventory.loader import load_inventory
from tests import crds as generated_crds


def _crd_dir(root: Path) -> Path:
    """A directory holding the Prometheus operator's ServiceMonitor CRD, generated from its Go types (tests/crds.py)."""
    folder = root / "crds"
    folder.mkdir()
    (folder / "servicemonitors.yaml").write_text(generated_crds.service_monitor_text())
    return folder


#: A directory holding the pinned charts' crds/ (kube-prometheus-stack, gpu-operator), when someone has it.
PINNED_CRDS = os.environ.get("RACKCTL_CHART_CRDS")


def _monitor(write_inventory: Callable[..., Path]) -> tuple[dict, tuple[str, ...]]:
    bundle = render_cluster(load_inventory(write_inventory()))
    rendered = next(f for f in bundle.files if f.path == "triton/llama-2-70b-fp8/servicemonitor.yaml")
    return rendered.objects[0], rendered.sources


def test_service_monitor_checked_against_its_crd(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    crds = load_crds(_crd_dir(tmp_path))
    assert ("monitoring.coreos.com/v1", "ServiceMonitor") in crds
    monitor, sources = _monitor(write_inventory)
    assert check_custom([monitor], crds, "sm.yaml", sources) == ([], [])
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    monitor["spec"]["endpoints"][0]["scheme"] = "tcp"
    problems, missing = check_custom([monitor], crds, "sm.yaml", sources)
    assert missing == []
    messages = " ".join(p.message for p in problems)
    assert "'intervall' was unexpected" in messages
    assert "'tcp' is not one of" in messages
    assert all(p.path == "models[1]" for p in problems)


def test_cli_records_the_crd_check(write_inventory: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    crds = str(_crd_dir(tmp_path))
    result = CliRunner().invoke(
        cli, ["render", "cluster", "-i", str(write_inventory()), "-o", str(out), "--crds", crds, "--json"]
    )
    assert result.exit_code == 0, result.output
    index = json.loads((out / "index.json").read_text())
    monitor = next(f for f in index["files"] if f["path"].endswith("servicemonitor.yaml"))
    assert monitor["checked_by"] == ["CRD openAPIV3Schema (strict)"]
    assert not any("ServiceMonitor" in n["what"] for n in index["not_rendered"])


@pytest.mark.skipif(
    not PINNED_CRDS,
    reason="the pinned charts' CRDs (kube-prometheus-stack, gpu-operator) cannot be had offline here: not on "
    "PyPI, npm or Debian, and GitHub and the chart repositories are unreachable; set RACKCTL_CHART_CRDS to a "
    "directory holding their crds/ to run this",
)
def test_pinned_chart_crds(write_inventory: Callable[..., Path]) -> None:
    inv = load_inventory(write_inventory())
    bundle = render_cluster(inv)
    assert validate_bundle(inv, bundle, Path(str(PINNED_CRDS))) == []
    assert not any("custom resources" in n["what"] for n in bundle.not_rendered)
