"""Typed models of the kubeadm configuration API (v1beta3 and v1beta4), kubelet and kube-proxy configs.

Only the fields rackctl writes or lets the inventory override are modelled; every model forbids unknown
keys, so a misspelt field fails here instead of on the node. Field names follow the upstream Go types
(``k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta3|v1beta4``, ``k8s.io/kubelet/config/v1beta1``,
``k8s.io/kube-proxy/config/v1alpha1``). Differences between the versions that matter here:

* v1beta3 (Kubernetes 1.22-1.30): ``extraArgs`` and ``kubeletExtraArgs`` are maps of string to string;
  ``apiServer.timeoutForControlPlane`` and ``discovery.timeout`` hold the timeouts.
* v1beta4 (from 1.31): those args are lists of ``{name, value}``; a ``timeouts`` block on Init- and
  JoinConfiguration replaces the single timeouts.

Secrets (bootstrap token, certificate key) are never rendered: rendered files carry ``${NAME}`` placeholders
that the stage fills in on the node at apply time.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

V1BETA3 = "kubeadm.k8s.io/v1beta3"
V1BETA4 = "kubeadm.k8s.io/v1beta4"
KUBELET_API = "kubelet.config.k8s.io/v1beta1"
KUBE_PROXY_API = "kubeproxy.config.k8s.io/v1alpha1"

#: Placeholders the stage replaces on the node; the secrets never reach a rendered file.
TOKEN_PLACEHOLDER = "${KUBEADM_BOOTSTRAP_TOKEN}"  # noqa: S105 - a placeholder, not a token
CERT_KEY_PLACEHOLDER = "${KUBEADM_CERTIFICATE_KEY}"
CA_HASH_PLACEHOLDER = "${KUBEADM_CA_CERT_HASH}"

_TOKEN_RE = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_CERT_KEY_RE = re.compile(r"^[a-f0-9]{64}$")
_CA_HASH_RE = re.compile(r"^sha256:[a-f0-9]{64}$")
_DURATION_RE = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")
_SEMVER_RE = re.compile(r"^v[0-9]+\.[0-9]+\.[0-9]+$")

Duration = Annotated[str, Field(pattern=_DURATION_RE.pattern, description="Go duration, e.g. 4m0s")]


class Api(BaseModel):
    """Base: unknown keys are errors; Python names map to the upstream camelCase keys."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    def dump(self) -> dict[str, Any]:
        """The object as kubeadm reads it (camelCase keys, unset fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)


def _secret_or_placeholder(value: str, pattern: re.Pattern[str], placeholder: str, what: str) -> str:
    if value != placeholder and not pattern.match(value):
        raise ValueError(f"not a {what} (nor the placeholder {placeholder})")
    return value


class Arg(Api):
    """One ``{name, value}`` argument (v1beta4)."""

    name: str = Field(min_length=1)
    value: str


class HostPathMount(Api):
    name: str
    host_path: str = Field(alias="hostPath")
    mount_path: str = Field(alias="mountPath")
    read_only: bool | None = Field(default=None, alias="readOnly")
    path_type: Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket"] | None = Field(
        default=None, alias="pathType"
    )


class Taint(Api):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class APIEndpoint(Api):
    advertise_address: str = Field(alias="advertiseAddress")
    bind_port: int = Field(default=6443, alias="bindPort", ge=1, le=65535)


class BootstrapToken(Api):
    token: str
    ttl: Duration | None = None
    usages: list[Literal["signing", "authentication"]] | None = None
    groups: list[str] | None = None

    @field_validator("token")
    @classmethod
    def _token(cls, value: str) -> str:
        return _secret_or_placeholder(value, _TOKEN_RE, TOKEN_PLACEHOLDER, "bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})")


class Networking(Api):
    service_subnet: str = Field(alias="serviceSubnet")
    pod_subnet: str = Field(alias="podSubnet")
    dns_domain: str = Field(default="cluster.local", alias="dnsDomain")


class LocalEtcd(Api):
    data_dir: str = Field(default="/var/lib/etcd", alias="dataDir")


# --- shared by v1beta3 and v1beta4 ------------------------------------------------------------------


# v1beta3's nodeRegistration; v1beta4 changes only kubeletExtraArgs (NodeRegistrationV4)
class NodeRegistrationV3(Api):
    name: str
    cri_socket: str = Field(alias="criSocket")
    taints: list[Taint] = Field(default_factory=list)
    kubelet_extra_args: dict[str, str] | None = Field(default=None, alias="kubeletExtraArgs")
    ignore_preflight_errors: list[str] | None = Field(default=None, alias="ignorePreflightErrors")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(default=None, alias="imagePullPolicy")


class BootstrapTokenDiscovery(Api):
    token: str
    api_server_endpoint: str = Field(alias="apiServerEndpoint")
    ca_cert_hashes: list[str] = Field(alias="caCertHashes", min_length=1)
    unsafe_skip_ca_verification: bool | None = Field(default=None, alias="unsafeSkipCAVerification")

    @field_validator("token")
    @classmethod
    def _token(cls, value: str) -> str:
        return _secret_or_placeholder(value, _TOKEN_RE, TOKEN_PLACEHOLDER, "bootstrap token")

    @field_validator("ca_cert_hashes")
    @classmethod
    def _hashes(cls, values: list[str]) -> list[str]:
        for value in values:
            _secret_or_placeholder(value, _CA_HASH_RE, CA_HASH_PLACEHOLDER, "CA certificate hash (sha256:<64 hex>)")
        return values


class DiscoveryV4(Api):
    bootstrap_token: BootstrapTokenDiscovery = Field(alias="bootstrapToken")


class JoinControlPlane(Api):
    local_api_endpoint: APIEndpoint = Field(alias="localAPIEndpoint")
    certificate_key: str = Field(alias="certificateKey")

    @field_validator("certificate_key")
    @classmethod
    def _key(cls, value: str) -> str:
        return _secret_or_placeholder(value, _CERT_KEY_RE, CERT_KEY_PLACEHOLDER, "certificate key (64 hex)")


class _InitConfiguration(Api):
    """What v1beta3 and v1beta4 ``InitConfiguration`` share (each version narrows the types it changes)."""

    api_version: str = Field(alias="apiVersion")
    kind: Literal["InitConfiguration"]
    bootstrap_tokens: list[BootstrapToken] | None = Field(default=None, alias="bootstrapTokens")
    node_registration: NodeRegistrationV3 = Field(alias="nodeRegistration")
    local_api_endpoint: APIEndpoint = Field(alias="localAPIEndpoint")
    certificate_key: str | None = Field(default=None, alias="certificateKey")
    skip_phases: list[str] | None = Field(default=None, alias="skipPhases")

    @field_validator("certificate_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return value and _secret_or_placeholder(value, _CERT_KEY_RE, CERT_KEY_PLACEHOLDER, "certificate key (64 hex)")


class _ClusterConfiguration(Api):
    """What v1beta3 and v1beta4 ``ClusterConfiguration`` share; ``etcd`` and the control-plane components
    are each version's own types (declared here as :class:`Api` to keep the upstream field order)."""

    api_version: str = Field(alias="apiVersion")
    kind: Literal["ClusterConfiguration"]
    cluster_name: str = Field(alias="clusterName")
    kubernetes_version: str = Field(alias="kubernetesVersion", pattern=_SEMVER_RE.pattern)
    control_plane_endpoint: str = Field(alias="controlPlaneEndpoint")
    image_repository: str | None = Field(default=None, alias="imageRepository")
    networking: Networking
    etcd: Api
    api_server: Api = Field(alias="apiServer")
    controller_manager: Api = Field(alias="controllerManager")
    scheduler: Api
    certificates_dir: str | None = Field(default=None, alias="certificatesDir")


