"""Derive the Ansible inventory (kubespray-style groups) and host vars from the cluster inventory.

Nothing secret is rendered: BMC credentials stay in rackctl; Ansible reaches nodes over SSH only, with
the connection variables of :mod:`bootstrap.inband.access` (address, user, key path, pinned known_hosts,
proxy). Cluster-wide variables are layered ``group_vars`` files with readable names (``cluster_name``,
``kube_version``, ``pod_cidr``...): ``all/*.yml``, then ``k8s_cluster.yml``, ``gpu.yml``, ``fabric_manager.yml``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bootstrap.fsutil import replace_tree
from bootstrap.inband.access import NodeAccess, access_address, node_access
from bootstrap.inband.netplan import networks_host_vars
from bootstrap.inband.node_services import node_service_vars
from bootstrap.inventory.hardware import GPU_TYPES
from bootstrap.inventory.models import Inventory, Node, Role
from bootstrap.inventory.profiles import containerd_minimum, kubeadm_api_for
from bootstrap.mirror.kubeadm_images import sandbox_image
from bootstrap.mirror.site_vars import site_vars
from bootstrap.mirror.upstreams import containerd_upstream_package

if TYPE_CHECKING:
    from bootstrap.environment import Environment


def group_of_model(model: str) -> str:
    """Ansible group name of a hardware model: R760xa -> model_r760xa."""
    return "model_" + "".join(ch if ch.isalnum() else "_" for ch in model.lower())


def groups(inv: Inventory) -> dict[str, list[str]]:
    """Group name -> hostnames (ordered as in the inventory)."""
    out: dict[str, list[str]] = {
        "head": [],
        "kube_control_plane": [],
        "etcd": [],
        "kube_node": [],
        "gpu": [],
        "fabric_manager": [],
    }
    for node in inv.nodes:
        name = node.hostname
        if node.role == Role.HEAD:
            out["head"].append(name)
        if node.is_control_plane:
            out["kube_control_plane"].append(name)
            out["etcd"].append(name)
        else:
            out["kube_node"].append(name)
        if inv.gpus_of(node).count > 0:
            out["gpu"].append(name)
        hw = inv.hardware(node.model)
        if hw is not None and hw.fabric_manager:
            out["fabric_manager"].append(name)
        out.setdefault(group_of_model(node.model), []).append(name)
    return out


def host_vars(inv: Inventory, node: Node, access: NodeAccess | None = None) -> dict[str, Any]:
    """Variables of one host: how to reach it (:mod:`bootstrap.inband.access`), then what it is."""
    gpus = inv.gpus_of(node)
    gpu = GPU_TYPES.get(gpus.type)
    connection = access.ansible_vars() if access else {"ansible_host": access_address(node)}
    data: dict[str, Any] = {
        **connection,
        "node_role": node.role.value,
        "hardware_model": node.model,
        "service_tag": node.service_tag,
        "root_disk_hint": node.root_disk_hint,
        "gpu_type": gpus.type,
        "gpu_count": gpus.count,
        "gpu_label": gpu.label if gpu else None,
        "mig_profile": node.mig_profile,
        "fabric_manager_expected": bool((hw := inv.hardware(node.model)) and hw.fabric_manager),
        "node_interfaces": [i.model_dump(mode="json", exclude_none=True) for i in node.interfaces],
        "node_bonds": [b.model_dump(mode="json", exclude_none=True) for b in node.bonds],
        "node_labels": node.labels,
        "node_taints": [t.model_dump(mode="json") for t in node.taints],
        **networks_host_vars(inv, node),
    }
    return {k: v for k, v in data.items() if v is not None}


#: Where a node keeps its rendered kubeadm config (the kubernetes stage's host side puts it there).
KUBEADM_CONFIG_ON_NODE = "/etc/rackctl/kubeadm.yaml"
#: the lab's VMs have 1 GiB of memory (a little less once the kernel took its share) and a 1 GiB image:
#: the in-band checks' production thresholds are lowered there, every check still runs
LAB_THRESHOLDS = {"preflight_min_memory_mb": 512, "preflight_min_root_free_gb": 0}


def group_vars(inv: Inventory, site: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Layered ``group_vars`` (kubespray style): relative file path -> its variables.

    ``site``: ``all/site_services.yml`` (:func:`bootstrap.mirror.site_vars.site_vars`), where packages and
    images come from; it needs the state dir and the environment, so :func:`write_ansible_inventory` adds it.
    """
    versions = inv.cluster.resolved_versions()
    nets = inv.networks
    k8s = nets.kubernetes
    lab = {"all/lab.yml": dict(LAB_THRESHOLDS)} if inv.cluster.lab else {}
    return {
        **lab,
        **({"all/site_services.yml": dict(site)} if site is not None else {}),
        "all/cluster.yml": {
            "cluster_name": inv.cluster.name,
            "cluster_domain": inv.cluster.domain,
            "timezone": inv.cluster.timezone,
            "ntp_servers": inv.cluster.ntp_servers,
            "dns_servers": [str(d) for d in inv.cluster.dns_servers],
            "admin_ssh_keys": inv.cluster.admin_ssh_keys,
            "install_method": inv.cluster.install_method.value,
        },
        "all/networks.yml": {
            "networks": {
                name: {
                    "cidr": str(nets.cidr_of(name)) if nets.cidr_of(name) else None,
                    "gateway": str(net.gateway) if net.gateway else None,
                    "vlan": net.vlan,
                    "mtu": net.mtu,
                }
                for name, net in nets.named().items()
            },
        },
        "all/versions.yml": {
            "os_release": versions.os,
            "kube_version": versions.kubernetes,
            "kubeadm_api_version": versions.kubeadm_api or kubeadm_api_for(versions.kubernetes),
            "containerd_version": versions.containerd,
            # the oldest containerd this release's kubelet runs with; role container_runtime reads it back
            "rackctl_containerd_minimum": containerd_minimum(versions.kubernetes),
            # containerd.io at exactly that version from the mirror's upstream (role container_runtime); None:
            # the distribution's containerd
            "rackctl_containerd_upstream": containerd_upstream_package(inv),
            "kube_vip_version": versions.kube_vip,
            "gpu_operator_version": versions.gpu_operator,
            "nvidia_driver_version": versions.nvidia_driver,
            "triton_version": versions.triton,
            "trtllm_version": versions.trtllm,
        },
        "k8s_cluster.yml": {
            "kube_apiserver_vip": str(k8s.api_vip),
            "kube_apiserver_port": k8s.api_port,
            "pod_cidr": str(k8s.pod_cidr),
            "service_cidr": str(k8s.service_cidr),
            # kubespray's names: where kubeadm keeps admin.conf/kubelet.conf/pki, and where its binary is
            "kube_config_dir": "/etc/kubernetes",
            "kubeadm_bin_dir": "/usr/bin",
            # the node's rendered kubeadm config (placeholders for the token, CA hash and certificate key: the
            # roles kubeadm_init/kubeadm_join fill them on the node in a 0600 temp file in kube_config_dir)
            "kubeadm_config_file": KUBEADM_CONFIG_ON_NODE,
            # containerd's sandbox image: kubeadm's pause of this release (role container_runtime)
            "container_runtime_sandbox_image": sandbox_image(inv)[1],
            # runc's cgroup driver: the kubelet's (kubernetes.kubelet.cgroupDriver, systemd unless set)
            "container_runtime_cgroup_driver": inv.kubernetes.cgroup_driver,
            # what holds the API VIP (role api_endpoint on the host side, its place.yml before init/join)
            "kube_api_endpoint": inv.kubernetes.api_endpoint,
        },
        "gpu.yml": {"gpu_operator_enabled": True},
        "fabric_manager.yml": {"fabric_manager_enabled": True},
    }


