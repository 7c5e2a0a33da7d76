"""The cluster's own upstream images for air-gapped sites: what kubeadm pulls for the inventory's Kubernetes
version, and the images of the Helm charts rackctl installs, read from the charts rendered with its values.

Real parts: the inventory loader, kubeadm config rendering, Helm's Go SDK (helm-python-sdk) rendering the
charts, and (lab) ``rackctl mirror images --plan`` against the real docker-registry. The pinned upstream
charts cannot be had offline: the charts here are ``helm create`` scaffolds named and versioned as the pinned
local-path-provisioner and gpu-operator (tests/cluster/scaffold_charts.py), with templates added that name
images the way the real charts do (an init container, prometheus-operator's ``--prometheus-config-reloader=``
argument, an option whose value is the next argument (``--helper-image IMAGE``), an ``*_IMAGE`` environment
variable, a pod template a ConfigMap carries (local-path-provisioner's ``helperPod.yaml``), a ClusterPolicy's
repository/image/version components).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bootstrap.cluster.kubeadm import cluster_configuration
from bootstrap.inband.render import group_vars
from bootstrap.inventory import load_inventory
from bootstrap.inventory.cluster import ChartPins
from bootstrap.mirror.chart_images import chart_images, normalised
from bootstrap.mirror.kubeadm_images import control_plane_images, pins_for
from bootstrap.mirror.upstream_images import upstream_images
from tests.mirror.test_upstream_images import _edited_lab, _site

REPO_K8S = "10.200.0.11:5000/k8s"
PINNED_CHARTS = os.environ.get("RACKCTL_CHARTS")
EXTRA = """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Release.Name }}-extra
spec:
  selector: {matchLabels: {app: extra}}
  template:
    metadata: {labels: {app: extra}}
    spec:
      initContainers:
        - name: prepare
          image: quay.io/example/prepare:v2
      containers:
        - name: operator
          image: quay.io/prometheus-operator/prometheus-operator:v0.86.1
          args:
            - --prometheus-config-reloader=quay.io/prometheus-operator/prometheus-config-reloader:v0.86.1
            - --log-level=info
            - --helper-image
            - quay.io/example/helper:v3
          env:
            - {name: VALIDATOR_IMAGE, value: "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v26.7.0"}
            - {name: LOG_LEVEL, value: "info"}
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata:
  name: {{ .Release.Name }}-prometheus
spec:
  image: quay.io/prometheus/prometheus:v3.7.3
  retention: 15d
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-helper
data:
  setup: |-
    #!/bin/sh
    mkdir -m 0777 -p "$VOL_DIR"
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata: {name: helper-pod}
    spec:
      containers:
        - name: helper-pod
          image: busybox:1.37
"""
CLUSTER_POLICY = """\
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata:
  name: cluster-policy
spec:
  driver:
    repository: nvcr.io/nvidia
    image: driver
    version: "{{ .Values.driver.version | default "570" }}"
    manager: {repository: nvcr.io/nvidia/cloud-native, image: k8s-driver-manager, version: v0.8.1}
  toolkit: {repository: nvcr.io/nvidia/k8s, image: container-toolkit, version: v1.18.0}
  devicePlugin: {repository: nvcr.io/nvidia, image: k8s-device-plugin, version: v0.18.0}
  dcgmExporter: {enabled: {{ .Values.dcgmExporter.enabled }}, repository: nvcr.io/nvidia/k8s, image: dcgm-exporter,
                 version: 4.4.1-4.6.0-distroless}
  gds: {enabled: false, repository: nvcr.io/nvidia/cloud-native, image: nvidia-fs, version: 2.26.6}
