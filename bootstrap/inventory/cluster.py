"""Inventory sections for the cluster software: Kubernetes, the NVIDIA GPU stack, monitoring.

The Kubernetes version comes from the software profile (``cluster.versions.kubernetes``) and the API
VIP, pod and service CIDRs from ``networks.kubernetes``; these sections hold the choices around them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_CHART_VERSION_RE = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$")
_DRIVER_RE = re.compile(r"^[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?$")

#: The kube-prometheus-stack release name (Prometheus' selectors match on ``release: <name>`` labels).
PROMETHEUS_RELEASE = "kube-prometheus-stack"
#: The chart's Prometheus Service: ``<fullname>-prometheus`` (fullname = the release name when it holds the
#: chart's name) on the chart's ``prometheus.service.port``, 9090.
PROMETHEUS_SERVICE = f"{PROMETHEUS_RELEASE}-prometheus"
PROMETHEUS_PORT = 9090


#: a kubeadm preflight check's name as kubeadm prints it ([ERROR NAME]: ...)
_PREFLIGHT_CHECK_RE = re.compile(r"^[A-Za-z][A-Za-z0-9.-]*$")
#: KubeProxyConfiguration / KubeletConfiguration fields other inventory fields own: set there, never overridden
KUBE_PROXY_OWNED = {
    "apiVersion": "the release's, from cluster.versions.kubernetes",
    "kind": "always KubeProxyConfiguration",
    "mode": "from kubernetes.kube_proxy_mode: set that instead",
    "clusterCIDR": "from networks.kubernetes.pod_cidr: set that instead",
}
KUBELET_OWNED = {
    "apiVersion": "the release's, from cluster.versions.kubernetes",
    "kind": "always KubeletConfiguration",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, validate_default=True)


def _chart_version(value: str) -> str:
    if not _CHART_VERSION_RE.match(value):
        raise ValueError(f"{value!r} is not a chart version; write it as x.y.z, e.g. 1.18.3")
    return value


class ChartPins(_Strict):
    """Pinned Helm chart versions (the GPU operator's pin is ``cluster.versions.gpu_operator``)."""

    tigera_operator: str = Field(
        default="v3.32.1",
        description="Calico's tigera-operator chart (from v3.32 with Calico's CRD chart of the same version).",
    )
    cilium: str = Field(default="1.18.3", description="Cilium chart (when cni: cilium).")
    flannel: str = Field(default="v0.28.10", description="Flannel chart (when cni: flannel).")
    local_path_provisioner: str = Field(default="0.0.32", description="Rancher local-path-provisioner chart.")
    kube_prometheus_stack: str = Field(default="88.5.3", description="prometheus-community/kube-prometheus-stack.")
    keda: str = Field(
        default="2.21.0",
        description="kedacore/keda chart (KEDA v2.21.0; installed when a model sets deployment.autoscaling).",
    )

    @field_validator("tigera_operator", "cilium", "flannel", "local_path_provisioner", "kube_prometheus_stack", "keda")
    @classmethod
    def _version(cls, value: str) -> str:
        return _chart_version(value)


class KubernetesSettings(_Strict):
    """How the cluster is built (``kubernetes:`` in the inventory)."""

    cni: Literal["calico", "cilium", "flannel"] = Field(
        default="calico", description="Pod network; see docs/kubernetes.md (the lab proves flannel)."
    )
    api_endpoint: Literal["kube-vip", "keepalived-haproxy"] = Field(
        default="kube-vip", description="What holds the API VIP: kube-vip static pods, or keepalived + haproxy."
    )
    kube_proxy_mode: Literal["iptables", "ipvs"] = "iptables"
    kube_proxy: dict[str, Any] = Field(
        default_factory=dict,
        description="KubeProxyConfiguration fields to set (camelCase, checked against the API), e.g. conntrack.",
    )
    vip_interface: str = Field(
        default="mgmt0", pattern=r"^[a-z0-9][a-z0-9_.-]{0,14}$", description="Interface the VIP is announced on."
    )
    local_path: str = Field(
        default="/mnt/nvme/local-path-provisioner", description="NVMe directory local-path volumes live in."
    )
    image_repository: str | None = Field(
        default=None, description="Registry for control-plane images (the head node's), e.g. head-01:5000/k8s."
    )
    charts: ChartPins = Field(default_factory=ChartPins)
    kubelet: dict[str, Any] = Field(
        default_factory=dict, description="KubeletConfiguration fields to set (camelCase, checked against the API)."
    )
    api_server_extra_args: dict[str, str] = Field(
        default_factory=dict, description="Extra kube-apiserver flags, name -> value (without the leading --)."
    )
    ignore_preflight_errors: list[str] = Field(
        default_factory=list,
        description=(
            "kubeadm preflight checks reported as warnings on every node (nodeRegistration.ignorePreflightErrors),"
            " e.g. SystemVerification on a host that still has cgroup v1; never 'all'."
        ),
    )

    @field_validator("ignore_preflight_errors")
    @classmethod
    def _checks(cls, value: list[str]) -> list[str]:
        for check in value:
            if check.lower() == "all":
                raise ValueError("'all' would hide every preflight error; name each check, e.g. SystemVerification")
            if not _PREFLIGHT_CHECK_RE.match(check):
                raise ValueError(
                    f"{check!r} is not a kubeadm preflight check name; use the name kubeadm prints in brackets, "
                    "e.g. SystemVerification or FileContent--proc-sys-net-ipv4-ip_forward"
                )
        return value

    @field_validator("kube_proxy")
    @classmethod
    def _proxy_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _not_owned(value, KUBE_PROXY_OWNED, "KubeProxyConfiguration")

    @field_validator("kubelet")
    @classmethod
    def _kubelet_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _not_owned(value, KUBELET_OWNED, "KubeletConfiguration")

    @property
    def cgroup_driver(self) -> str:
        """The nodes' cgroup driver: ``kubelet.cgroupDriver``, systemd unless set. The kubelet's
        KubeletConfiguration and containerd's runc (role container_runtime's ``SystemdCgroup``, through the group
        var ``container_runtime_cgroup_driver``) both follow it, so the two always agree."""
        return str(self.kubelet.get("cgroupDriver") or "systemd")

    @field_validator("local_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError(f"{value!r} is not an absolute path; write e.g. /mnt/nvme/local-path-provisioner")
        return value.rstrip("/") or "/"


def _not_owned(value: dict[str, Any], owned: dict[str, str], kind: str) -> dict[str, Any]:
    """``value`` where it sets no field another inventory field owns (it would be overridden silently)."""
    for key in value:
        if key in owned:
            raise ValueError(
                f"{key!r} is rackctl's to set ({owned[key]}); remove it from this mapping, which holds the "
                f"other {kind} fields"
            )
    return value


MigStrategy = Literal["none", "single", "mixed"]


class GpuProfile(_Strict):
    """GPU operator settings for the nodes of one hardware model (``nvidia.profiles.<model>``)."""

    driver: Literal["operator", "host"] = Field(
        default="operator", description="operator: the GPU operator's driver container; host: installed on the OS."
    )
    driver_version: str | None = Field(
        default=None, description="Pinned driver; unset means cluster.versions.nvidia_driver."
    )
    fabric_manager_version: str | None = Field(
        default=None, description="Host Fabric Manager package version (host driver only); must equal the driver's."
    )
    mig_strategy: MigStrategy = Field(default="none", description="GPU operator mig.strategy.")
    mig_config: str | None = Field(
        default=None, description="Default mig-parted config for these nodes (nodes may set mig_profile)."
    )
    time_slicing_replicas: int | None = Field(
        default=None, ge=2, le=64, description="Share each GPU this many ways (device plugin time-slicing)."
    )

    @field_validator("driver_version", "fabric_manager_version")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        if value is not None and not _DRIVER_RE.match(value):
            raise ValueError(f"{value!r} is not an NVIDIA driver version; write it like 580.95.05")
        return value

    @model_validator(mode="after")
    def _mig(self) -> GpuProfile:
        if self.mig_config is not None and self.mig_strategy == "none":
            raise ValueError("mig_config is set but mig_strategy is none; set mig_strategy: single or mixed")
        return self


class NvidiaSettings(_Strict):
    """The GPU stack (``nvidia:``): GPU operator values per hardware model."""

    namespace: str = Field(default="gpu-operator", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    profiles: dict[str, GpuProfile] = Field(
        default_factory=dict, description="Hardware model (R760xa, XE8640, XE9680, ...) -> settings."
    )
    cdi: bool = Field(default=False, description="Container Device Interface (cdi.enabled).")

    def profile_for(self, model: str) -> GpuProfile:
        """The settings of a hardware model, defaults when the inventory names none."""
        return self.profiles.get(model) or GpuProfile()


class MonitoringSettings(_Strict):
    """kube-prometheus-stack (``monitoring:``)."""

    enabled: bool = True
    namespace: str = Field(default="monitoring", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    retention: str = Field(default="15d", pattern=r"^[0-9]+(ms|s|m|h|d|w|y)$")
    storage_size: str = Field(default="50Gi", pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)$")
    grafana: bool = True

    @property
    def prometheus_url(self) -> str:
        """kube-prometheus-stack's Prometheus as a pod of the cluster reaches it (KEDA's ``serverAddress``)."""
        return f"http://{PROMETHEUS_SERVICE}.{self.namespace}.svc:{PROMETHEUS_PORT}"