class _JoinConfiguration(Api):
    """What v1beta3 and v1beta4 ``JoinConfiguration`` share."""

    api_version: str = Field(alias="apiVersion")
    kind: Literal["JoinConfiguration"]
    node_registration: NodeRegistrationV3 = Field(alias="nodeRegistration")
    discovery: DiscoveryV4
    control_plane: JoinControlPlane | None = Field(default=None, alias="controlPlane")
    skip_phases: list[str] | None = Field(default=None, alias="skipPhases")


# --- v1beta3 -----------------------------------------------------------------------------------------


class ControlPlaneComponentV3(Api):
    extra_args: dict[str, str] | None = Field(default=None, alias="extraArgs")
    extra_volumes: list[HostPathMount] | None = Field(default=None, alias="extraVolumes")


class APIServerV3(ControlPlaneComponentV3):
    cert_sans: list[str] | None = Field(default=None, alias="certSANs")
    timeout_for_control_plane: Duration | None = Field(default=None, alias="timeoutForControlPlane")


class LocalEtcdV3(LocalEtcd):
    extra_args: dict[str, str] | None = Field(default=None, alias="extraArgs")


class EtcdV3(Api):
    local: LocalEtcdV3


class InitConfigurationV3(_InitConfiguration):
    api_version: Literal["kubeadm.k8s.io/v1beta3"] = Field(alias="apiVersion")


