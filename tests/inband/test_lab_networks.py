"""The lab's networks on installed VMs: every inventory port is plugged into its network's bridge.

Runs on ``installed_lab`` (real VMs, real bridges in the lab's namespace): each worker's NICs answer to
the inventory's MACs, the storage bridge carries MTU 9000, the head side has its management address and
reaches an installed node over the management network (its install-time static address).
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_each_inventory_port_is_a_vm_nic_on_its_networks_bridge(installed_lab) -> None:
    lab = installed_lab
    network = lab.environment.network
    for host in lab.nodes:
        node = lab.inventory.node(host)
        links = json.loads(lab.ssh(host, "ip -j link show").stdout)
        macs = {link.get("address") for link in links}
        for nic in node.interfaces:
            assert nic.mac in macs, f"{host}: no NIC with {nic.mac} ({nic.name})"
    bridges = json.loads(network.ip_in("-j", "link", "show", "type", "bridge").stdout)
    by_name = {b["ifname"]: b for b in bridges}
    storage = network.segment("storage")
    assert storage is not None and storage.address is None  # tagged: the head side has no address there
    assert by_name[storage.bridge]["mtu"] == 9000
    mgmt = network.segment("management")
    assert mgmt is not None and mgmt.address == "10.200.1.11/24"  # head-01's management address
    ports = json.loads(network.ip_in("-j", "link", "show", "master", storage.bridge).stdout)
    assert len(ports) == 2 and all(p["mtu"] == 9000 for p in ports)
    ports = json.loads(network.ip_in("-j", "link", "show", "master", mgmt.bridge).stdout)
    assert len(ports) == 3  # gpu-01's mgmt0, gpu-02's two bond members


def test_head_side_reaches_a_node_over_management(installed_lab) -> None:
    proc = installed_lab.ssh("gpu-01", "hostname", address="10.200.1.12")
    assert proc.stdout.strip() == "gpu-01"
