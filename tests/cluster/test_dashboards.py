"""Grafana dashboards as code: they parse, Grafana's own schema types accept them (the lab's dashboard-check,
built from the Grafana Foundation SDK), every query names only metrics the exporters publish, and the
rendered bundle carries them as sidecar-labelled ConfigMaps (or none without Grafana)."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from bootstrap.cluster.dashboards import (
    DCGM_DEFAULT_METRICS,
    DCGM_HOST_LABEL,
    KNOWN_METRICS,
    KUBE_STATE_METRICS,
    TRITON_METRICS,
    load_dashboards,
    metric_names,
    queries,
)
from bootstrap.cluster.render import DASHBOARDS_FILE, Bundle, render_cluster
from bootstrap.cluster.validate import validate_bundle
from bootstrap.inventory.loader import load_inventory
from bootstrap.kube import Kubectl, KubeError
from bootstrap.stages.base import NodeResult, StageContext, StageResult
from bootstrap.stages.kubernetes.dashboards import with_dashboards
from bootstrap.triton.manifests import MODEL_LABEL, build_manifests, service_monitor
from tests.go_built import unbuildable
from tests.kube_objects import KubeObjects
from tests.triton.conftest import make_spec

DASHBOARDS = load_dashboards()
#: The uids other dashboards and links rely on: renaming one is a breaking change, so it fails here.
STABLE_UIDS = {"gpus.json": "rackctl-gpus", "triton.json": "rackctl-triton", "nodes.json": "rackctl-nodes"}
#: PromQL words that are not metric names (functions, aggregations, modifiers).
PROMQL_WORDS = {"sum", "avg", "max", "min", "count", "rate", "by", "without", "label_values"}


#: What :func:`with_dashboards` reads of the stage's context: the selected nodes.
CTX = cast(StageContext, SimpleNamespace(nodes=["head-01", "gpu-01"]))


def _render(path: Path) -> tuple[Bundle, list[Any]]:
    inv = load_inventory(path)
    bundle = render_cluster(inv)
    return bundle, validate_bundle(inv, bundle)


def test_shipped_dashboards_are_the_three_with_pinned_schema_and_stable_uids() -> None:
    assert {name: d["uid"] for name, d in DASHBOARDS.items()} == STABLE_UIDS
    for dashboard in DASHBOARDS.values():
        assert isinstance(dashboard["schemaVersion"], int)
        assert dashboard["panels"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_has_a_query_naming_a_published_metric(name: str) -> None:
    for panel in DASHBOARDS[name]["panels"]:
        exprs = [t.get("expr", "") for t in panel.get("targets", [])]
        assert exprs and all(exprs), f"{name}: panel {panel['title']!r} has no query"
        for expr in exprs:
            assert metric_names(expr), f"{name}: {expr!r} selects no metric"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_queries_name_only_known_metrics(name: str) -> None:
    for query in queries(DASHBOARDS[name]):
        assert metric_names(query) <= KNOWN_METRICS, (name, query, metric_names(query) - KNOWN_METRICS)
        # Every bare word left once selectors (name{...}), label lists and strings are gone is PromQL, not a metric
        # named without a {...} matcher (which metric_names would miss).
        rest = re.sub(r'"[^"]*"|[A-Za-z_:][A-Za-z0-9_:]*\s*\{[^}]*\}|\b(by|without)\s*\([^)]*\)|\[[^\]]*\]', " ", query)
        rest = re.sub(r"label_values\([^)]*\)", " ", rest)
        words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", rest))
        assert words <= PROMQL_WORDS, (name, query, words - PROMQL_WORDS)


def test_metric_names_reads_selectors_and_label_values() -> None:
    assert metric_names('sum by (model) (rate(nv_inference_count{model=~"$m"}[5m]))') == {"nv_inference_count"}
    assert metric_names("label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)") == {"DCGM_FI_DEV_GPU_UTIL"}
    assert metric_names('DCGM_FI_DEV_NOT_A_FIELD{gpu="0"}') - KNOWN_METRICS == {"DCGM_FI_DEV_NOT_A_FIELD"}


def test_gpu_dashboard_covers_the_asked_fields_and_uses_the_released_host_label() -> None:
    text = json.dumps(DASHBOARDS["gpus.json"])
    used = set().union(*(metric_names(q) for q in queries(DASHBOARDS["gpus.json"])))
    wanted = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"}
    assert wanted | {"DCGM_FI_DEV_XID_ERRORS"} <= used <= DCGM_DEFAULT_METRICS
    other = "hostname" if DCGM_HOST_LABEL == "Hostname" else "Hostname"
    assert DCGM_HOST_LABEL in text
    assert not re.search(rf"\b{other}\b", text), f"the GPU dashboard mixes {DCGM_HOST_LABEL} and {other}"


def test_triton_dashboard_covers_requests_queue_compute_latency_replicas() -> None:
    used = set().union(*(metric_names(q) for q in queries(DASHBOARDS["triton.json"])))
    assert (
        {
            "nv_inference_request_success",
            "nv_inference_queue_duration_us",
            "nv_inference_compute_infer_duration_us",
            "nv_inference_request_duration_us",
            "nv_inference_pending_request_count",
        }
        <= used
        <= TRITON_METRICS | KUBE_STATE_METRICS
    )


def test_triton_panels_keep_each_rackctl_model_apart_and_read_its_deployments_replicas() -> None:
    """Triton names every ``llmapi`` model ``tensorrt_llm``: the panels select and group by the label the
    ServiceMonitor gives each series from the model's Service, so two rackctl models are two lines."""
    spec = make_spec(name="llama-3-8b")
    monitor = service_monitor(spec)
    (relabel,) = monitor["spec"]["endpoints"][0]["relabelings"]
    assert relabel["targetLabel"] == MODEL_LABEL and relabel["action"] == "replace"
    source = relabel["sourceLabels"][0].removeprefix("__meta_kubernetes_service_label_")
    objects = build_manifests(spec)["deployment.yaml"]
    for service in (o for o in objects if o["kind"] == "Service"):  # the label Prometheus reads, sanitised
        named = {re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in service["metadata"]["labels"].items()}
        assert named[source] == spec.name, service["metadata"]
    dashboard = DASHBOARDS["triton.json"]
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "model"]
    assert variable["query"] == f"label_values(nv_inference_request_success, {MODEL_LABEL})"
    triton = [q for q in queries(dashboard) if "nv_inference" in q and not q.startswith("label_values")]
    for query in triton:
        selectors = re.findall(r"nv_inference_\w+\{([^}]*)\}", query)
        assert selectors and all(sel == f'{MODEL_LABEL}=~"$model"' for sel in selectors), query
        assert all(f"by ({MODEL_LABEL}, model)" in part for part in query.split(" / ")), query
    (replicas,) = [q for q in queries(dashboard) if "kube_deployment_status_replicas_available" in q]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    found = re.search(r'deployment=~"([^"]+)"', replicas)
    assert found, replicas
    pattern = found.group(1).replace("$model", spec.name)
    assert re.fullmatch(pattern, deployment["metadata"]["name"]), (pattern, deployment["metadata"]["name"])


