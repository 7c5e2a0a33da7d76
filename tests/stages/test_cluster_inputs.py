"""``rackctl up/plan --charts DIR --crds DIR``: the kubernetes and nvidia stages render and check with them.

Real parts: the CLI through click, the runner and its SQLite journal, the real kubernetes and nvidia stages
(render_cluster, helm-python-sdk rendering a chart archive, validate_bundle with jsonschema against the CRD).
The pinned GPU Operator chart cannot be had offline here, so the archive is a small chart packaged by real
Helm, named and versioned as the pinned one, whose ClusterPolicy template maps the values the way the
upstream chart does (a subset); the CRD is a hand-written subset of the ClusterPolicy CRD. The stages before
kubernetes are the small test stages of ``conftest.make_stage`` (the real ones need BMCs and VMs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import EXIT_INVALID, EXIT_NOT_APPLIED
from bootstrap.stages.base import register_stage
from bootstrap.stages.kubernetes import KubernetesStage
from bootstrap.stages.nvidia import NvidiaStage
from tests import crds as generated_crds

from .conftest import EXAMPLE_INVENTORY, Recorder, make_stage

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install 'rackctl[cluster]')")

BEFORE = ("preflight", "discover", "firmware", "bios", "provision", "os-check", "network")
GPU_NODE = "gpu-xe9680-01"
CRD_CHECK = "CRD openAPIV3Schema (strict)"
#: The pinned GPU Operator of the example inventory (cluster.versions.gpu_operator v26.7.0; like the real
#: chart since v25.3.0, the test chart has no operator.defaultRuntime).
OPERATOR_VERSION = "26.7.0"

CLUSTER_POLICY = """\
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata:
  name: cluster-policy
spec:
  driver:
    enabled: {{ .Values.driver.enabled }}
    version: {{ .Values.driver.version | quote }}
  mig:
    MIG_KEY: {{ .Values.mig.strategy }}
  toolkit:
    enabled: {{ .Values.toolkit.enabled }}
"""
CLUSTER_POLICY_CRD = """\
# Written by hand for rackctl's tests: a ClusterPolicy CRD (apiextensions.k8s.io/v1) whose schema covers
# only the fields of the test chart's template; it tests that the stages use --crds, not NVIDIA's schema.
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterpolicies.nvidia.com
spec:
  group: nvidia.com
  names: {kind: ClusterPolicy, plural: clusterpolicies, singular: clusterpolicy, listKind: ClusterPolicyList}
  scope: Cluster
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            apiVersion: {type: string}
            kind: {type: string}
            metadata: {type: object}
            spec:
              type: object
              properties:
                driver:
                  type: object
                  properties:
                    enabled: {type: boolean}
                    version: {type: string}
                mig:
                  type: object
                  properties:
                    strategy: {type: string, enum: [single, mixed]}
                toolkit:
                  type: object
                  properties:
                    enabled: {type: boolean}
"""


@pytest.fixture
def cluster_stages(registry: dict) -> dict:
    """The registry with the real kubernetes and nvidia stages (the stages before them test stages)."""
    for cls in (KubernetesStage, NvidiaStage):
        register_stage(cls)
    rec = Recorder()
    for name in BEFORE:
        make_stage(name, rec, destructive=name == "provision")
    return registry


def operator_chart(root: Path, mig_key: str = "strategy") -> Path:
    """A gpu-operator chart archive (``gpu-operator-26.7.0.tgz``, packaged by Helm); returns its directory."""
    chart = root / "src" / "gpu-operator"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: gpu-operator\nversion: {OPERATOR_VERSION}\n")
    (chart / "values.yaml").write_text(
        "driver: {enabled: true, version: ''}\nmig: {strategy: single}\ntoolkit: {enabled: true}\n"
    )
    (chart / "templates" / "clusterpolicy.yaml").write_text(CLUSTER_POLICY.replace("MIG_KEY", mig_key))
    charts = root / "charts"
    charts.mkdir()
    helm.package(chart, destination=charts, version=OPERATOR_VERSION)
    assert (charts / f"gpu-operator-{OPERATOR_VERSION}.tgz").is_file()
    return charts


def crd_dir(root: Path) -> Path:
    """The ClusterPolicy CRD and the Prometheus operator's ServiceMonitor CRD (tests/crds.py), in one directory."""
    crds = root / "crds"
    crds.mkdir()
    (crds / "clusterpolicies.yaml").write_text(CLUSTER_POLICY_CRD)
    (crds / "servicemonitors.yaml").write_text(generated_crds.service_monitor_text())
    return crds


def invoke(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout) if "--json" in args else result.output


def rendered_records(state: Path, node: str) -> dict[str, dict[str, Any]]:
    """Per stage, the journal's "rendered, not applied" record of ``node`` (checked, unchecked, artefacts)."""
    code, shown = invoke("journal", "show", node, "--state-dir", str(state), "--json")
    assert code == 0, shown
    return {r["stage"]: r for r in shown["not_applied"]}


