"""What ``render cluster`` produces, per Kubernetes version and per choice in the inventory."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap.cluster.charts import cluster_releases, management_probe
from bootstrap.cluster.render import Bundle, render_cluster
from bootstrap.cluster.validate import validate_bundle
from bootstrap.inventory.loader import load_inventory
from bootstrap.triton.repository_volume import DIGEST_ANNOTATION


def _render(path: Path) -> Bundle:
    inv = load_inventory(path)
    bundle = render_cluster(inv)
    assert validate_bundle(inv, bundle) == []
    return bundle


def _docs(bundle: Bundle, path: str) -> list[dict[str, Any]]:
    return next(f for f in bundle.files if f.path == path).objects


def _values(bundle: Bundle, release: str) -> dict[str, Any]:
    text = next(f for f in bundle.files if f.path == f"charts/{release}/values.yaml").content()
    return yaml.safe_load(text)


def _profile(name: str) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["cluster"]["software_profile"] = name

    return edit


def test_current_profile_uses_v1beta4(write_inventory: Callable[..., Path]) -> None:
    bundle = _render(write_inventory())
    assert (bundle.kubernetes_version, bundle.kubeadm_api) == ("1.37.2", "kubeadm.k8s.io/v1beta4")
    init, cluster, kubelet, proxy = _docs(bundle, "kubeadm/head-01.yaml")
    assert init["kind"] == "InitConfiguration"
    assert init["timeouts"]["controlPlaneComponentHealthCheck"] == "4m0s"
    assert {"name": "node-ip", "value": "10.20.0.21"} in init["nodeRegistration"]["kubeletExtraArgs"]
    assert cluster["kubernetesVersion"] == "v1.37.2"
    assert cluster["controlPlaneEndpoint"] == "10.20.0.10:6443"
    assert cluster["networking"] == {
        "serviceSubnet": "10.96.0.0/12",
        "podSubnet": "10.244.0.0/16",
        "dnsDomain": "cluster.local",
    }
    assert "timeoutForControlPlane" not in cluster["apiServer"]
    assert kubelet["cgroupDriver"] == "systemd"
    assert proxy["clusterCIDR"] == "10.244.0.0/16"
    (join_cp,) = _docs(bundle, "kubeadm/cp-02.yaml")
    assert join_cp["controlPlane"]["localAPIEndpoint"]["advertiseAddress"] == "10.20.0.22"
    assert join_cp["controlPlane"]["certificateKey"] == "${KUBEADM_CERTIFICATE_KEY}"
    (join_worker,) = _docs(bundle, "kubeadm/gpu-xe9680-01.yaml")
    assert "controlPlane" not in join_worker
    assert join_worker["nodeRegistration"]["taints"] == []
    assert join_worker["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "10.20.0.10:6443"


def test_design_guide_profile_uses_v1beta3_and_corrects_docker(write_inventory: Callable[..., Path]) -> None:
    bundle = _render(write_inventory(_profile("dell-dvd-2024")))
    assert (bundle.kubernetes_version, bundle.kubeadm_api) == ("1.27.6", "kubeadm.k8s.io/v1beta3")
    init, cluster, *_ = _docs(bundle, "kubeadm/head-01.yaml")
    assert init["nodeRegistration"]["kubeletExtraArgs"]["node-ip"] == "10.20.0.21"
    assert "timeouts" not in init
    assert cluster["apiServer"]["timeoutForControlPlane"] == "4m0s"
    (join,) = _docs(bundle, "kubeadm/gpu-l40s-01.yaml")
    assert join["discovery"]["timeout"] == "5m0s"
    gpu = _values(bundle, "gpu-operator")
    assert gpu["operator"]["defaultRuntime"] == "containerd"
    assert gpu["driver"]["version"] == "535.161.08"
    assert sum("defaultRuntime" in c and "docker" in c for c in bundle.corrections) == 1  # reported, once
    # 1.27: kube-vip uses admin.conf from the start, no super-admin.conf
    assert not any(f.path.endswith("kube-vip-init.yaml") for f in bundle.files)


def test_kube_vip_mounts_super_admin_on_the_first_control_plane_from_1_29(write_inventory: Callable[..., Path]) -> None:
    bundle = _render(write_inventory())
    inits = [f for f in bundle.files if f.path.endswith("kube-vip-init.yaml")]
    assert [f.path for f in inits] == ["static-pods/head-01/kube-vip-init.yaml"]
    (pod,) = inits[0].objects
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/super-admin.conf"
    (steady,) = _docs(bundle, "static-pods/cp-02/kube-vip.yaml")
    env = {e["name"]: e["value"] for e in steady["spec"]["containers"][0]["env"]}
    assert env["address"] == "10.20.0.10" and env["vip_interface"] == "mgmt0"
    assert steady["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/admin.conf"


@pytest.mark.parametrize(
    ("kube_vip", "variable"), [("v1.2.3", "vip_subnet"), ("v0.9.0", "vip_subnet"), ("v0.8.9", "vip_cidr")]
)
def test_kube_vip_reads_the_vip_prefix_under_its_release_s_name(
    write_inventory: Callable[..., Path], kube_vip: str, variable: str
) -> None:
    """kube-vip v0.9.0 renamed vip_cidr to vip_subnet and reads vip_cidr no more (its config_envvar.go)."""

    def edit(data: dict[str, Any]) -> None:
        data["cluster"].setdefault("versions", {})["kube_vip"] = kube_vip

    (pod,) = _docs(_render(write_inventory(edit)), "static-pods/cp-02/kube-vip.yaml")
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    (other,) = {"vip_subnet", "vip_cidr"} - {variable}
    assert env[variable] == "32" and other not in env
    assert pod["spec"]["containers"][0]["image"].endswith(f"kube-vip:{kube_vip}")


def test_keepalived_haproxy_alternative(write_inventory: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"api_endpoint": "keepalived-haproxy"}

    bundle = _render(write_inventory(edit))
    paths = {f.path for f in bundle.files}
    assert not any("kube-vip" in p for p in paths)
    assert {"host/head-01/keepalived.conf", "host/cp-03/haproxy.cfg"} <= paths
    keepalived = next(f for f in bundle.files if f.path == "host/cp-02/keepalived.conf").content()
    assert "state BACKUP" in keepalived and "10.20.0.10/32" in keepalived and "10.20.0.21" in keepalived
    haproxy = next(f for f in bundle.files if f.path == "host/head-01/haproxy.cfg").content()
    assert "server cp-03 10.20.0.23:6443" in haproxy
    _, cluster, *_ = _docs(bundle, "kubeadm/head-01.yaml")
    assert cluster["controlPlaneEndpoint"] == "10.20.0.10:8443"


def test_chart_values_follow_the_inventory(write_inventory: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"local_path": "/mnt/nvme0/k8s"}
        data["nvidia"] = {"profiles": {"XE9680": {"mig_strategy": "mixed", "mig_config": "all-balanced"}}}

    bundle = _render(write_inventory(edit))
    calico = _values(bundle, "tigera-operator")["installation"]["calicoNetwork"]
    assert calico["ipPools"][0]["cidr"] == "10.244.0.0/16"
    assert calico["mtu"] == 8950  # management MTU 9000 less VXLAN
    local = _values(bundle, "local-path-provisioner")
    assert local["nodePathMap"][0]["paths"] == ["/mnt/nvme0/k8s"]
    assert local["storageClass"]["volumeBindingMode"] == "WaitForFirstConsumer"
    prom = _values(bundle, "kube-prometheus-stack")["prometheus"]["prometheusSpec"]
    assert prom["serviceMonitorSelectorNilUsesHelmValues"] is False
    gpu = _values(bundle, "gpu-operator")
    assert "operator" not in gpu  # chart v26.7.0 has no operator.defaultRuntime (detected per node since v25.3.0)
    assert gpu["mig"]["strategy"] == "mixed" and gpu["migManager"]["enabled"] is True
    assert gpu["dcgmExporter"]["serviceMonitor"]["additionalLabels"] == {"release": "kube-prometheus-stack"}
    assert gpu["toolkit"]["enabled"] and gpu["nfd"]["enabled"]
    labels = yaml.safe_load(next(f for f in bundle.files if f.path == "nodes/labels.yaml").content())
    assert labels["gpu-xe9680-01"]["labels"]["nvidia.com/mig.config"] == "all-balanced"
    assert "nvidia.com/mig.config" not in labels["gpu-l40s-01"]["labels"]
    # Triton's ServiceMonitor carries the release label too, and is rendered by the triton module
    (monitor,) = _docs(bundle, "triton/llama-2-70b-fp8/servicemonitor.yaml")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert [r["release"] for r in bundle.releases] == [
        "calico-crds",  # Calico's CRDs are a chart of their own from v3.32 (the default pin), applied first
        "tigera-operator",
        "local-path-provisioner",
        "kube-prometheus-stack",
        "gpu-operator",
    ]


def test_flannel_is_a_cni_choice_with_its_chart_and_the_kube_proxy_fields_set(
    write_inventory: Callable[..., Path],
) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"cni": "flannel", "kube_proxy": {"conntrack": {"maxPerCore": 0}}}

    bundle = _render(write_inventory(edit))
    flannel = next(r for r in bundle.releases if r["release"] == "flannel")
    assert (flannel["chart"], flannel["version"], flannel["namespace"]) == ("flannel", "v0.28.10", "kube-flannel")
    values = _values(bundle, "flannel")
    assert values["podCidr"] == "10.244.0.0/16"
    # flanneld's interface and address: those that reach the management gateway (never the API VIP: on the
    # node holding it the route is local, through lo; the real cluster test checks each node's address)
    assert values["flannel"] == {
        "args": ["--ip-masq", "--kube-subnet-mgr", "--iface-can-reach=10.20.0.1"], "backend": "vxlan",
    }  # fmt: skip
    inv = load_inventory(write_inventory(edit))
    without_gateway = inv.model_copy(
        update={"networks": inv.networks.model_copy(
            update={"management": inv.networks.management.model_copy(update={"gateway": None})}
        )}
    )  # fmt: skip
    assert management_probe(without_gateway) == "10.20.0.254"  # the highest address no node nor the VIP has
    assert [r["release"] for r in bundle.releases] == [
        "flannel", "local-path-provisioner", "kube-prometheus-stack", "gpu-operator",
    ]  # fmt: skip
    *_, proxy = _docs(bundle, "kubeadm/head-01.yaml")
    assert proxy["conntrack"] == {"maxPerCore": 0} and proxy["mode"] == "iptables"


def test_kube_proxy_fields_merge_into_rackctls_own_mappings(write_inventory: Callable[..., Path]) -> None:
    """ipvs.scheduler set in the inventory keeps the strict ARP rackctl sets under IPVS (a mapping merged, not
    replaced); kubelet fields merge the same way."""

    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {
            "kube_proxy_mode": "ipvs",
            "kube_proxy": {"ipvs": {"scheduler": "lc"}},
            "kubelet": {"maxPods": 200},
        }

    *_, kubelet, proxy = _docs(_render(write_inventory(edit)), "kubeadm/head-01.yaml")
    assert proxy["mode"] == "ipvs" and proxy["ipvs"] == {"strictARP": True, "scheduler": "lc"}
    assert kubelet["maxPods"] == 200 and kubelet["cgroupDriver"] == "systemd"


def test_host_driver_profile_pins_fabric_manager(write_inventory: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["nvidia"] = {"profiles": {"XE9680": {"driver": "host", "driver_version": "580.95.05"}}}

    bundle = _render(write_inventory(edit))
    labels = yaml.safe_load(next(f for f in bundle.files if f.path == "nodes/labels.yaml").content())
    assert labels["gpu-xe9680-01"]["labels"]["nvidia.com/gpu.deploy.driver"] == "false"
    assert "nvidia.com/gpu.deploy.driver" not in labels["gpu-l40s-01"]["labels"]
    plan = yaml.safe_load(next(f for f in bundle.files if f.path == "nvidia/fabric-manager.yaml").content())
    assert plan["gpu-xe9680-01"]["packages"] == {
        "nvidia-fabricmanager-580": "580.95.05-*",
        "cuda-drivers-fabricmanager-580": "580.95.05-*",
    }
    assert "operator" in plan["gpu-l40s-01"]["fabric_manager"]
    assert _values(bundle, "gpu-operator")["driver"]["enabled"] is True  # the L40S node still uses it


def test_no_secret_is_rendered(write_inventory: Callable[..., Path]) -> None:
    bundle = _render(write_inventory())
    text = "\n".join(f.content() for f in bundle.files)
    # The model repositories' sha256 digests (public: hashes of the rendered repository files) are no secret.
    digests = re.findall(rf"(?:{re.escape(DIGEST_ANNOTATION)}: |\bdigest\W+)([a-f0-9]{{64}})\b", text)
    assert len(digests) == 2 * len(load_inventory(write_inventory()).models)  # annotation + ConfigMap, per model
    for digest in digests:
        text = text.replace(digest, "<repository digest>")
    assert not re.search(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b", text)  # a bootstrap token
    assert not re.search(r"\b[a-f0-9]{64}\b", text)  # a certificate key / CA hash
    assert "RACKCTL_BMC_PASSWORD" not in text


def test_preflight_checks_the_inventory_lets_through_are_in_every_nodes_registration(
    write_inventory: Callable[..., Path],
) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"ignore_preflight_errors": ["SystemVerification"]}

    bundle = _render(write_inventory(edit))
    init, *_ = _docs(bundle, "kubeadm/head-01.yaml")
    join, *_ = _docs(bundle, "kubeadm/cp-02.yaml")
    assert init["nodeRegistration"]["ignorePreflightErrors"] == ["SystemVerification"]
    assert join["nodeRegistration"]["ignorePreflightErrors"] == ["SystemVerification"]
    plain, *_ = _docs(_render(write_inventory()), "kubeadm/head-01.yaml")
    assert "ignorePreflightErrors" not in plain["nodeRegistration"]


def test_ignoring_every_preflight_check_is_refused_naming_the_field(
    write_inventory: Callable[..., Path], tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from bootstrap.cli import cli

    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"ignore_preflight_errors": ["all"]}

    result = CliRunner().invoke(cli, ["validate", "-i", str(write_inventory(edit))])
    assert result.exit_code != 0
    assert "kubernetes.ignore_preflight_errors" in result.output and "name each check" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("cni", "tigera", "first_two"),
    [
        ("calico", "v3.31.7", ["tigera-operator", "local-path-provisioner"]),
        ("calico", "v3.32.1", ["calico-crds", "tigera-operator"]),
        ("flannel", "v3.32.1", ["flannel", "local-path-provisioner"]),
    ],
)
def test_calicos_crds_are_a_release_of_their_own_from_v3_32_applied_before_the_operator(
    write_inventory: Callable[..., Path], cni: str, tigera: str, first_two: list[str]
) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["kubernetes"] = {"cni": cni, "charts": {"tigera_operator": tigera}}

    releases = cluster_releases(load_inventory(write_inventory(edit)))
    assert [r.name for r in releases[:2]] == first_two
    crds = [r for r in releases if r.name == "calico-crds"]
    assert all(
        (r.chart, r.version, r.install, r.values) == ("crd.projectcalico.org.v1", tigera, "server-side", {})
        for r in crds
    )
