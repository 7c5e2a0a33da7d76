"""The API virtual IP: kube-vip static pods, or keepalived + haproxy on the control planes.

kube-vip runs as a static pod on each control plane before ``kubeadm init/join``. From Kubernetes 1.29
``admin.conf`` has no rights until init has finished (it is bound through a ClusterRoleBinding that init
creates), so the first control plane mounts ``super-admin.conf`` during init and switches to
``admin.conf`` afterwards.
"""

from __future__ import annotations

from typing import Any

from bootstrap.cluster.kubeadm import HAPROXY_PORT, node_address
from bootstrap.inventory.models import Inventory, Node
from bootstrap.inventory.profiles import version_tuple

ADMIN_CONF = "/etc/kubernetes/admin.conf"
SUPER_ADMIN_CONF = "/etc/kubernetes/super-admin.conf"
KUBE_VIP_IMAGE = "ghcr.io/kube-vip/kube-vip"


def needs_super_admin(inv: Inventory) -> bool:
    """Whether the first control plane's kube-vip mounts ``super-admin.conf`` during init (1.29+)."""
    return version_tuple(inv.cluster.resolved_versions().kubernetes)[:2] >= (1, 29)


def kube_vip_upstream(inv: Inventory) -> str:
    """kube-vip's upstream image at the inventory's pinned version (``cluster.versions.kube_vip``)."""
    return f"{KUBE_VIP_IMAGE}:{inv.cluster.resolved_versions().kube_vip}"


def kube_vip_image(inv: Inventory) -> str:
    """The image the static pod names: the upstream one, or its copy under ``kubernetes.image_repository``."""
    if inv.kubernetes.image_repository:
        return f"{inv.kubernetes.image_repository}/kube-vip:{inv.cluster.resolved_versions().kube_vip}"
    return kube_vip_upstream(inv)


def subnet_variable(version: str) -> str:
    """The environment variable of the VIP's prefix length: ``vip_subnet`` from kube-vip v0.9.0, which no
    longer reads ``vip_cidr`` (before it, ``vip_cidr`` is what the ARP and BGP code reads)."""
    return "vip_subnet" if version_tuple(version)[:2] >= (0, 9) else "vip_cidr"


def kube_vip_pod(inv: Inventory, kubeconfig: str = ADMIN_CONF) -> dict[str, Any]:
    """The kube-vip static pod (ARP mode, control-plane load balancing by leader election)."""
    k8s = inv.networks.kubernetes
    image = kube_vip_image(inv)
    env = {
        "vip_arp": "true",
        "port": str(k8s.api_port),
        "vip_interface": inv.kubernetes.vip_interface,
        subnet_variable(inv.cluster.resolved_versions().kube_vip): "32",
        "cp_enable": "true",
        "cp_namespace": "kube-system",
        "vip_leaderelection": "true",
        "vip_leasename": "plndr-cp-lock",
        "vip_leaseduration": "5",
        "vip_renewdeadline": "3",
        "vip_retryperiod": "1",
        "address": str(k8s.api_vip),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-vip", "namespace": "kube-system"},
        "spec": {
            "containers": [
                {
                    "name": "kube-vip",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": ["manager"],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                    "volumeMounts": [{"name": "kubeconfig", "mountPath": ADMIN_CONF}],
                }
            ],
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kubernetes"]}],
            "hostNetwork": True,
            "volumes": [{"name": "kubeconfig", "hostPath": {"path": kubeconfig, "type": "FileOrCreate"}}],
        },
    }


def kube_vip_files(inv: Inventory, node: Node) -> dict[str, list[dict[str, Any]]]:
    """Static pod files of one control plane: ``kube-vip.yaml``, plus ``kube-vip-init.yaml`` on the first."""
    files = {"kube-vip.yaml": [kube_vip_pod(inv)]}
    if node is inv.control_planes[0] and needs_super_admin(inv):
        files["kube-vip-init.yaml"] = [kube_vip_pod(inv, SUPER_ADMIN_CONF)]
    return files


def keepalived_conf(inv: Inventory, node: Node) -> str:
    """keepalived: VRRP for the VIP, priority by control-plane order, health from haproxy."""
    k8s = inv.networks.kubernetes
    index = inv.control_planes.index(node)
    state = "MASTER" if index == 0 else "BACKUP"
    return (
        "# rendered by rackctl: the API VIP held by keepalived, checked through haproxy\n"
        # without script_security keepalived's own check (keepalived -t) rejects a config that runs a script
        "global_defs {\n  enable_script_security\n  script_user root\n}\n"
        "vrrp_script chk_haproxy {\n"
        f'  script "/usr/bin/curl -sfk https://localhost:{HAPROXY_PORT}/healthz -o /dev/null"\n'
        "  interval 3\n  fall 3\n  rise 2\n}\n"
        "vrrp_instance API_VIP {\n"
        f"  state {state}\n"
        f"  interface {inv.kubernetes.vip_interface}\n"
        "  virtual_router_id 51\n"
        f"  priority {150 - 10 * index}\n"
        f"  unicast_src_ip {node_address(node)}\n"
        "  unicast_peer {\n"
        + "".join(f"    {node_address(peer)}\n" for peer in inv.control_planes if peer is not node)
        + "  }\n"
        f"  virtual_ipaddress {{\n    {k8s.api_vip}/32\n  }}\n"
        "  track_script {\n    chk_haproxy\n  }\n}\n"
    )


def haproxy_cfg(inv: Inventory) -> str:
    """haproxy: TCP on port 8443 (the VIP's) to every API server on its own address and port."""
    k8s = inv.networks.kubernetes
    servers = "".join(
        f"  server {n.hostname} {node_address(n)}:{k8s.api_port} check check-ssl verify none\n"
        for n in inv.control_planes
    )
    return (
        "# rendered by rackctl: clients reach VIP:8443, haproxy forwards to every API server's own port\n"
        "global\n  log /dev/log local0\n  daemon\n"
        # a connection to an API server that just went down is retried on another (redispatch) instead of
        # being closed on the client, until the health checks take that server out
        "defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 35s\n  timeout server 35s\n"
        "  retries 3\n  option redispatch\n"
        f"frontend kube-apiserver\n  bind *:{HAPROXY_PORT}\n  default_backend kube-apiservers\n"
        "backend kube-apiservers\n  option httpchk GET /healthz\n  http-check expect status 200\n"
        "  balance roundrobin\n" + servers
    )
