"""The lab's stand-in charts of kube-prometheus-stack and keda (rackctl_lab/charts), rendered by the product's
own Helm path with the values rackctl sets: they are the versions the product pins, they run exactly the images
the lab assembles from the pinned programs, and they refuse what they cannot run (Grafana). That they work
is shown on the real cluster (tests/ansible/test_kubernetes_cluster_real.py, ``_scales_with_demand``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bootstrap.cluster.charts import cluster_releases
from bootstrap.cluster.helm_render import chart_source, render_release
from bootstrap.inventory.loader import load_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.mirror.chart_images import chart_images
from rackctl_lab.charts import CHARTS_DIR
from rackctl_lab.components import images
from rackctl_lab.components.pins import (
    AUTOSCALING_PROGRAMS,
    KEDA_CRDS,
    MONITORING_CRDS,
    PROMETHEUS_OPERATOR_VERSION,
    prometheus_release,
)

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"
STAND_INS = ("kube-prometheus-stack", "keda")


def _inventory(tmp_path: Path, *, grafana: bool = False) -> Inventory:
    """The design example with its first model autoscaled and monitoring without (or with) Grafana."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["models"][0]["deployment"]["autoscaling"] = {"min_replicas": 1, "max_replicas": 2}
    data.setdefault("monitoring", {})["grafana"] = grafana
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(path)


def _rendered(inv: Inventory, name: str) -> list[dict[str, Any]]:
    (release,) = [r for r in cluster_releases(inv) if r.name == name]
    source = chart_source(CHARTS_DIR, release)
    assert source is not None, f"no lab chart {release.chart} {release.version} in {CHARTS_DIR}"
    rendered = render_release(release, source)
    assert rendered.problems == [], rendered.problems
    return [doc for docs in rendered.manifests.values() for doc in docs]


def test_the_stand_ins_are_the_product_pins_and_run_the_images_the_lab_assembles(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    found = {c.release.name: c for c in chart_images(inv, CHARTS_DIR) if c.release.name in STAND_INS}
    assert {name: c.state for name, c in found.items()} == dict.fromkeys(STAND_INS, "rendered")
    named = {ref for c in found.values() for ref in c.images}
    assert named == {recipe.ref for recipe in images.autoscaling_recipes()}
    # every program the images hold is pinned once, beside the CRDs generated at the same releases
    held = {name for recipe in images.autoscaling_recipes() for name, _ in recipe.programs}
    assert held == {p.name for p in AUTOSCALING_PROGRAMS}
    versions = {p.name: p.version for p in AUTOSCALING_PROGRAMS}
    assert versions["keda"] == KEDA_CRDS.api.version == f"v{inv.kubernetes.charts.keda}"
    assert versions["prometheus-operator"] == MONITORING_CRDS.api.version == PROMETHEUS_OPERATOR_VERSION
    # the image tag is the Prometheus release the module version numbers (v3.X.Y is module v0.3XX.Y)
    assert prometheus_release("v0.313.1") == "v3.13.1" and prometheus_release("v0.305.0") == "v3.5.0"


def test_the_prometheus_resource_takes_rackctls_selectors_retention_and_volume(tmp_path: Path) -> None:
    """rackctl's values select every ServiceMonitor (DCGM's and Triton's, whatever their labels) and keep the
    data on a local-path volume: the Prometheus resource the operator turns into a StatefulSet says so, and
    its Service is the one the ScaledObjects ask (``monitoring.prometheus_url``)."""
    inv = _inventory(tmp_path)
    objects = _rendered(inv, "kube-prometheus-stack")
    (prometheus,) = [o for o in objects if o["kind"] == "Prometheus"]
    spec = prometheus["spec"]
    assert spec["serviceMonitorSelector"] == {} and spec["serviceMonitorNamespaceSelector"] == {}
    assert spec["retention"] == inv.monitoring.retention
    claim = spec["storage"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "local-path"
    assert claim["resources"]["requests"]["storage"] == inv.monitoring.storage_size
    (service,) = [o for o in objects if o["kind"] == "Service"]
    port = service["spec"]["ports"][0]["port"]
    url = f"http://{service['metadata']['name']}.{inv.monitoring.namespace}.svc:{port}"
    assert url == inv.monitoring.prometheus_url
    assert service["spec"]["selector"]["operator.prometheus.io/name"] == prometheus["metadata"]["name"]


def test_kedas_stand_in_serves_the_external_metrics_api_with_the_certificates_its_operator_makes(
    tmp_path: Path,
) -> None:
    objects = _rendered(_inventory(tmp_path), "keda")
    (api,) = [o for o in objects if o["kind"] == "APIService"]
    assert api["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    assert api["spec"]["service"]["name"] in {s["metadata"]["name"] for s in objects if s["kind"] == "Service"}
    operator = deployments["keda-operator"]["spec"]["template"]["spec"]["containers"][0]
    assert "--enable-cert-rotation=true" in operator["args"]
    # the HPA controller may read what the metrics server serves
    bindings = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    readers = [b for b in bindings if b["roleRef"]["name"] == "keda-external-metrics-reader"]
    assert [s["name"] for b in readers for s in b["subjects"]] == ["horizontal-pod-autoscaler"]


def test_the_monitoring_stand_in_refuses_grafana_it_cannot_run(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, grafana=True)
    (found,) = [c for c in chart_images(inv, CHARTS_DIR) if c.release.name == "kube-prometheus-stack"]
    assert found.state == "not rendered"
    assert "runs no Grafana" in " ".join(p.message for p in found.problems), found.problems
