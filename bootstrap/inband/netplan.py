"""A node's netplan configuration, derived from the inventory's networks, interfaces and bonds.

What the ``networks`` role writes to ``/etc/netplan/60-rackctl.yaml`` (its template renders
``networks_netplan_config``, emitted per host by :mod:`bootstrap.inband.render`); the offline tests run
``netplan generate`` on it. Rendered: every port or bond on the management, storage or external network.
A port with a MAC is matched by it and renamed to its inventory name; a network with a VLAN is a VLAN
device ``<port>.<id>`` on the port or bond (the port then carries the largest MTU of what rides on it);
bonds get their mode, MII monitoring, LACP rate and hash policy (802.3ad) or a primary (active-backup).
The default route goes through the gateway of the external network when the node is on it, else the
management network's. The PXE/OOB port is left as the install configured it: it is how rackctl reaches
the node until the network stage has moved access to management.
"""

from __future__ import annotations

from typing import Any

from bootstrap.inventory.models import Bond, Interface, Inventory, Network, Node

#: networks the role configures (the PXE/OOB port stays as the install left it)
CONFIGURED_NETWORKS = ("management", "storage", "external")
MII_MONITOR_MS = 100


def _default_route_network(inv: Inventory, node: Node) -> str | None:
    nets = inv.networks.named()
    for name in ("external", "management"):
        net = nets.get(name)
        if net is not None and net.gateway is not None and node.address_on(name) is not None:
            return name
    return None


def _l3(inv: Inventory, node: Node, item: Interface | Bond, net: Network, network: str) -> dict[str, Any]:
    """Addresses, routes and DNS of ``item`` on ``network`` (no DHCP, no IPv6 autoconfiguration)."""
    cidr = inv.networks.cidr_of(network)
    conf: dict[str, Any] = {"dhcp4": False, "dhcp6": False, "accept-ra": False, "link-local": []}
    if item.ip is not None and cidr is not None:
        conf["addresses"] = [f"{item.ip}/{cidr.prefixlen}"]
    if network == _default_route_network(inv, node) and net.gateway is not None:
        conf["routes"] = [{"to": "default", "via": str(net.gateway)}]
        if inv.cluster.dns_servers:
            conf["nameservers"] = {
                "addresses": [str(d) for d in inv.cluster.dns_servers],
                "search": [inv.cluster.domain],
            }
    return conf


def _bond_parameters(bond: Bond) -> dict[str, Any]:
    params: dict[str, Any] = {"mode": bond.mode, "mii-monitor-interval": MII_MONITOR_MS}
    if bond.mode == "802.3ad":
        params.update({"lacp-rate": "fast", "transmit-hash-policy": "layer3+4"})
    elif bond.mode == "active-backup":
        params["primary"] = bond.members[0]
    return params


def netplan_config(inv: Inventory, node: Node) -> dict[str, Any]:
    """The netplan document (``network:`` version 2, networkd) of ``node``; empty sections are left out."""
    nets = inv.networks.named()
    ethernets: dict[str, dict[str, Any]] = {}
    bonds: dict[str, dict[str, Any]] = {}
    vlans: dict[str, dict[str, Any]] = {}
    port_mtu: dict[str, int] = {}
    members = {m: bond for bond in node.bonds for m in bond.members}

    def attach(item: Interface | Bond, network: str | None, own_mtu: int | None) -> dict[str, Any] | None:
        if network not in CONFIGURED_NETWORKS or network not in nets:
            return None
        net = nets[network]
        mtu = max(own_mtu or net.mtu, net.mtu)
        port_mtu[item.name] = max(port_mtu.get(item.name, 0), mtu)
        vlan = net.vlan or item.vlan
        if vlan is None:
            return _l3(inv, node, item, net, network)
        vlans[f"{item.name}.{vlan}"] = {
            "id": vlan,
            "link": item.name,
            "mtu": net.mtu,
            **_l3(inv, node, item, net, network),
        }
        return {"dhcp4": False, "dhcp6": False, "accept-ra": False, "link-local": []}

    for iface in node.interfaces:
        bond = members.get(iface.name)
        if bond is not None:
            if bond.network not in CONFIGURED_NETWORKS:
                continue
            conf: dict[str, Any] | None = {"dhcp4": False, "dhcp6": False, "accept-ra": False, "link-local": []}
        else:
            conf = attach(iface, iface.network, iface.mtu)
        if conf is None:
            continue
        if iface.mac:
            conf = {"match": {"macaddress": iface.mac}, "set-name": iface.name, **conf}
        ethernets[iface.name] = conf
    for bond in node.bonds:
        conf = attach(bond, bond.network, None)
        if conf is None:
            continue
        bonds[bond.name] = {"interfaces": list(bond.members), "parameters": _bond_parameters(bond), **conf}
        for member in bond.members:  # members carry what the bond carries
            port_mtu[member] = max(port_mtu.get(member, 0), port_mtu[bond.name])
    for name, conf in [*ethernets.items(), *bonds.items()]:
        own = next((i.mtu for i in node.interfaces if i.name == name and i.mtu), None)
        conf["mtu"] = max(port_mtu.get(name, 1500), own or 0)
    network: dict[str, Any] = {"version": 2, "renderer": "networkd"}
    for key, section in (("ethernets", ethernets), ("bonds", bonds), ("vlans", vlans)):
        if section:
            network[key] = section
    return {"network": network}


def expected_addresses(config: dict[str, Any]) -> list[str]:
    """``"<interface> <address/prefix>"`` for every address ``config`` puts on an interface, bond or VLAN."""
    network = config.get("network", {})
    return [
        f"{name} {address}"
        for section in ("ethernets", "bonds", "vlans")
        for name, conf in network.get(section, {}).items()
        for address in conf.get("addresses", [])
    ]


def check_address(node: Node) -> str | None:
    """The address the controller must reach the node on after the role applied (management)."""
    address = node.address_on("management")
    return str(address) if address is not None else None


def networks_host_vars(inv: Inventory, node: Node) -> dict[str, Any]:
    """Host vars of the ``networks`` role: the netplan, the address to reach it on, the addresses to expect."""
    config = netplan_config(inv, node)
    return {
        "networks_netplan_config": config,
        "networks_check_address": check_address(node),
        "networks_expected_addresses": expected_addresses(config),
    }