def ansible_inventory(inv: Inventory, access: Mapping[str, NodeAccess] | None = None) -> dict[str, Any]:
    """The ``hosts.yml`` document: every host with its vars under ``all``, then the groups (kubespray style)."""
    grouped = groups(inv)
    children: dict[str, Any] = {name: {"hosts": {h: {} for h in hosts}} for name, hosts in grouped.items()}
    children["k8s_cluster"] = {"children": {"kube_control_plane": {}, "kube_node": {}}}
    hosts = {node.hostname: host_vars(inv, node, (access or {}).get(node.hostname)) for node in inv.nodes}
    return {"all": {"hosts": hosts, "children": children}}


HEADER = "# Rendered by rackctl from the cluster inventory; do not edit.\n"


def _dump(data: Any) -> str:
    """YAML text. JSON is YAML, and the C JSON encoder is ~20x faster than PyYAML's representer."""
    return HEADER + json.dumps(data, indent=2) + "\n"


def render_files(
    inv: Inventory, access: Mapping[str, NodeAccess] | None = None, site: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Relative path -> content of every rendered file (``access``: how each host is reached; ``site``:
    the site services' vars)."""
    files = {"hosts.yml": _dump(ansible_inventory(inv, access))}
    files.update({f"group_vars/{path}": _dump(data) for path, data in group_vars(inv, site).items()})
    return files


def inventory_dir(state_dir: Path) -> Path:
    """Where the rendered Ansible inventory lives: ``<state-dir>/ansible/inventory``."""
    return Path(state_dir) / "ansible" / "inventory"


def write_ansible_inventory(inv: Inventory, state_dir: Path, environment: Environment, out: Path | None = None) -> Path:
    """Render the inventory for ``environment`` and swap it into ``out`` (default :func:`inventory_dir`).

    Returns the ``hosts.yml`` every playbook run uses.
    """
    target = out or inventory_dir(state_dir)
    replace_tree(target, render_for(inv, state_dir, environment))
    return target / "hosts.yml"


def render_for(inv: Inventory, state_dir: Path, environment: Environment) -> dict[str, str]:
    """Every rendered file for ``environment``: access, group vars and the site services' vars (the tree
    ``rackctl inventory render`` and every playbook run use)."""
    site = site_vars(inv, state_dir, environment)
    site.update(node_service_vars(inv, environment, site))
    return render_files(inv, node_access(inv, state_dir, environment), site)
