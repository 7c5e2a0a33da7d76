"""kubeadm configuration per node, rendered for the inventory's Kubernetes version.

The first control plane gets Init- + ClusterConfiguration (with uploaded certificates), the other control
planes a control-plane JoinConfiguration (certificate key), workers a plain JoinConfiguration. The init
file carries the KubeletConfiguration (``cgroupDriver``: ``kubernetes.cgroup_driver``, the one containerd's runc
is given too) and the KubeProxyConfiguration; joining nodes read both from the cluster.
"""

from __future__ import annotations

from typing import Any

from bootstrap.cluster.kubeadm_api import (
    CA_HASH_PLACEHOLDER,
    CERT_KEY_PLACEHOLDER,
    KUBE_PROXY_API,
    KUBELET_API,
    TOKEN_PLACEHOLDER,
    V1BETA4,
)
from bootstrap.inventory.models import Inventory, Node
from bootstrap.inventory.profiles import kubeadm_api_for

#: With keepalived + haproxy the VIP is served on this port (the API servers keep ``api_port``).
HAPROXY_PORT = 8443
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
#: Label domains under kubernetes.io / k8s.io a kubelet may still set on itself (NodeRestriction).
KUBELET_SETTABLE_DOMAINS = ("kubelet.kubernetes.io", "node.kubernetes.io")


def kubelet_may_set(key: str) -> bool:
    """Whether the NodeRestriction admission plugin lets a kubelet set label ``key`` on its own node."""
    domain = key.split("/", 1)[0] if "/" in key else ""
    restricted = domain.endswith(("kubernetes.io", "k8s.io"))
    return not restricted or domain.endswith(KUBELET_SETTABLE_DOMAINS)


def api_version(inv: Inventory) -> str:
    """The kubeadm config API: the inventory's pin if set (checked against the version), else derived."""
    versions = inv.cluster.resolved_versions()
    return versions.kubeadm_api or kubeadm_api_for(versions.kubernetes)


def kubernetes_version(inv: Inventory) -> str:
    """``v1.33.5``."""
    return "v" + inv.cluster.resolved_versions().kubernetes.lstrip("v")


def endpoint(inv: Inventory) -> str:
    """``VIP:port`` of the API server (haproxy's port with keepalived + haproxy)."""
    k8s = inv.networks.kubernetes
    port = HAPROXY_PORT if inv.kubernetes.api_endpoint == "keepalived-haproxy" else k8s.api_port
    return f"{k8s.api_vip}:{port}"


def _args(api: str, args: dict[str, str]) -> dict[str, str] | list[dict[str, str]] | None:
    """extraArgs in the shape of ``api``: a map (v1beta3) or a list of {name, value} (v1beta4)."""
    if not args:
        return None
    if api == V1BETA4:
        return [{"name": k, "value": v} for k, v in sorted(args.items())]
    return dict(sorted(args.items()))


def node_address(node: Node) -> str:
    """The node's management address (where its kubelet and API server listen)."""
    address = node.address_on("management")
    return str(address) if address is not None else ""


def self_labels(node: Node) -> dict[str, str]:
    """Labels the kubelet may set on itself at registration (``--node-labels``)."""
    labels = {"rackctl.io/role": node.role.value, "rackctl.io/model": node.model}
    labels |= {k: v for k, v in node.labels.items() if kubelet_may_set(k)}
    return labels


def node_registration(inv: Inventory, node: Node) -> dict[str, Any]:
    api = api_version(inv)
    taints: list[dict[str, Any]] = [t.model_dump(exclude_defaults=False) for t in node.taints]
    for taint in taints:
        if not taint["value"]:
            del taint["value"]
    if node.is_control_plane and not any(t["key"] == CONTROL_PLANE_TAINT["key"] for t in taints):
        taints.insert(0, dict(CONTROL_PLANE_TAINT))
    labels = ",".join(f"{k}={v}" for k, v in sorted(self_labels(node).items()))
    reg: dict[str, Any] = {"name": node.hostname, "criSocket": CRI_SOCKET, "taints": taints}
    if inv.kubernetes.ignore_preflight_errors:
        reg["ignorePreflightErrors"] = list(inv.kubernetes.ignore_preflight_errors)
    extra = {"node-ip": node_address(node), "node-labels": labels}
    reg["kubeletExtraArgs"] = _args(api, extra)
    return reg


def kubelet_configuration(inv: Inventory) -> dict[str, Any]:
    """KubeletConfiguration: the nodes' cgroup driver, then the inventory's ``kubernetes.kubelet`` fields."""
    base: dict[str, Any] = {
        "apiVersion": KUBELET_API,
        "kind": "KubeletConfiguration",
        "cgroupDriver": inv.kubernetes.cgroup_driver,
        "containerRuntimeEndpoint": CRI_SOCKET,
        "serverTLSBootstrap": False,
        "rotateCertificates": True,
        "shutdownGracePeriod": "60s",
        "shutdownGracePeriodCriticalPods": "20s",
    }
    return _merged(base, inv.kubernetes.kubelet)