class ClusterConfigurationV3(_ClusterConfiguration):
    api_version: Literal["kubeadm.k8s.io/v1beta3"] = Field(alias="apiVersion")
    etcd: EtcdV3
    api_server: APIServerV3 = Field(alias="apiServer")
    controller_manager: ControlPlaneComponentV3 = Field(alias="controllerManager")
    scheduler: ControlPlaneComponentV3


class DiscoveryV3(DiscoveryV4):
    # v1beta3's discovery also holds the timeout (v1beta4 moved it to ``timeouts``)
    timeout: Duration | None = None


class JoinConfigurationV3(_JoinConfiguration):
    api_version: Literal["kubeadm.k8s.io/v1beta3"] = Field(alias="apiVersion")
    discovery: DiscoveryV3


# --- v1beta4 -----------------------------------------------------------------------------------------


class Timeouts(Api):
    """v1beta4 ``timeouts``."""

    control_plane_component_health_check: Duration | None = Field(
        default=None, alias="controlPlaneComponentHealthCheck"
    )
    kubelet_health_check: Duration | None = Field(default=None, alias="kubeletHealthCheck")
    kubernetes_api_call: Duration | None = Field(default=None, alias="kubernetesAPICall")
    etcd_api_call: Duration | None = Field(default=None, alias="etcdAPICall")
    tls_bootstrap: Duration | None = Field(default=None, alias="tlsBootstrap")
    discovery: Duration | None = None
    upgrade_manifests: Duration | None = Field(default=None, alias="upgradeManifests")


class NodeRegistrationV4(NodeRegistrationV3):
    kubelet_extra_args: list[Arg] | None = Field(default=None, alias="kubeletExtraArgs")  # type: ignore[assignment]


class ControlPlaneComponentV4(Api):
    extra_args: list[Arg] | None = Field(default=None, alias="extraArgs")
    extra_volumes: list[HostPathMount] | None = Field(default=None, alias="extraVolumes")


class APIServerV4(ControlPlaneComponentV4):
    cert_sans: list[str] | None = Field(default=None, alias="certSANs")


class LocalEtcdV4(LocalEtcd):
    extra_args: list[Arg] | None = Field(default=None, alias="extraArgs")


class EtcdV4(Api):
    local: LocalEtcdV4


class InitConfigurationV4(_InitConfiguration):
    api_version: Literal["kubeadm.k8s.io/v1beta4"] = Field(alias="apiVersion")
    node_registration: NodeRegistrationV4 = Field(alias="nodeRegistration")
    timeouts: Timeouts | None = None


class ClusterConfigurationV4(_ClusterConfiguration):
    api_version: Literal["kubeadm.k8s.io/v1beta4"] = Field(alias="apiVersion")
    etcd: EtcdV4
    api_server: APIServerV4 = Field(alias="apiServer")
    controller_manager: ControlPlaneComponentV4 = Field(alias="controllerManager")
    scheduler: ControlPlaneComponentV4
    encryption_algorithm: Literal["RSA-2048", "RSA-3072", "RSA-4096", "ECDSA-P256", "ECDSA-P384"] | None = Field(
        default=None, alias="encryptionAlgorithm"
    )


class JoinConfigurationV4(_JoinConfiguration):
    api_version: Literal["kubeadm.k8s.io/v1beta4"] = Field(alias="apiVersion")
    node_registration: NodeRegistrationV4 = Field(alias="nodeRegistration")
    timeouts: Timeouts | None = None