def test_without_the_options_chart_manifests_and_custom_resources_are_unchecked(
    cluster_stages: dict, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    code, data = invoke(
        "up", "-i", str(EXAMPLE_INVENTORY), "--state-dir", str(state), "--stages", "kubernetes,nvidia", "--json"
    )
    assert code == EXIT_NOT_APPLIED, data
    records = rendered_records(state, GPU_NODE)
    kube, nvidia = records["kubernetes"], records["nvidia"]
    assert CRD_CHECK not in kube["checked"] and CRD_CHECK not in nvidia["checked"]
    assert any("ServiceMonitor" in u and "their CRDs are not at hand" in u for u in kube["unchecked"])
    assert any("gpu-operator v26.7.0" in u and "no --charts directory was given" in u for u in nvidia["unchecked"])


def test_up_renders_the_chart_and_checks_custom_resources_against_the_crds(
    cluster_stages: dict, tmp_path: Path
) -> None:
    charts, crds = operator_chart(tmp_path), crd_dir(tmp_path)
    state = tmp_path / "state"
    args = ["-i", str(EXAMPLE_INVENTORY), "--state-dir", str(state), "--stages", "kubernetes,nvidia"]
    code, data = invoke("up", *args, "--charts", str(charts), "--crds", str(crds), "--json")
    assert code == EXIT_NOT_APPLIED, data
    assert data["not_applied"] == ["kubernetes", "nvidia"]

    records = rendered_records(state, GPU_NODE)
    kube, nvidia = records["kubernetes"], records["nvidia"]
    assert CRD_CHECK in kube["checked"] and CRD_CHECK in nvidia["checked"]
    assert not any("schema check of custom resources" in u for u in kube["unchecked"] + nvidia["unchecked"])
    assert not any("gpu-operator" in u for u in nvidia["unchecked"])
    # the other pinned charts have no archive in the directory: still said, naming the directory
    (charts_left,) = [u for u in kube["unchecked"] if u.startswith("chart manifests")]
    assert "gpu-operator" not in charts_left and "tigera-operator" in charts_left and str(charts) in charts_left

    # the ClusterPolicy the chart rendered with rackctl's values, checked against the CRD of --crds
    index = json.loads((state / "nvidia" / "index.json").read_text())
    files = {f["path"]: f for f in index["files"]}
    policy = files["manifests/gpu-operator/templates/clusterpolicy.yaml"]
    assert policy["checked_by"] == [CRD_CHECK]
    text = (state / "nvidia" / "manifests" / "gpu-operator" / "templates" / "clusterpolicy.yaml").read_text()
    assert "580.95.05" in text  # our driver.version, not the chart's empty default

    # the journal's run names the options (what ran, exactly)
    code, shown = invoke("journal", "show", "--state-dir", str(state), "--json")
    assert f"--charts {charts}" in shown["runs"][0]["command"] and f"--crds {crds}" in shown["runs"][0]["command"]


def test_a_custom_resource_the_crd_refuses_fails_the_stage_as_bad_input(cluster_stages: dict, tmp_path: Path) -> None:
    charts, crds = operator_chart(tmp_path, mig_key="stratgy"), crd_dir(tmp_path)
    state = tmp_path / "state"
    args = ["-i", str(EXAMPLE_INVENTORY), "--state-dir", str(state), "--stages", "nvidia"]
    code, data = invoke("up", *args, "--charts", str(charts), "--crds", str(crds), "--json")
    assert code == EXIT_INVALID, data
    (problem,) = data["errors"]
    assert "'stratgy' was unexpected" in problem["message"] and "ClusterPolicy/cluster-policy" in problem["message"]
    assert "nvidia.profiles" in problem["path"]
    assert not (state / "nvidia").exists(), "a bundle that failed its checks was written"

    # without --crds the same chart renders, its ClusterPolicy recorded as unchecked (no CRD at hand)
    code, data = invoke("up", *args, "--charts", str(charts), "--json")
    assert code == EXIT_NOT_APPLIED, data
    nvidia = rendered_records(state, GPU_NODE)["nvidia"]
    assert CRD_CHECK not in nvidia["checked"]
    assert any("nvidia.com/v1 ClusterPolicy" in u for u in nvidia["unchecked"])


def test_plan_names_the_directories_and_renders_nothing(cluster_stages: dict, tmp_path: Path) -> None:
    charts, crds = tmp_path / "charts", crd_dir(tmp_path)
    charts.mkdir()
    state = tmp_path / "state"
    base = ["-i", str(EXAMPLE_INVENTORY), "--state-dir", str(state), "--stages", "kubernetes,nvidia"]
    code, planned = invoke("plan", *base, "--charts", str(charts), "--crds", str(crds), "--json")
    assert code == 0, planned
    for stage in planned["stages"]:
        (cluster_wide,) = [a["action"] for a in stage["actions"] if a["node"] is None]
        assert f"chart manifests rendered from the archives in {charts}" in cluster_wide
        assert f"custom resources checked against the CRDs in {crds}" in cluster_wide
    assert not state.exists()


@pytest.mark.parametrize("command", ["up", "plan"])
@pytest.mark.parametrize("option", ["--charts", "--crds"])
def test_a_missing_directory_is_bad_input_naming_the_option(
    cluster_stages: dict, tmp_path: Path, command: str, option: str
) -> None:
    missing = tmp_path / "nowhere"
    base = ["-i", str(EXAMPLE_INVENTORY), "--state-dir", str(tmp_path / "state")]
    code, data = invoke(command, *base, option, str(missing), "--json")
    assert code == EXIT_INVALID
    (problem,) = data["errors"]
    assert problem["path"] == option and str(missing) in problem["message"] and "does not exist" in problem["message"]
    assert problem["fix"].startswith("give a directory holding")
    assert not (tmp_path / "state").exists()

    code, human = invoke(command, *base, option, str(EXAMPLE_INVENTORY))  # a file, not a directory
    assert code == EXIT_INVALID and f"{option} {EXAMPLE_INVENTORY}: is not a directory" in human
    assert "Traceback" not in human