def kube_proxy_configuration(inv: Inventory) -> dict[str, Any]:
    """KubeProxyConfiguration: the inventory's mode and pod CIDR, then its ``kubernetes.kube_proxy`` fields
    (merged into rackctl's mappings; the fields other inventory fields own are refused at load)."""
    mode = inv.kubernetes.kube_proxy_mode
    config: dict[str, Any] = {
        "apiVersion": KUBE_PROXY_API,
        "kind": "KubeProxyConfiguration",
        "mode": mode,
        "clusterCIDR": str(inv.networks.kubernetes.pod_cidr),
    }
    if mode == "ipvs":
        config["ipvs"] = {"strictARP": True}  # kube-vip / MetalLB ARP needs strict ARP under IPVS
    return _merged(config, inv.kubernetes.kube_proxy)


def _merged(base: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` over ``base``, mapping into mapping (``ipvs.scheduler`` keeps rackctl's ``ipvs.strictARP``)."""
    out = dict(base)
    for key, value in fields.items():
        here = out.get(key)
        out[key] = _merged(here, value) if isinstance(here, dict) and isinstance(value, dict) else value
    return out


def _timeouts(api: str, **timeouts: str) -> dict[str, Any]:
    return {"timeouts": timeouts} if api == V1BETA4 else {}


def init_configuration(inv: Inventory, node: Node) -> dict[str, Any]:
    api = api_version(inv)
    return {
        "apiVersion": api,
        "kind": "InitConfiguration",
        "bootstrapTokens": [{"token": TOKEN_PLACEHOLDER, "ttl": "2h0m0s", "usages": ["signing", "authentication"]}],
        "nodeRegistration": node_registration(inv, node),
        "localAPIEndpoint": {"advertiseAddress": node_address(node), "bindPort": inv.networks.kubernetes.api_port},
        "certificateKey": CERT_KEY_PLACEHOLDER,
        **_timeouts(api, controlPlaneComponentHealthCheck="4m0s", kubeletHealthCheck="4m0s"),
    }


def cluster_configuration(inv: Inventory) -> dict[str, Any]:
    api = api_version(inv)
    k8s = inv.networks.kubernetes
    sans = sorted({str(k8s.api_vip), *(node_address(n) for n in inv.control_planes if node_address(n))})
    sans += [n.hostname for n in inv.control_planes]
    api_server: dict[str, Any] = {"certSANs": sans}
    args = _args(api, dict(inv.kubernetes.api_server_extra_args))
    if args:
        api_server["extraArgs"] = args
    if api != V1BETA4:
        api_server["timeoutForControlPlane"] = "4m0s"
    config: dict[str, Any] = {
        "apiVersion": api,
        "kind": "ClusterConfiguration",
        "clusterName": inv.cluster.name,
        "kubernetesVersion": kubernetes_version(inv),
        "controlPlaneEndpoint": endpoint(inv),
        "networking": {
            "serviceSubnet": str(k8s.service_cidr),
            "podSubnet": str(k8s.pod_cidr),
            "dnsDomain": "cluster.local",
        },
        "etcd": {"local": {"dataDir": "/var/lib/etcd"}},
        "apiServer": api_server,
        "controllerManager": {},
        "scheduler": {},
    }
    if inv.kubernetes.image_repository:
        config["imageRepository"] = inv.kubernetes.image_repository
    return config


def join_configuration(inv: Inventory, node: Node) -> dict[str, Any]:
    api = api_version(inv)
    discovery: dict[str, Any] = {
        "bootstrapToken": {
            "token": TOKEN_PLACEHOLDER,
            "apiServerEndpoint": endpoint(inv),
            "caCertHashes": [CA_HASH_PLACEHOLDER],
        }
    }
    if api != V1BETA4:
        discovery["timeout"] = "5m0s"
    config: dict[str, Any] = {
        "apiVersion": api,
        "kind": "JoinConfiguration",
        "nodeRegistration": node_registration(inv, node),
        "discovery": discovery,
        **_timeouts(api, discovery="5m0s", tlsBootstrap="5m0s"),
    }
    if node.is_control_plane:
        config["controlPlane"] = {
            "localAPIEndpoint": {"advertiseAddress": node_address(node), "bindPort": inv.networks.kubernetes.api_port},
            "certificateKey": CERT_KEY_PLACEHOLDER,
        }
    return config


def node_documents(inv: Inventory, node: Node) -> list[dict[str, Any]]:
    """The multi-document kubeadm config file of one node (``kubeadm init|join --config``)."""
    first = inv.control_planes[0] if inv.control_planes else None
    if node is first:
        return [
            init_configuration(inv, node),
            cluster_configuration(inv),
            kubelet_configuration(inv),
            kube_proxy_configuration(inv),
        ]
    # kubeadm join reads the kubelet and kube-proxy settings from the cluster's ConfigMaps, not the file.
    return [join_configuration(inv, node)]