"""


def _version(version: str, repository: str | None = None) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        doc.setdefault("cluster", {}).setdefault("versions", {})["kubernetes"] = version
        if repository:
            doc.setdefault("kubernetes", {})["image_repository"] = repository

    return edit


# -- kubeadm's images ----------------------------------------------------------------------------------------
#: What each release's own `kubeadm config images list` prints (pause, etcd, coredns): kubernetes/minikube's
#: constants_kubeadm_images.go; 1.32.0's also kubeadm's constants.go on release-1.32; 1.37.2 (the default)
#: from kubeadm's constants.go in module k8s.io/kubernetes@v1.37.2 (etcd: the nearest minor's, 1.36's).
LISTED = {
    "1.29.0": ("3.9", "3.5.10-0", "v1.11.1"),
    "1.32.0": ("3.10", "3.5.16-0", "v1.11.3"),
    "1.37.2": ("3.10.2", "3.7.0-0", "v1.14.6"),
}


@pytest.mark.parametrize("version", sorted(LISTED))
def test_control_plane_images_follow_the_version_and_kubeadm_s_pins(tmp_path: Path, version: str) -> None:
    inv = load_inventory(_edited_lab(tmp_path, _version(version)))
    pins = pins_for(version)
    assert pins is not None and (pins.pause, pins.etcd, pins.coredns) == LISTED[version]
    wanted = {
        f"registry.k8s.io/{name}:v{version}": f"{name}:v{version}"
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
    } | {
        f"registry.k8s.io/pause:{pins.pause}": f"pause:{pins.pause}",
        f"registry.k8s.io/etcd:{pins.etcd}": f"etcd:{pins.etcd}",
        f"registry.k8s.io/coredns/coredns:{pins.coredns}": f"coredns/coredns:{pins.coredns}",  # as upstream
    }
    images = {i.ref: i for i in upstream_images(inv)}
    assert {ref: images[ref].path for ref in wanted} == wanted
    assert all(images[ref].needed_by[0].startswith(f"kubernetes: kubeadm v{version}") for ref in wanted)
    assert "imageRepository" not in cluster_configuration(inv)  # the kubelet pulls registry.k8s.io/...: the mirror


def test_under_image_repository_each_goes_where_kubeadm_names_it(tmp_path: Path) -> None:
    inv = load_inventory(_edited_lab(tmp_path, _version("1.32.0", REPO_K8S)))
    assert cluster_configuration(inv)["imageRepository"] == REPO_K8S
    pins = pins_for("1.32.0")
    assert pins is not None
    images = {i.ref: i.path for i in upstream_images(inv)}
    # kubeadm names <imageRepository>/<name>:<tag>; CoreDNS drops its upstream coredns/ prefix there
    assert images["registry.k8s.io/kube-apiserver:v1.32.0"] == "k8s/kube-apiserver:v1.32.0"
    assert images[f"registry.k8s.io/etcd:{pins.etcd}"] == f"k8s/etcd:{pins.etcd}"
    assert images[f"registry.k8s.io/coredns/coredns:{pins.coredns}"] == f"k8s/coredns:{pins.coredns}"
    # containerd's sandbox image is kubeadm's pause, named under the repository too (rendered for the role)
    assert "registry.k8s.io/pause:3.9" not in images
    sandbox = group_vars(inv)["k8s_cluster.yml"]["container_runtime_sandbox_image"]
    assert sandbox == f"{REPO_K8S}/pause:{pins.pause}" and pins.pause == "3.10"


def test_pins_move_within_a_minor() -> None:
    """kubeadm 1.33.6 raised 1.33's etcd (kubernetes#135018): the table is per patch range, not per minor."""
    before, after = pins_for("1.33.5"), pins_for("v1.33.6")
    assert before is not None and after is not None
    assert (before.etcd, after.etcd) == ("3.5.21-0", "3.5.24-0") and before.coredns == after.coredns == "v1.12.0"
    assert pins_for("1.23.17") is None and pins_for("1.30.15") is None and pins_for("1.33") is None
    assert pins_for("1.37.1") is None  # only 1.37.2's source was read: other 1.37 patches are unknown pins


def test_an_unknown_release_lists_its_unknown_pins_with_the_command_that_answers(tmp_path: Path) -> None:
    inv = load_inventory(_edited_lab(tmp_path, _version("1.30.15")))  # newer than the table's 1.30.14
    images = {i.ref: i for i in upstream_images(inv)}
    assert images["registry.k8s.io/kube-apiserver:v1.30.15"].pin == "tag v1.30.15"
    unknown = [i for i in control_plane_images(inv) if i.unknown_pin]
    assert [i.ref for i in unknown] == [f"registry.k8s.io/{n}" for n in ("pause", "etcd", "coredns/coredns")]
    # containerd keeps role container_runtime's own sandbox image, a known tag
    sandbox = group_vars(inv)["k8s_cluster.yml"]["container_runtime_sandbox_image"]
    assert sandbox == "registry.k8s.io/pause:3.9" and images[sandbox].pin == "tag 3.9"
    for image in unknown:
        assert images[image.ref].pin == "unknown"
        assert "kubeadm config images list --kubernetes-version v1.30.15" in images[image.ref].unknown_pin
        assert "a release rackctl knows (1.30.0-1.30.14)" in images[image.ref].unknown_pin