@pytest.fixture(scope="module")
def dashboard_check() -> Path:
    """The lab's checker of dashboard JSON against Grafana's own dashboard schema types (the Grafana
    Foundation SDK, built from its Go module at the pin: rackctl_lab/components/pins.py ``DASHBOARD_CHECK``)."""
    from bootstrap.errors import EnvironmentMissing
    from rackctl_lab.components import build
    from rackctl_lab.components.pins import DASHBOARD_CHECK

    try:
        (built,) = build.build([DASHBOARD_CHECK])
    except EnvironmentMissing as exc:
        unbuildable("the dashboard checker", exc)
    return Path(built.path)


def _checked(checker: Path, files: list[Path]) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run([str(checker), *map(str, files)], capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


def test_each_dashboard_as_its_configmap_carries_it_is_accepted_by_grafanas_schema_types(
    dashboard_check: Path, write_inventory: Callable[..., Path], tmp_path: Path
) -> None:
    """Grafana's dashboard schema, as the Grafana Foundation SDK's Go types generated from it carry it (no
    Grafana runs here: it is AGPL, which the build rules exclude), decodes each dashboard strictly, as the
    sidecar's ConfigMap carries it: the dashboard, its panels' options and field config, each Prometheus
    query; then its constraints hold. The same check refuses an unknown field, a value of the wrong type and
    a missing required part, naming where."""
    bundle, _ = _render(write_inventory())
    rendered = next(f for f in bundle.files if f.path == DASHBOARDS_FILE)
    files = []
    for cm in list(yaml.safe_load_all(rendered.content()))[1:]:
        ((name, text),) = cm["data"].items()
        files.append(tmp_path / name)
        files[-1].write_text(text)
    code, results = _checked(dashboard_check, files)
    assert code == 0, results
    assert {Path(r["file"]).name: (r["ok"], r["panels"]) for r in results} == {
        name: (True, len(d["panels"])) for name, d in DASHBOARDS.items()
    }

    broken = json.loads(json.dumps(DASHBOARDS["triton.json"]))
    broken["panels"][0]["targets"][0]["expr"] = 5
    broken["panels"][1]["targets"][0]["exprr"] = "up"
    broken["panels"][2]["gridPos"]["h"] = "8"
    del broken["annotations"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    code, (result,) = _checked(dashboard_check, [tmp_path / "broken.json"])
    assert code == 1 and result["ok"] is False
    assert sorted(result["errors"]) == [
        "annotations: required field is missing from input",
        "panels[0].targets[0].expr: json: cannot unmarshal number into Go value of type string",
        "panels[1].targets[0].Dataquery: unexpected field 'exprr'",
        "panels[2].gridPos.h: json: cannot unmarshal string into Go value of type uint32",
    ], result


def test_bundle_carries_sidecar_configmaps_that_validate(write_inventory: Callable[..., Path]) -> None:
    bundle, problems = _render(write_inventory())
    assert problems == []
    rendered = next(f for f in bundle.files if f.path == DASHBOARDS_FILE)
    assert rendered.checks and rendered.checks[0].startswith("kubernetes-validate")
    objects = yaml.safe_load_all(rendered.content())
    namespace, *maps = objects
    assert namespace == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}
    assert len(maps) == len(DASHBOARDS)
    for cm in maps:
        assert cm["kind"] == "ConfigMap"
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((name, text),) = cm["data"].items()
        assert json.loads(text) == DASHBOARDS[name]
    values = yaml.safe_load(next(f for f in bundle.files if f.path.endswith("kube-prometheus-stack/values.yaml")).text)
    assert values["grafana"]["sidecar"]["dashboards"] == {
        "enabled": True,
        "label": "grafana_dashboard",
        "labelValue": "1",
    }


@pytest.mark.parametrize("monitoring", [{"grafana": False}, {"enabled": False}])
def test_no_grafana_renders_no_dashboards(write_inventory: Callable[..., Path], monitoring: dict[str, Any]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data.setdefault("monitoring", {}).update(monitoring)

    bundle, problems = _render(write_inventory(edit))
    assert problems == []
    assert DASHBOARDS_FILE not in {f.path for f in bundle.files}


def test_dashboards_applied_live_then_unchanged(
    write_inventory: Callable[..., Path], kube: KubeObjects, kubeconfig: Path
) -> None:
    namespace = f"lt-mon-{uuid.uuid4().hex[:6]}"
    kube.namespaces.add(namespace)

    def edit(data: dict[str, Any]) -> None:
        data.setdefault("monitoring", {})["namespace"] = namespace

    bundle, _ = _render(write_inventory(edit))
    api = Kubectl(kubeconfig, timeout_s=30)
    first = with_dashboards(CTX, StageResult(ok=True, message="rendered"), api, bundle)
    assert first.ok
    assert f"Grafana dashboards ({DASHBOARDS_FILE}): {len(DASHBOARDS) + 1} object(s) applied" in first.message
    assert "created" in first.message
    for dashboard in DASHBOARDS.values():
        cm = kube.call("GET", f"/api/v1/namespaces/{namespace}/configmaps/grafana-dashboard-{dashboard['uid']}")
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    again = with_dashboards(CTX, StageResult(ok=True, message="rendered"), api, bundle)
    assert f"{len(DASHBOARDS) + 1} unchanged" in again.message


class _Unreachable:
    """A cluster whose API answers nothing (what ``Kubectl`` raises when the server is gone)."""

    def served_kinds(self, api_version: str) -> set[str]:
        raise KubeError(f"kubectl api-resources --api-group for {api_version}: connection refused")


def test_dashboards_not_applied_fail_the_stage_naming_why(write_inventory: Callable[..., Path]) -> None:
    bundle, _ = _render(write_inventory())
    result = with_dashboards(CTX, StageResult(ok=True, message="rendered"), cast(Kubectl, _Unreachable()), bundle)
    why = "Grafana dashboards not applied: kubectl api-resources --api-group for v1: connection refused"
    assert not result.ok
    assert result.message == f"rendered; {why}"
    assert {n: (r.ok, r.message) for n, r in result.nodes.items()} == {n: (False, why) for n in CTX.nodes}


def test_after_a_failure_the_dashboards_are_not_tried(write_inventory: Callable[..., Path]) -> None:
    bundle, _ = _render(write_inventory())
    failed = StageResult(ok=False, nodes={"gpu-01": NodeResult("gpu-01", ok=False)}, message="helm: failed")
    result = with_dashboards(CTX, failed, cast(Kubectl, _Unreachable()), bundle)
    assert result.message == "helm: failed; Grafana dashboards: not applied (the stage failed before it)"


def test_without_grafana_nothing_is_applied_or_said(write_inventory: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data.setdefault("monitoring", {})["grafana"] = False

    bundle, _ = _render(write_inventory(edit))
    result = with_dashboards(CTX, StageResult(ok=True, message="rendered"), cast(Kubectl, _Unreachable()), bundle)
    assert (result.ok, result.message) == (True, "rendered")
