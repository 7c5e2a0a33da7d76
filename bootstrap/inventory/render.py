"""Derive the Ansible inventory (kubespray-style groups) and host vars from the cluster inventory.

Nothing secret is rendered: BMC credentials stay in rackctl; Ansible reaches nodes over SSH only.
"""

from __future__ import annotations

import json
from typing import Any

from bootstrap.inventory.hardware import GPU_TYPES
from bootstrap.inventory.models import Inventory, Node, Role
from bootstrap.inventory.profiles import kubeadm_api_for


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


def host_vars(inv: Inventory, node: Node) -> dict[str, Any]:
    """Variables of one host."""
    gpus = inv.gpus_of(node)
    gpu = GPU_TYPES.get(gpus.type)
    mgmt = node.address_on("management")
    data: dict[str, Any] = {
        "ansible_host": str(mgmt) if mgmt else None,
        "rackctl_role": node.role.value,
        "rackctl_model": node.model,
        "rackctl_service_tag": node.service_tag,
        "rackctl_root_disk_hint": node.root_disk_hint,
        "rackctl_gpu_type": gpus.type,
        "rackctl_gpu_count": gpus.count,
        "rackctl_gpu_label": gpu.label if gpu else None,
        "rackctl_mig_profile": node.mig_profile,
        "rackctl_fabric_manager_expected": bool((hw := inv.hardware(node.model)) and hw.fabric_manager),
        "rackctl_interfaces": [i.model_dump(mode="json", exclude_none=True) for i in node.interfaces],
        "rackctl_bonds": [b.model_dump(mode="json", exclude_none=True) for b in node.bonds],
        "rackctl_node_labels": node.labels,
        "rackctl_node_taints": [t.model_dump(mode="json") for t in node.taints],
    }
    return {k: v for k, v in data.items() if v is not None}


def group_vars_all(inv: Inventory) -> dict[str, Any]:
    """Cluster-wide variables."""
    versions = inv.cluster.resolved_versions()
    nets = inv.networks
    return {
        "rackctl_cluster_name": inv.cluster.name,
        "rackctl_domain": inv.cluster.domain,
        "rackctl_timezone": inv.cluster.timezone,
        "rackctl_ntp_servers": inv.cluster.ntp_servers,
        "rackctl_dns_servers": [str(d) for d in inv.cluster.dns_servers],
        "rackctl_admin_ssh_keys": inv.cluster.admin_ssh_keys,
        "rackctl_install_method": inv.cluster.install_method.value,
        "rackctl_versions": versions.model_dump(mode="json"),
        "rackctl_kubeadm_api": versions.kubeadm_api or kubeadm_api_for(versions.kubernetes),
        "rackctl_networks": {
            name: {
                "cidr": str(nets.cidr_of(name)) if nets.cidr_of(name) else None,
                "gateway": str(net.gateway) if net.gateway else None,
                "vlan": net.vlan,
                "mtu": net.mtu,
            }
            for name, net in nets.named().items()
        },
        "rackctl_kube_api_vip": str(nets.kubernetes.api_vip),
        "rackctl_kube_api_port": nets.kubernetes.api_port,
        "rackctl_pod_cidr": str(nets.kubernetes.pod_cidr),
        "rackctl_service_cidr": str(nets.kubernetes.service_cidr),
    }


def ansible_inventory(inv: Inventory) -> dict[str, Any]:
    """The ``hosts.yml`` document: every host with its vars under ``all``, then the groups (kubespray style)."""
    grouped = groups(inv)
    children: dict[str, Any] = {name: {"hosts": {h: {} for h in hosts}} for name, hosts in grouped.items()}
    children["k8s_cluster"] = {"children": {"kube_control_plane": {}, "kube_node": {}}}
    hosts = {node.hostname: host_vars(inv, node) for node in inv.nodes}
    return {"all": {"hosts": hosts, "children": children}}


HEADER = "# Rendered by rackctl from the cluster inventory; do not edit.\n"


def _dump(data: Any) -> str:
    """YAML text. JSON is YAML, and the C JSON encoder is ~20x faster than PyYAML's representer."""
    return HEADER + json.dumps(data, indent=2) + "\n"


def render_files(inv: Inventory) -> dict[str, str]:
    """Relative path -> content of every rendered file."""
    return {"hosts.yml": _dump(ansible_inventory(inv)), "group_vars/all.yml": _dump(group_vars_all(inv))}