# --- kubelet and kube-proxy --------------------------------------------------------------------------


class KubeletConfiguration(Api):
    """The kubelet settings rackctl writes or lets ``kubernetes.kubelet`` override."""

    api_version: Literal["kubelet.config.k8s.io/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["KubeletConfiguration"]
    cgroup_driver: Literal["systemd", "cgroupfs"] = Field(alias="cgroupDriver")
    container_runtime_endpoint: str | None = Field(default=None, alias="containerRuntimeEndpoint")
    max_pods: int | None = Field(default=None, alias="maxPods", ge=1, le=2500)
    serialize_image_pulls: bool | None = Field(default=None, alias="serializeImagePulls")
    cpu_manager_policy: Literal["none", "static"] | None = Field(default=None, alias="cpuManagerPolicy")
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] | None = Field(
        default=None, alias="topologyManagerPolicy"
    )
    topology_manager_scope: Literal["container", "pod"] | None = Field(default=None, alias="topologyManagerScope")
    memory_manager_policy: Literal["None", "Static"] | None = Field(default=None, alias="memoryManagerPolicy")
    system_reserved: dict[str, str] | None = Field(default=None, alias="systemReserved")
    kube_reserved: dict[str, str] | None = Field(default=None, alias="kubeReserved")
    eviction_hard: dict[str, str] | None = Field(default=None, alias="evictionHard")
    image_gc_high_threshold_percent: int | None = Field(default=None, alias="imageGCHighThresholdPercent", ge=0, le=100)
    image_gc_low_threshold_percent: int | None = Field(default=None, alias="imageGCLowThresholdPercent", ge=0, le=100)
    rotate_certificates: bool | None = Field(default=None, alias="rotateCertificates")
    server_tls_bootstrap: bool | None = Field(default=None, alias="serverTLSBootstrap")
    shutdown_grace_period: Duration | None = Field(default=None, alias="shutdownGracePeriod")
    shutdown_grace_period_critical_pods: Duration | None = Field(default=None, alias="shutdownGracePeriodCriticalPods")
    #: the kubelet refuses to start on a cgroup v1 host (from 1.31; true by default from 1.35)
    fail_cgroup_v1: bool | None = Field(default=None, alias="failCgroupV1")


class KubeProxyIPVS(Api):
    scheduler: Literal["rr", "lc", "dh", "sh", "sed", "nq", "wrr", "wlc"] | None = None
    strict_arp: bool | None = Field(default=None, alias="strictARP")


class KubeProxyConntrack(Api):
    """``conntrack``: 0 leaves the kernel's table size alone (a node in a container cannot set it)."""

    max_per_core: int | None = Field(default=None, alias="maxPerCore", ge=0)
    min: int | None = Field(default=None, ge=0)
    tcp_established_timeout: Duration | None = Field(default=None, alias="tcpEstablishedTimeout")
    tcp_close_wait_timeout: Duration | None = Field(default=None, alias="tcpCloseWaitTimeout")


class KubeProxyConfiguration(Api):
    api_version: Literal["kubeproxy.config.k8s.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["KubeProxyConfiguration"]
    mode: Literal["iptables", "ipvs", "nftables"]
    cluster_cidr: str = Field(alias="clusterCIDR")
    ipvs: KubeProxyIPVS | None = None
    conntrack: KubeProxyConntrack | None = None


#: (apiVersion, kind) -> model.
MODELS: dict[tuple[str, str], type[Api]] = {
    (V1BETA3, "InitConfiguration"): InitConfigurationV3,
    (V1BETA3, "ClusterConfiguration"): ClusterConfigurationV3,
    (V1BETA3, "JoinConfiguration"): JoinConfigurationV3,
    (V1BETA4, "InitConfiguration"): InitConfigurationV4,
    (V1BETA4, "ClusterConfiguration"): ClusterConfigurationV4,
    (V1BETA4, "JoinConfiguration"): JoinConfigurationV4,
    (KUBELET_API, "KubeletConfiguration"): KubeletConfiguration,
    (KUBE_PROXY_API, "KubeProxyConfiguration"): KubeProxyConfiguration,
}
