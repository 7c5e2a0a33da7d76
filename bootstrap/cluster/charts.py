"""Helm releases and their values: CNI (Calico, Cilium or Flannel), local-path-provisioner, kube-prometheus-stack,
KEDA (when a model autoscales).

Values follow each pinned chart's ``values.yaml``; the GPU operator's are in
:mod:`bootstrap.cluster.gpu_operator`. Install order matters: CNI, storage, monitoring (its CRDs, so the
GPU operator's and Triton's ServiceMonitors are accepted), KEDA (its CRDs, so the ScaledObjects are), then
the GPU operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from bootstrap.inventory.cluster import PROMETHEUS_RELEASE
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.profiles import version_tuple

#: VXLAN adds 50 bytes of headers; the pod MTU leaves room for them.
VXLAN_OVERHEAD = 50
#: The label the Grafana sidecar finds dashboard ConfigMaps by (kube-prometheus-stack's default, set anyway).
SIDECAR_DASHBOARD_LABEL = ("grafana_dashboard", "1")


@dataclass(frozen=True)
class Release:
    """One Helm release: chart, pinned version, namespace, values, and the inventory fields behind them."""

    name: str
    repo: str
    chart: str
    version: str
    namespace: str
    values: dict[str, Any]
    sources: tuple[str, ...]
    #: ``helm``: a Helm release; ``server-side``: ``helm template`` applied server-side by rackctl, no release
    #: kept (what upstream prescribes for charts of CRDs too large for Helm's release record)
    install: Literal["helm", "server-side"] = "helm"

    def describe(self) -> dict[str, Any]:
        return {
            "release": self.name,
            "repo": self.repo,
            "chart": self.chart,
            "version": self.version,
            "namespace": self.namespace,
            "values_from": list(self.sources),
            **({"install": self.install} if self.install != "helm" else {}),
        }


def _pod_mtu(inv: Inventory) -> int:
    return inv.networks.management.mtu - VXLAN_OVERHEAD


def calico(inv: Inventory) -> Release:
    """tigera-operator: Calico with VXLAN (no BGP peering with the fabric needed), pod CIDR from the inventory."""
    k8s = inv.networks.kubernetes
    network: dict[str, Any] = {
        "bgp": "Disabled",
        "mtu": _pod_mtu(inv),
        "ipPools": [
            {
                "cidr": str(k8s.pod_cidr),
                "blockSize": 26,
                "encapsulation": "VXLAN",
                "natOutgoing": "Enabled",
                "nodeSelector": "all()",
            }
        ],
    }
    mgmt = inv.networks.cidr_of("management")
    if mgmt is not None:
        network["nodeAddressAutodetectionV4"] = {"cidrs": [str(mgmt)]}
    installation: dict[str, Any] = {"enabled": True, "cni": {"type": "Calico"}, "calicoNetwork": network}
    if inv.kubernetes.image_repository:
        installation["registry"] = inv.kubernetes.image_repository
    return Release(
        name="tigera-operator",
        repo="https://docs.tigera.io/calico/charts",
        chart="tigera-operator",
        version=inv.kubernetes.charts.tigera_operator,
        namespace="tigera-operator",
        values={"installation": installation},
        sources=("networks.kubernetes.pod_cidr", "networks.management.mtu", "kubernetes.charts.tigera_operator"),
    )


#: The first tigera-operator chart without Calico's CRDs: from v3.32 they are the chart
#: ``crd.projectcalico.org.v1`` of the same release, applied server-side before the operator (its README).
CALICO_CRDS_CHART_FROM = (3, 32)
CALICO_CRDS_CHART = "crd.projectcalico.org.v1"


def calico_crds(inv: Inventory) -> Release | None:
    """Calico's CRDs at the tigera-operator pin, from v3.32 (None before: that chart carries them)."""
    version = inv.kubernetes.charts.tigera_operator
    if version_tuple(version)[:2] < CALICO_CRDS_CHART_FROM:
        return None
    return Release(
        name="calico-crds",
        repo="https://docs.tigera.io/calico/charts",
        chart=CALICO_CRDS_CHART,
        version=version,
        namespace="tigera-operator",
        values={},
        sources=("kubernetes.charts.tigera_operator",),
        install="server-side",
    )


def cilium(inv: Inventory) -> Release:
    """Cilium with cluster-pool IPAM on the inventory's pod CIDR, VXLAN tunnel, kube-proxy kept."""
    k8s = inv.networks.kubernetes
    return Release(
        name="cilium",
        repo="https://helm.cilium.io",
        chart="cilium",
        version=inv.kubernetes.charts.cilium,
        namespace="kube-system",
        values={
            "ipam": {"mode": "cluster-pool", "operator": {"clusterPoolIPv4PodCIDRList": [str(k8s.pod_cidr)]}},
            "routingMode": "tunnel",
            "tunnelProtocol": "vxlan",
            "MTU": _pod_mtu(inv),
            "kubeProxyReplacement": False,
            "k8sServiceHost": str(k8s.api_vip),
            "k8sServicePort": k8s.api_port,
        },
        sources=("networks.kubernetes.pod_cidr", "networks.kubernetes.api_vip", "kubernetes.charts.cilium"),
    )


def management_probe(inv: Inventory) -> str | None:
    """An address of the management network that no node holds: its gateway, else its highest host address
    not taken by a node or the API VIP. The route to it leaves every node through its management interface,
    from its management address (the API VIP would not do: on the node holding it, the route is local)."""
    cidr = inv.networks.cidr_of("management")
    if cidr is None:
        return None
    if inv.networks.management.gateway is not None:
        return str(inv.networks.management.gateway)
    taken = {inv.networks.kubernetes.api_vip, *(n.address_on("management") for n in inv.nodes)}
    found = next((a for a in reversed(list(cidr.hosts())) if a not in taken), None)
    return str(found) if found is not None else None