# -- the charts' images ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    helm = pytest.importorskip(
        "helm_python", reason="helm-python-sdk is not installed (pip install 'rackctl[cluster]')"
    )
    from tests.cluster.scaffold_charts import LOCAL_PATH_TEMPLATES, scaffold_chart

    root = tmp_path_factory.mktemp("charts")
    scaffold_chart(helm, root, "local-path-provisioner", "0.0.32", templates={**LOCAL_PATH_TEMPLATES, "x.yaml": EXTRA})
    return scaffold_chart(helm, root, "gpu-operator", "v26.7.0", templates={"clusterpolicy.yaml": CLUSTER_POLICY})


def test_chart_images_come_out_of_the_rendered_charts(tmp_path: Path, charts: Path) -> None:
    inv = load_inventory(_edited_lab(tmp_path, lambda _doc: None))
    found = {c.release.chart: c for c in chart_images(inv, charts)}
    assert {c: f.state for c, f in found.items()} == {
        "crd.projectcalico.org.v1": "chart not at hand",  # Calico's CRDs (v3.32+): no images, still a chart to pull
        "tigera-operator": "chart not at hand",
        "local-path-provisioner": "rendered",
        "kube-prometheus-stack": "chart not at hand",
        "gpu-operator": "rendered",
    }
    local = found["local-path-provisioner"]
    assert set(local.images) == {
        "docker.io/library/nginx:1.16.0",  # the scaffold's Deployment: a Docker Hub short name, as containerd asks
        "quay.io/example/prepare:v2",
        "quay.io/prometheus-operator/prometheus-operator:v0.86.1",
        "quay.io/prometheus-operator/prometheus-config-reloader:v0.86.1",
        "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v26.7.0",
        "quay.io/prometheus/prometheus:v3.7.3",  # a custom resource's spec.image
        "quay.io/example/helper:v3",  # an option's value in the next argument (--helper-image IMAGE)
        "docker.io/library/busybox:1.37",  # a pod template a ConfigMap carries (local-path's helperPod.yaml)
    }
    assert "argument --helper-image" in local.images["quay.io/example/helper:v3"]
    assert local.images["docker.io/library/busybox:1.37"].endswith("data helperPod.yaml container helper-pod")
    assert (
        "argument --prometheus-config-reloader"
        in local.images["quay.io/prometheus-operator/prometheus-config-reloader:v0.86.1"]
    )
    operands = set(found["gpu-operator"].images) - {"docker.io/library/nginx:1.16.0"}
    # the driver itself is not taken from the ClusterPolicy (the operator appends the node's OS to its tag), nor
    # a disabled component (gds)
    assert operands == {
        "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.1",
        "nvcr.io/nvidia/k8s/container-toolkit:v1.18.0",
        "nvcr.io/nvidia/k8s-device-plugin:v0.18.0",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-distroless",
    }
    missing = found["tigera-operator"].describe(charts)
    assert missing["images"] == [] and f"not in --charts {charts}" in missing["note"]
    assert "<the chart's operator image> --print-images=list" in missing["operator_images"]  # Calico's own images
    assert "operator_images" not in found["gpu-operator"].describe(charts)
    assert (
        missing["fix"].startswith("helm pull tigera-operator --repo https://")
        and f"--version {ChartPins().tigera_operator}" in missing["fix"]
    )

    images = {i.ref: i for i in upstream_images(inv, list(found.values()))}
    toolkit = images["nvcr.io/nvidia/k8s/container-toolkit:v1.18.0"]
    assert toolkit.path == "nvidia/k8s/container-toolkit:v1.18.0"
    policy = "gpu-operator/templates/clusterpolicy.yaml: ClusterPolicy/cluster-policy"
    assert toolkit.needed_by == (f"chart gpu-operator v26.7.0 ({policy} spec.toolkit)",)
    assert len(images["docker.io/library/nginx:1.16.0"].needed_by) == 2  # each chart that pulls it


def test_a_chart_of_another_version_is_reported_not_guessed(tmp_path: Path) -> None:
    helm = pytest.importorskip(
        "helm_python", reason="helm-python-sdk is not installed (pip install 'rackctl[cluster]')"
    )
    from tests.cluster.scaffold_charts import scaffold_chart

    charts = scaffold_chart(helm, tmp_path / "c", "local-path-provisioner", "0.0.31")
    (charts / "local-path-provisioner-0.0.31.tgz").rename(charts / "local-path-provisioner-0.0.32.tgz")
    inv = load_inventory(_edited_lab(tmp_path, lambda _doc: None))
    (local,) = [c for c in chart_images(inv, charts) if c.release.chart == "local-path-provisioner"]
    assert local.state == "not rendered" and local.images == {}
    assert "is version 0.0.31, the inventory pins 0.0.32" in local.describe(charts)["note"]