def flannel(inv: Inventory) -> Release:
    """Flannel with VXLAN on the pod CIDR, each node's subnet from its Node's podCIDR (``--kube-subnet-mgr``),
    its interface and address the management ones (``--iface-can-reach``, :func:`management_probe`);
    kube-proxy kept."""
    k8s = inv.networks.kubernetes
    probe = management_probe(inv)
    args = ["--ip-masq", "--kube-subnet-mgr", *([f"--iface-can-reach={probe}"] if probe else [])]
    return Release(
        name="flannel",
        repo="https://flannel-io.github.io/flannel/",
        chart="flannel",
        version=inv.kubernetes.charts.flannel,
        namespace="kube-flannel",
        values={"podCidr": str(k8s.pod_cidr), "flannel": {"args": args, "backend": "vxlan"}},
        sources=("networks.kubernetes.pod_cidr", "networks.management", "kubernetes.charts.flannel"),
    )


def cni(inv: Inventory) -> Release:
    """The CNI release the inventory chose (``kubernetes.cni``)."""
    return {"calico": calico, "cilium": cilium, "flannel": flannel}[inv.kubernetes.cni](inv)


def cni_releases(inv: Inventory) -> list[Release]:
    """The CNI's releases in install order: Calico's CRDs first where they are a chart of their own."""
    crds = calico_crds(inv) if inv.kubernetes.cni == "calico" else None
    return [*([crds] if crds is not None else []), cni(inv)]


def local_path(inv: Inventory) -> Release:
    """Rancher local-path-provisioner: StorageClass ``local-path`` (WaitForFirstConsumer) on the NVMe path."""
    return Release(
        name="local-path-provisioner",
        repo="https://charts.containeroo.ch",
        chart="local-path-provisioner",
        version=inv.kubernetes.charts.local_path_provisioner,
        namespace="local-path-storage",
        values={
            "storageClass": {
                "create": True,
                "name": "local-path",
                "defaultClass": True,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
            "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [inv.kubernetes.local_path]}],
        },
        sources=("kubernetes.local_path", "kubernetes.charts.local_path_provisioner"),
    )


def _grafana(inv: Inventory) -> dict[str, Any]:
    """Grafana on or off; its sidecar loads the ConfigMaps labelled ``grafana_dashboard: "1"`` (rackctl's
    dashboards, :mod:`bootstrap.cluster.dashboards`) from the monitoring namespace. Said explicitly rather
    than relying on the chart's defaults."""
    if not inv.monitoring.grafana:
        return {"enabled": False}
    key, value = SIDECAR_DASHBOARD_LABEL
    return {"enabled": True, "sidecar": {"dashboards": {"enabled": True, "label": key, "labelValue": value}}}


def kube_prometheus_stack(inv: Inventory) -> Release:
    """Prometheus that scrapes every ServiceMonitor (DCGM exporter's, Triton's), whatever its labels."""
    mon = inv.monitoring
    spec: dict[str, Any] = {
        # Nil selectors would mean "only this release's monitors": DCGM and Triton's would be ignored.
        "serviceMonitorSelectorNilUsesHelmValues": False,
        "podMonitorSelectorNilUsesHelmValues": False,
        "ruleSelectorNilUsesHelmValues": False,
        "serviceMonitorSelector": {},
        "serviceMonitorNamespaceSelector": {},
        "retention": mon.retention,
        "storageSpec": {
            "volumeClaimTemplate": {
                "spec": {
                    "storageClassName": "local-path",
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": mon.storage_size}},
                }
            }
        },
    }
    return Release(
        name=PROMETHEUS_RELEASE,
        repo="https://prometheus-community.github.io/helm-charts",
        chart="kube-prometheus-stack",
        version=inv.kubernetes.charts.kube_prometheus_stack,
        namespace=mon.namespace,
        values={"prometheus": {"prometheusSpec": spec}, "grafana": _grafana(inv)},
        sources=("monitoring", "kubernetes.charts.kube_prometheus_stack"),
    )


#: Where KEDA runs (the namespace of the chart's own documentation).
KEDA_NAMESPACE = "keda"


def keda(inv: Inventory) -> Release:
    """KEDA: its operator, metrics server (``external.metrics.k8s.io``) and CRDs (``ScaledObject``), for the
    models with ``deployment.autoscaling``. The chart's defaults: nothing of it is set from the inventory
    (each ScaledObject names the Prometheus it asks)."""
    sources = [f"models[{i}].deployment.autoscaling" for i, m in enumerate(inv.models) if m.deployment.autoscaling]
    return Release(
        name="keda",
        repo="https://kedacore.github.io/charts",
        chart="keda",
        version=inv.kubernetes.charts.keda,
        namespace=KEDA_NAMESPACE,
        values={},
        sources=(*sources, "kubernetes.charts.keda"),
    )


def autoscaling_wanted(inv: Inventory) -> bool:
    """Some model scales with demand (``deployment.autoscaling``), so the cluster needs KEDA."""
    return any(m.deployment.autoscaling is not None for m in inv.models)


def cluster_releases(inv: Inventory) -> list[Release]:
    """The charts of the cluster itself, in install order: CNI, storage, monitoring, then KEDA when a model
    autoscales (its ScaledObjects ask that Prometheus; the GPU operator is
    :func:`bootstrap.cluster.gpu_operator.gpu_operator`'s)."""
    out = [*cni_releases(inv), local_path(inv)]
    if inv.monitoring.enabled:
        out.append(kube_prometheus_stack(inv))
    if autoscaling_wanted(inv):
        out.append(keda(inv))
    return out