@pytest.mark.skipif(
    not PINNED_CHARTS,
    reason="the pinned chart archives (tigera-operator, local-path-provisioner, kube-prometheus-stack, gpu-operator) "
    "cannot be had offline here (chart repositories and GitHub unreachable); set RACKCTL_CHARTS to a directory of "
    "<chart>-<version>.tgz from `helm pull` to run this",
)
def test_the_pinned_charts_images(tmp_path: Path) -> None:
    """The real charts: every one renders, and the images an air-gapped site needs come out of them."""
    inv = load_inventory(_edited_lab(tmp_path, lambda _doc: None))
    charts = Path(str(PINNED_CHARTS))
    found = {c.release.chart: c for c in chart_images(inv, charts)}
    assert {c: f.state for c, f in found.items()} == dict.fromkeys(found, "rendered")
    every = " ".join(i for f in found.values() for i in f.images)
    for name in (
        "tigera/operator:",
        "local-path-provisioner:",
        "prometheus-operator:",
        "prometheus-config-reloader:",
        "prometheus/prometheus:",
        "gpu-operator:",
        "container-toolkit:",
        "k8s-device-plugin:",
        "dcgm-exporter:",
        "gpu-operator-validator:",
        "node-feature-discovery:",
    ):
        assert f"/{name}" in every, (name, sorted(every.split()))
    tigera = found["tigera-operator"].describe(charts)["operator_images"]
    assert "quay.io/tigera/operator:" in tigera and "--print-images=list" in tigera


def test_normalised_names_docker_hub_as_containerd_does() -> None:
    assert normalised("nginx:1") == "docker.io/library/nginx:1"
    assert normalised("calico/node:v3") == "docker.io/calico/node:v3"
    assert normalised("quay.io/a/b:1") == "quay.io/a/b:1" and normalised("localhost:5000/a:1") == "localhost:5000/a:1"


# -- the CLI, against the real registry ------------------------------------------------------------------------
@pytest.mark.lab
@pytest.mark.slow
def test_plan_lists_the_cluster_images_unknown_pins_and_charts(tmp_path: Path, charts: Path) -> None:
    with _site(tmp_path, _version("1.30.15")) as site:
        rc, plan, _ = site.images("--plan", "--charts", str(charts))
        assert rc == 1 and plan["ok"] is False  # the unknown pins: the operator has something to do
        states = {u["image"]: u for u in plan["upstream"]}
        assert states["registry.k8s.io/kube-apiserver:v1.30.15"]["state"] == "absent"
        assert states["registry.k8s.io/kube-apiserver:v1.30.15"]["target"] == "10.200.0.11:5000/kube-apiserver:v1.30.15"
        etcd = states["registry.k8s.io/etcd"]
        assert etcd["state"] == "unknown pin" and etcd["pin"] == "unknown" and not etcd["ok"]
        assert "kubeadm config images list --kubernetes-version v1.30.15" in etcd["fix"]
        assert "archive" not in etcd and etcd["target"] == "10.200.0.11:5000/etcd"
        toolkit = states["nvcr.io/nvidia/k8s/container-toolkit:v1.18.0"]
        assert toolkit["state"] == "absent" and toolkit["needed_by"][0].startswith("chart gpu-operator v26.7.0")
        assert {c["chart"]: c["state"] for c in plan["charts"]}["kube-prometheus-stack"] == "chart not at hand"

        rc, _, shown = site.images("--plan", "--charts", str(charts), as_json=False)
        assert rc == 1
        assert "unknown pin: registry.k8s.io/etcd -> 10.200.0.11:5000/etcd" in shown
        assert "fix: run `kubeadm config images list --kubernetes-version v1.30.15`" in shown
        assert (
            "absent: nvcr.io/nvidia/k8s/container-toolkit:v1.18.0 -> 10.200.0.11:5000/nvidia/k8s/container-toolkit"
            in shown
        )
        kps = ChartPins().kube_prometheus_stack
        assert f"chart kube-prometheus-stack {kps} (kube-prometheus-stack): chart not at hand" in shown
        assert "chart gpu-operator v26.7.0 (gpu-operator): rendered" in shown
        assert "not listed: tigera-operator deploys Calico's images" in shown
