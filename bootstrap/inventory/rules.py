"""Rules that relate several parts of the inventory. Each rule yields errors or warnings.

A rule is a function ``(inventory) -> Iterable[Finding]`` registered with :func:`rule`; every rule runs,
so a user sees all problems at once. Rules must be linear in the number of nodes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date

from pydantic import ValidationError

from bootstrap.errors import Problem
from bootstrap.inventory.autoscaling import sizing_instances
from bootstrap.inventory.driver_images import PUBLISHED_IN_WORDS, os_release_tag, published_driver_tag
from bootstrap.inventory.firmware import COMPONENT_ORDER
from bootstrap.inventory.hardware import BUILTIN_MODELS, GPU_TYPES, MIG_PROFILES_80GB
from bootstrap.inventory.models import Inventory, Network, Node, Role
from bootstrap.inventory.profiles import (
    OPERATOR_DEFAULT_DRIVER,
    OPERATOR_DOCKER_DEFAULT,
    PROFILES,
    TRITON_CUDA,
    TRITON_FIRST_TRTLLM,
    TRTLLM_TRITON,
    Versions,
    containerd_minimum,
    kubeadm_api_for,
    operator_default_driver,
    operator_line,
    triton_driver_verdict,
    version_tuple,
)
from bootstrap.inventory.suggest import did_you_mean
from bootstrap.inventory.support import kubernetes_eol, operator_past_support, supported_kubernetes
from bootstrap.inventory.trtllm import SUPPORTED_VERSIONS, version_info


@dataclass(frozen=True)
class Finding:
    """A rule's result: an error blocks, a warning informs."""

    problem: Problem
    warning: bool = False


Rule = Callable[[Inventory], Iterable[Finding]]
RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    """Register a rule under a stable name (tests address rules by it)."""

    def deco(func: Rule) -> Rule:
        RULES[name] = func
        return func

    return deco


def err(path: str, message: str, fix: str = "") -> Finding:
    """An error finding."""
    return Finding(Problem(path, message, fix))


def warn(path: str, message: str, fix: str = "") -> Finding:
    """A warning finding."""
    return Finding(Problem(path, message, fix), warning=True)


def run_rules(inventory: Inventory) -> tuple[list[Problem], list[Problem]]:
    """Run every rule; return (errors, warnings)."""
    errors: list[Problem] = []
    warnings: list[Problem] = []
    for check in RULES.values():
        for finding in check(inventory):
            (warnings if finding.warning else errors).append(finding.problem)
    return errors, warnings


def _node_path(index: int, suffix: str = "") -> str:
    return f"nodes[{index}]{suffix}"


def _addresses(inv: Inventory) -> Iterator[tuple[str, Node, str, ipaddress.IPv4Address]]:
    """(path, node, network, ip) of every static address of every node."""
    for i, node in enumerate(inv.nodes):
        for j, iface in enumerate(node.interfaces):
            if iface.ip is not None:
                yield _node_path(i, f".interfaces[{j}].ip"), node, iface.network or "", iface.ip
        for j, bond in enumerate(node.bonds):
            if bond.ip is not None:
                yield _node_path(i, f".bonds[{j}].ip"), node, bond.network, bond.ip


# --- uniqueness -------------------------------------------------------------------------------


def _duplicates(items: Iterable[tuple[str, object]], what: str, fix: str) -> Iterator[Finding]:
    first: dict[object, str] = {}
    for path, value in items:
        if value is None:
            continue
        if value in first:
            yield err(path, f"duplicate {what} {value} (also at {first[value]})", fix)
        else:
            first[value] = path


@rule("unique-hostnames")
def unique_hostnames(inv: Inventory) -> Iterator[Finding]:
    """Hostnames are unique."""
    yield from _duplicates(
        ((_node_path(i, ".hostname"), n.hostname) for i, n in enumerate(inv.nodes)),
        "hostname",
        "give every node its own hostname",
    )


@rule("unique-service-tags")
def unique_service_tags(inv: Inventory) -> Iterator[Finding]:
    """Service tags are unique."""
    yield from _duplicates(
        ((_node_path(i, ".service_tag"), n.service_tag) for i, n in enumerate(inv.nodes)),
        "service tag",
        "check the tag on the server's luggage tag or in `rackctl discover`",
    )


@rule("unique-macs")
def unique_macs(inv: Inventory) -> Iterator[Finding]:
    """MAC addresses are unique across the cluster."""
    items = (
        (_node_path(i, f".interfaces[{j}].mac"), iface.mac)
        for i, n in enumerate(inv.nodes)
        for j, iface in enumerate(n.interfaces)
    )
    yield from _duplicates(items, "MAC", "each port has its own MAC; run `rackctl discover` to read them")


@rule("unique-ips")
def unique_ips(inv: Inventory) -> Iterator[Finding]:
    """Static IPs are unique across the cluster."""
    items = ((path, ip) for path, _, _, ip in _addresses(inv))
    yield from _duplicates(items, "IP", "give each interface its own address")


@rule("unique-bmc-addresses")
def unique_bmc_addresses(inv: Inventory) -> Iterator[Finding]:
    """Two nodes never share a BMC."""
    items = ((_node_path(i, ".bmc.address"), n.bmc.url) for i, n in enumerate(inv.nodes))
    yield from _duplicates(items, "BMC address", "each server has its own iDRAC address")


@rule("unique-interface-names")
def unique_interface_names(inv: Inventory) -> Iterator[Finding]:
    """Interface and bond names are unique within a node; bond members exist."""
    for i, node in enumerate(inv.nodes):
        names = [iface.name for iface in node.interfaces] + [b.name for b in node.bonds]
        seen: set[str] = set()
        for name in names:
            if name in seen:
                yield err(_node_path(i, ".interfaces"), f"interface name {name!r} used twice on {node.hostname}")
            seen.add(name)
        iface_names = {iface.name for iface in node.interfaces}
        for j, bond in enumerate(node.bonds):
            for member in bond.members:
                if member not in iface_names:
                    yield err(
                        _node_path(i, f".bonds[{j}].members"),
                        f"bond member {member!r} is not an interface of {node.hostname}",
                        did_you_mean(member, iface_names),
                    )


# --- networks ---------------------------------------------------------------------------------


@rule("network-definitions")
def network_definitions(inv: Inventory) -> Iterator[Finding]:
    """Every network has a CIDR (or shares one), gateways inside, DHCP range inside the PXE network."""
    named = inv.networks.named()
    for name, net in named.items():
        path = f"networks.{name}"
        if net.shared_with:
            other = named.get(net.shared_with)
            if other is None or net.shared_with == name:
                yield err(f"{path}.shared_with", f"cannot share with {net.shared_with!r}", "name another network")
            elif net.cidr is not None and other.cidr is not None and net.cidr != other.cidr:
                yield err(
                    f"{path}.cidr",
                    f"{net.cidr} differs from {net.shared_with}'s {other.cidr} although shared_with is set",
                    f"drop cidr (it is taken from {net.shared_with}) or drop shared_with",
                )
        elif net.cidr is None:
            yield err(f"{path}.cidr", "no cidr", "set cidr, or shared_with to reuse another network's segment")
        cidr = inv.networks.cidr_of(name)
        if cidr is None:
            continue
        if net.gateway is not None and net.gateway not in cidr:
            yield err(f"{path}.gateway", f"gateway {net.gateway} is outside {cidr}", f"pick an address in {cidr}")
        if net.dhcp_range is not None:
            for end in ("start", "end"):
                ip = getattr(net.dhcp_range, end)
                if ip not in cidr:
                    yield err(f"{path}.dhcp_range.{end}", f"{ip} is outside {cidr}", f"use addresses in {cidr}")
    if inv.networks.pxe.dhcp_range is None:
        yield warn("networks.pxe.dhcp_range", "no DHCP range: only nodes with a MAC and a PXE IP can boot")


def _reserved(net: Network, cidr: ipaddress.IPv4Network) -> dict[ipaddress.IPv4Address, str]:
    reserved = {cidr.network_address: "the network address", cidr.broadcast_address: "the broadcast address"}
    if net.gateway is not None:
        reserved[net.gateway] = "the gateway"
    return reserved


@rule("ips-inside-networks")
def ips_inside_networks(inv: Inventory) -> Iterator[Finding]:
    """Each static IP lies inside its network and is not its network/broadcast/gateway/VIP address."""
    named = inv.networks.named()
    vip = inv.networks.kubernetes.api_vip
    for path, _node, network, ip in _addresses(inv):
        if not network:
            yield err(path, f"{ip} has no network", "set `network:` on that interface")
            continue
        cidr = inv.networks.cidr_of(network)
        if cidr is None:
            yield err(path, f"network {network!r} is not defined", f"define networks.{network}")
            continue
        if ip not in cidr:
            yield err(path, f"{ip} is outside the {network} network {cidr}", f"pick an address in {cidr}")
            continue
        reserved = _reserved(named[network], cidr)
        if ip in reserved:
            yield err(path, f"{ip} is {reserved[ip]} of {cidr}", "pick a host address")
        if ip == vip:
            yield err(path, f"{ip} is the Kubernetes API virtual IP", "pick another address")


@rule("api-vip")
def api_vip(inv: Inventory) -> Iterator[Finding]:
    """The API VIP is a host address of the management network."""
    vip = inv.networks.kubernetes.api_vip
    cidr = inv.networks.cidr_of("management")
    if cidr is None:
        return
    path = "networks.kubernetes.api_vip"
    if vip not in cidr:
        yield err(path, f"{vip} is outside the management network {cidr}", f"pick a free address in {cidr}")
        return
    reserved = _reserved(inv.networks.management, cidr)
    if vip in reserved:
        yield err(path, f"{vip} is {reserved[vip]} of {cidr}", "pick a free host address")


@rule("dhcp-range-vs-static")
def dhcp_range_vs_static(inv: Inventory) -> Iterator[Finding]:
    """The PXE DHCP range overlaps no static address, gateway or VIP on that segment."""
    rng = inv.networks.pxe.dhcp_range
    if rng is None:
        return
    lo, hi = int(rng.start), int(rng.end)
    pxe_like = {"pxe"} | ({inv.networks.pxe.shared_with} if inv.networks.pxe.shared_with else set())
    for path, _node, network, ip in _addresses(inv):
        if network in pxe_like and lo <= int(ip) <= hi:
            yield err(
                path,
                f"{ip} is inside the PXE DHCP range {rng.start}-{rng.end}",
                "move the static address out of the range or shrink networks.pxe.dhcp_range",
            )
    gw = inv.networks.pxe.gateway
    if gw is not None and lo <= int(gw) <= hi:
        yield err("networks.pxe.dhcp_range", f"the range contains the gateway {gw}", "shrink the range")
    for i, node in enumerate(inv.nodes):
        try:
            bmc_ip = ipaddress.IPv4Address(node.bmc.host)
        except ValueError:
            continue
        if lo <= int(bmc_ip) <= hi and "oob" in pxe_like:
            yield err(
                _node_path(i, ".bmc.address"),
                f"BMC {bmc_ip} is inside the PXE DHCP range {rng.start}-{rng.end} on the shared segment",
                "move the iDRAC address or shrink networks.pxe.dhcp_range",
            )


@rule("networks-overlap")
def networks_overlap(inv: Inventory) -> Iterator[Finding]:
    """No two networks (including pod and service CIDRs) overlap, unless declared shared."""
    cidrs: list[tuple[str, ipaddress.IPv4Network]] = []
    for name, net in inv.networks.named().items():
        if net.cidr is not None and not net.shared_with:
            cidrs.append((f"networks.{name}", net.cidr))
    k8s = inv.networks.kubernetes
    cidrs += [
        ("networks.kubernetes.pod_cidr", k8s.pod_cidr),
        ("networks.kubernetes.service_cidr", k8s.service_cidr),
    ]
    for a in range(len(cidrs)):
        for b in range(a + 1, len(cidrs)):
            (pa, ca), (pb, cb) = cidrs[a], cidrs[b]
            if ca.overlaps(cb):
                yield err(
                    pb,
                    f"{cb} overlaps {pa} ({ca})",
                    "use disjoint ranges, or `shared_with:` if they are the same segment",
                )


# --- nodes and hardware -----------------------------------------------------------------------


@rule("control-planes")
def control_planes(inv: Inventory) -> Iterator[Finding]:
    """An odd number (>= 3) of control planes, exactly one head; one control plane only in a lab."""
    count = len(inv.control_planes)
    heads = [n for n in inv.nodes if n.role == Role.HEAD]
    if len(heads) != 1:
        yield err(
            "nodes",
            f"{len(heads)} nodes have role head; exactly one is needed (it runs the boot services)",
            "make one R660 `role: head` and the other control planes `role: control-plane`",
        )
    if count == 1 and inv.cluster.lab:
        yield warn("nodes", "a single control plane: no high availability (allowed because cluster.lab is true)")
    elif count < 3 or count % 2 == 0:
        yield err(
            "nodes",
            f"{count} control plane(s): etcd needs an odd number, at least 3, to survive a failure",
            "use 3 (or 5) nodes with role head/control-plane; a single one only with cluster.lab: true",
        )


@rule("hardware-models")
def hardware_models(inv: Inventory) -> Iterator[Finding]:
    """Models exist, allow the node's role, and the node's GPUs are ones the model carries."""
    known = set(inv.hardware_models) | set(BUILTIN_MODELS)
    for i, node in enumerate(inv.nodes):
        hw = inv.hardware(node.model)
        if hw is None:
            yield err(
                _node_path(i, ".model"),
                f"unknown hardware model {node.model!r}",
                did_you_mean(node.model, known),
            )
            continue
        if node.role.value not in hw.roles:
            yield err(
                _node_path(i, ".role"),
                f"{node.model} cannot be a {node.role.value}",
                f"use one of {', '.join(hw.roles)} or another model",
            )
        if node.gpus is None:
            if len(hw.gpu_types) > 1 or len(hw.gpu_counts) > 1:
                yield err(
                    _node_path(i, ".gpus"),
                    f"{node.model} comes with {' or '.join(map(str, hw.gpu_counts))} x "
                    f"{' or '.join(hw.gpu_types)}; say which this node has",
                    f"add `gpus: {{type: {hw.gpu_types[0]}, count: {hw.gpu_counts[-1]}}}`",
                )
            continue
        if node.gpus.type not in hw.gpu_types and not (node.gpus.count == 0 and not hw.gpu_types):
            yield err(
                _node_path(i, ".gpus.type"),
                f"{node.model} does not carry {node.gpus.type!r} GPUs",
                f"use one of {', '.join(hw.gpu_types) or 'none (no gpus: key)'}",
            )
        if node.gpus.count not in hw.gpu_counts:
            yield err(
                _node_path(i, ".gpus.count"),
                f"{node.model} has {' or '.join(map(str, hw.gpu_counts))} GPUs, not {node.gpus.count}",
                f"set count to one of {hw.gpu_counts}",
            )


@rule("mig-profiles")
def mig_profiles(inv: Inventory) -> Iterator[Finding]:
    """MIG only on GPUs that support it, with a profile the GPU operator knows."""
    for i, node in enumerate(inv.nodes):
        if node.mig_profile is None:
            continue
        gpu = GPU_TYPES.get(inv.gpus_of(node).type)
        if gpu is None or not gpu.mig:
            yield err(
                _node_path(i, ".mig_profile"),
                f"{inv.gpus_of(node).type} GPUs do not support MIG",
                "remove mig_profile (MIG needs H100 GPUs)",
            )
        elif node.mig_profile not in MIG_PROFILES_80GB:
            yield err(
                _node_path(i, ".mig_profile"),
                f"unknown MIG profile {node.mig_profile!r}",
                did_you_mean(node.mig_profile, MIG_PROFILES_80GB),
            )


@rule("bios-profiles")
def bios_profiles(inv: Inventory) -> Iterator[Finding]:
    """A node's BIOS profile exists."""
    for i, node in enumerate(inv.nodes):
        name = inv.node_bios_profile(node)
        if name is not None and inv.bios_profile(name) is None:
            options = set(inv.bios_profiles) | {"control-plane", "gpu-worker"}
            yield err(_node_path(i, ".bios_profile"), f"unknown BIOS profile {name!r}", did_you_mean(name, options))


@rule("node-networks")
def node_networks(inv: Inventory) -> Iterator[Finding]:
    """Each node has a PXE interface with an IP and an address on the management network."""
    for i, node in enumerate(inv.nodes):
        pxe = node.interface_on("pxe")
        if pxe is None or pxe.ip is None:
            yield err(
                _node_path(i, ".interfaces"),
                f"{node.hostname} has no interface with an IP on the pxe network",
                "add e.g. `{name: pxe0, network: pxe, fqdd: NIC.Embedded.1-1-1, ip: <addr>}`",
            )
        elif pxe.mac is None:
            yield warn(
                _node_path(i, ".interfaces"),
                f"{node.hostname}: the PXE interface has no MAC yet",
                "run `rackctl discover --write` to fill it from the iDRAC",
            )
        if node.address_on("management") is None:
            yield err(
                _node_path(i, ".interfaces"),
                f"{node.hostname} has no address on the management network (needed by Kubernetes)",
                "add an interface or bond with `network: management` and an ip",
            )


@rule("network-attachments")
def network_attachments(inv: Inventory) -> Iterator[Finding]:
    """Ports and bonds fit their networks: VLANs as the network defines them, MTUs the ports can carry,
    bond members plain (no network or address of their own) and in one bond only."""
    nets = inv.networks.named()
    for i, node in enumerate(inv.nodes):
        ifaces = {iface.name: iface for iface in node.interfaces}
        attached = [(f".interfaces[{k}]", x.name, x.network, x.vlan) for k, x in enumerate(node.interfaces)]
        attached += [(f".bonds[{k}]", b.name, b.network, b.vlan) for k, b in enumerate(node.bonds)]
        for suffix, name, network, vlan in attached:
            net = nets.get(network) if network else None
            if net is None or vlan is None or vlan == net.vlan:
                continue
            path = _node_path(i, f"{suffix}.vlan")
            if net.vlan is None:
                yield err(
                    path,
                    f"{name} tags VLAN {vlan} but the {network} network has no VLAN",
                    f"set networks.{network}.vlan: {vlan} (every node then tags it) or drop the vlan of {name}",
                )
            else:
                yield err(
                    path,
                    f"{name} tags VLAN {vlan} but the {network} network is VLAN {net.vlan}",
                    f"drop the vlan of {name} (it is taken from networks.{network}.vlan)",
                )
        for k, iface in enumerate(node.interfaces):
            net = nets.get(iface.network) if iface.network else None
            if net is not None and iface.mtu is not None and iface.mtu < net.mtu:
                yield err(
                    _node_path(i, f".interfaces[{k}].mtu"),
                    f"{iface.name} has MTU {iface.mtu}, smaller than the {iface.network} network's MTU {net.mtu}",
                    f"raise {iface.name}'s mtu to at least {net.mtu} or lower networks.{iface.network}.mtu",
                )
        owner: dict[str, str] = {}
        for k, bond in enumerate(node.bonds):
            net = nets.get(bond.network)
            for member in bond.members:
                path = _node_path(i, f".bonds[{k}].members")
                if member in owner:
                    yield err(path, f"{member} is a member of {owner[member]} and {bond.name}", "keep it in one bond")
                owner.setdefault(member, bond.name)
                port = ifaces.get(member)
                if port is None:
                    continue  # reported by unique-interface-names
                if port.network is not None or port.ip is not None:
                    yield err(
                        path,
                        f"bond member {member} has its own network/ip ({port.network}, {port.ip})",
                        f"drop network and ip from {member}: the bond {bond.name} carries the {bond.network} network",
                    )
                if net is not None and port.mtu is not None and port.mtu < net.mtu:
                    yield err(
                        path,
                        f"bond member {member} has MTU {port.mtu}, smaller than the {bond.network} network's "
                        f"MTU {net.mtu} that {bond.name} carries",
                        f"raise {member}'s mtu to at least {net.mtu} or lower networks.{bond.network}.mtu",
                    )


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@rule("labels-and-taints")
def labels_and_taints(inv: Inventory) -> Iterator[Finding]:
    """Labels and taints are valid Kubernetes syntax."""
    for i, node in enumerate(inv.nodes):
        for key, value in node.labels.items():
            if not _LABEL_KEY.match(key):
                yield err(_node_path(i, f".labels.{key}"), f"invalid label key {key!r}", "use [prefix/]name")
            if not _LABEL_VALUE.match(value):
                yield err(
                    _node_path(i, f".labels.{key}"),
                    f"invalid label value {value!r}",
                    "at most 63 characters: letters, digits, '-', '_', '.'",
                )
        for j, taint in enumerate(node.taints):
            if not _LABEL_KEY.match(taint.key):
                yield err(
                    _node_path(i, f".taints[{j}].key"),
                    f"invalid taint key {taint.key!r}",
                    "use [prefix/]name",
                )


# --- BMC access -------------------------------------------------------------------------------


def _credentials_set_at(inv: Inventory, index: int) -> str:
    """Where node ``index``'s BMC credentials name is set: the node, its model's or role's group, or the
    defaults (the most specific layer that sets it, as :meth:`Inventory.bmc_settings` merges them)."""
    node = inv.nodes[index]
    if node.bmc.credentials is not None:
        return _node_path(index, ".bmc.credentials")
    for key in (node.model, node.role.value):
        group = inv.bmc.groups.get(key)
        if group is not None and group.credentials is not None:
            return f"bmc.groups.{key}.credentials"
    return "bmc.defaults.credentials"


@rule("bmc-credentials-defined")
def bmc_credentials_defined(inv: Inventory) -> Iterator[Finding]:
    """Each credentials name a BMC uses is defined under ``credentials:``: said once where it is set (the
    defaults or a group reach many nodes), naming the nodes it reaches."""
    undefined: dict[str, tuple[str, list[str]]] = {}
    for i, node in enumerate(inv.nodes):
        name = inv.bmc_settings(node).credentials
        if name is not None and name not in inv.credentials:
            undefined.setdefault(_credentials_set_at(inv, i), (name, []))[1].append(node.hostname)
    for path, (name, nodes) in undefined.items():
        reaches = "" if path.startswith("nodes[") else f" (BMCs of {', '.join(nodes)})"
        yield err(
            path,
            f"credentials {name!r} are not defined under `credentials:`{reaches}",
            did_you_mean(name, inv.credentials),
        )


@rule("bmc-access")
def bmc_access(inv: Inventory) -> Iterator[Finding]:
    """Each BMC has credentials (defined: :func:`bmc_credentials_defined`) and a way to verify its TLS
    certificate (CA bundle, fingerprint or an explicit insecure); whether the bundle exists on this machine is
    an environment check (preflight)."""
    oob = inv.networks.cidr_of("oob")
    for i, node in enumerate(inv.nodes):
        settings = inv.bmc_settings(node)
        path = _node_path(i, ".bmc")
        if settings.credentials is None:
            yield err(
                f"{path}.credentials",
                f"no BMC credentials for {node.hostname}",
                "set bmc.credentials on the node, or bmc.defaults.credentials / bmc.groups.<role|model>",
            )
        if settings.insecure:
            yield warn(f"{path}.insecure", f"TLS verification is off for {node.hostname}'s BMC")
        elif settings.ca_file is None and settings.fingerprint is None:
            yield err(
                path,
                f"no way to verify the TLS certificate of {node.hostname}'s BMC",
                "set ca_file or fingerprint (bmc.defaults, bmc.groups or the node), or insecure: true explicitly",
            )
        try:
            ip = ipaddress.IPv4Address(node.bmc.host)
        except ValueError:
            continue
        if ip.is_loopback:
            if not inv.cluster.lab:
                yield err(
                    f"{path}.address",
                    f"{ip} is a loopback address",
                    "loopback BMCs only with cluster.lab: true",
                )
        elif oob is not None and ip not in oob:
            yield err(f"{path}.address", f"{ip} is outside the OOB network {oob}", f"use an address in {oob}")


@rule("credential-sources")
def credential_sources(inv: Inventory) -> Iterator[Finding]:
    """A password file is given as a file path; whether it exists with mode 0600, or the password env var is
    set, is an environment check (``bootstrap.inventory.environment_checks``, run by preflight)."""
    for name, cred in inv.credentials.items():
        file = cred.password_file
        if file is not None and (not file.name or file.name in (".", "..")):
            yield err(
                f"credentials.{name}.password_file",
                f"{str(file)!r} is not a file path",
                "name the file holding the password, e.g. secrets/bmc.yml",
            )


# --- versions ---------------------------------------------------------------------------------


@rule("software-versions")
def software_versions(inv: Inventory) -> Iterator[Finding]:
    """Profile exists; versions agree with each other (kubeadm API, driver vs CUDA, TRT-LLM vs Triton)."""
    cluster = inv.cluster
    if cluster.software_profile not in PROFILES:
        yield err(
            "cluster.software_profile",
            f"unknown profile {cluster.software_profile!r}",
            did_you_mean(cluster.software_profile, PROFILES),
        )
        return
    for key in cluster.versions:
        if key not in Versions.model_fields:
            yield err(
                f"cluster.versions.{key}",
                f"unknown version key {key!r}",
                did_you_mean(key, Versions.model_fields),
            )
    try:
        versions = cluster.resolved_versions()
    except ValidationError:
        return
    for note in cluster.profile().notes:
        yield warn("cluster.software_profile", f"{cluster.software_profile}: {note}")
    yield from _version_consistency(versions)


def _version_consistency(v: Versions) -> Iterator[Finding]:
    path = "cluster.versions"
    if len(version_tuple(v.kubernetes)) != 3:
        yield err(f"{path}.kubernetes", f"{v.kubernetes!r} is not a x.y.z Kubernetes version", "e.g. 1.33.5")
        return
    expected_api = kubeadm_api_for(v.kubernetes)
    if v.kubeadm_api is not None and v.kubeadm_api != expected_api:
        yield err(
            f"{path}.kubeadm_api",
            f"{v.kubeadm_api} does not match Kubernetes {v.kubernetes} (which uses {expected_api})",
            f"remove kubeadm_api (it is derived) or set {expected_api}",
        )
    minimum = containerd_minimum(v.kubernetes)
    if minimum and version_tuple(v.containerd)[:2] < version_tuple(minimum)[:2]:
        yield err(
            f"{path}.containerd",
            f"containerd {v.containerd} cannot run Kubernetes {v.kubernetes}'s kubelet: from 1.38 it asks the "
            "runtime for its cgroup driver over CRI RuntimeConfig, which containerd answers from 2.0",
            f"set containerd to a {minimum} or later release and site_services.packages.upstreams.containerd: true "
            "(the mirror then carries containerd.io at that version), or an older kubernetes",
        )
    line = operator_line(v.gpu_operator)
    driver = v.nvidia_driver or operator_default_driver(v.gpu_operator)
    if driver is None:
        known = ", ".join(r for r in OPERATOR_DEFAULT_DRIVER if operator_line(r) == line) or "none"
        yield warn(
            f"{path}.nvidia_driver",
            f"the default driver of GPU operator {v.gpu_operator} is not known to rackctl (releases of {line} "
            f"it knows: {known}), so the driver was not checked against Triton {v.triton}",
            "pin nvidia_driver (the chart's driver.version) or set gpu_operator to a release rackctl knows",
        )
    if line in OPERATOR_DOCKER_DEFAULT:
        yield warn(
            f"{path}.gpu_operator",
            f"GPU operator {v.gpu_operator} defaults operator.defaultRuntime to docker; rackctl sets containerd",
        )
    if version_tuple(v.triton) < version_tuple(TRITON_FIRST_TRTLLM):
        yield err(
            f"{path}.triton",
            f"Triton {v.triton} has no TensorRT-LLM backend (the first is {TRITON_FIRST_TRTLLM})",
            f"use the release matching TensorRT-LLM {v.trtllm}",
        )
    trt_key = ".".join(str(p) for p in version_tuple(v.trtllm)[:2])
    if v.trtllm in SUPPORTED_VERSIONS:
        containers = version_info(v.trtllm).containers
    else:
        containers = (TRTLLM_TRITON[trt_key],) if trt_key in TRTLLM_TRITON else ()
    if not containers:
        yield warn(f"{path}.trtllm", f"no known Triton release for TensorRT-LLM {v.trtllm}", "check the pairing")
    elif v.triton not in containers:
        carried = (
            f"its container is {containers[0]}-trtllm-python-py3"
            if len(containers) == 1
            else f"the trtllm-python-py3 containers carrying it: {', '.join(containers)}"
        )
        yield err(
            f"{path}.triton",
            f"Triton {v.triton} does not match TensorRT-LLM {v.trtllm} ({carried})",
            f"set triton: '{containers[0]}' or the TensorRT-LLM version of your engines",
        )
    if v.triton not in TRITON_CUDA:
        yield warn(
            f"{path}.triton",
            f"Triton {v.triton} is not in rackctl's driver matrix (known: {', '.join(TRITON_CUDA)}), so its CUDA "
            "driver requirement was not checked",
            "read the release's 'Driver Requirements' notes, or use a release rackctl knows",
        )
    verdict = triton_driver_verdict(v.triton, driver) if driver else None
    if verdict is not None and not verdict.accepted:
        source = "pinned" if v.nvidia_driver else f"the default of GPU operator {v.gpu_operator}"
        refused = verdict.accepted is False
        yield (err if refused else warn)(
            f"{path}.nvidia_driver",
            f"driver {driver} ({source}): {verdict.reason}",
            f"pin nvidia_driver to {verdict.fix}",
        )


@rule("supported-versions")
def supported_versions(inv: Inventory) -> Iterator[Finding]:
    """Warn where the Kubernetes release or the GPU Operator chart is past its upstream support."""
    if inv.cluster.software_profile not in PROFILES:
        return
    try:
        versions = inv.cluster.resolved_versions()
    except ValidationError:
        return
    yield from support_findings(versions, date.today(), inv.cluster.software_profile, set(inv.cluster.versions))


def support_findings(v: Versions, today: date, profile: str, pinned: set[str]) -> Iterator[Finding]:
    """The end-of-life warnings for versions ``v`` on ``today`` (``pinned``: the keys the inventory overrides)."""
    path = "cluster.versions"
    current = PROFILES["current"].versions

    def source(key: str) -> str:
        return "" if key in pinned else f" (from profile {profile})"

    eol = kubernetes_eol(v.kubernetes, today) if len(version_tuple(v.kubernetes)) == 3 else None
    if eol:
        supported = ", ".join(supported_kubernetes(today)) or "a newer minor"
        yield warn(
            f"{path}.kubernetes",
            f"{v.kubernetes}{source('kubernetes')}: {eol}; it gets no more fixes",
            f"set cluster.versions.kubernetes to a supported release ({supported}; profile current: "
            f"{current.kubernetes})",
        )
    past = operator_past_support(v.gpu_operator)
    if past:
        yield warn(
            f"{path}.gpu_operator",
            f"{v.gpu_operator}{source('gpu_operator')}: {past}",
            f"set cluster.versions.gpu_operator to a supported release (profile current: {current.gpu_operator})",
        )


def support_warnings(inv: Inventory) -> list[Problem]:
    """The end-of-life warnings of ``inv`` (``plan`` and ``up`` show them; ``validate`` shows every warning)."""
    return [f.problem for f in supported_versions(inv)]


@rule("firmware-baseline")
def firmware_baseline(inv: Inventory) -> Iterator[Finding]:
    """Baseline entries name known hardware models and numeric versions."""
    known = set(inv.hardware_models) | set(BUILTIN_MODELS)
    for model, minimum in inv.firmware.baseline.items():
        path = f"firmware.baseline.{model}"
        if model not in known:
            yield err(path, f"unknown hardware model {model!r}", did_you_mean(model, known))
        for part in COMPONENT_ORDER:
            value = getattr(minimum, part)
            if value is not None and not version_tuple(value):
                yield err(f"{path}.{part}", f"{value!r} is not a version", "write it like 1.6.2")


@rule("fabric-manager")
def fabric_manager(inv: Inventory) -> Iterator[Finding]:
    """Custom models that declare NVSwitch must carry SXM GPUs (Fabric Manager manages SXM fabrics)."""
    for name, hw in inv.hardware_models.items():
        if hw.nvswitch and not any(t.endswith("SXM") for t in hw.gpu_types):
            yield err(
                f"hardware_models.{name}.nvswitch",
                "NVSwitch with non-SXM GPUs",
                "set nvswitch: false, or list H100-SXM in gpu_types",
            )
        for t in hw.gpu_types:
            if t not in GPU_TYPES:
                yield err(f"hardware_models.{name}.gpu_types", f"unknown GPU type {t!r}", did_you_mean(t, GPU_TYPES))


@rule("operator-driver-image")
def operator_driver_image(inv: Inventory) -> Iterator[Finding]:
    """An operator-managed driver needs a driver image NVIDIA publishes for the nodes' OS."""
    if inv.cluster.software_profile not in PROFILES:
        return
    try:
        os_name = inv.cluster.resolved_versions().os
    except ValidationError:
        return
    if published_driver_tag(os_name) is not None:
        return
    models = sorted({n.model for n in inv.workers if inv.gpus_of(n).count > 0})
    operator = [m for m in models if inv.nvidia.profile_for(m).driver == "operator"]
    if not operator:
        return
    tag = os_release_tag(os_name) or os_name
    hosts = ", ".join(f"nvidia.profiles.{m}.driver: host" for m in operator)
    yield err(
        "cluster.versions.os",
        f"{os_name}: the GPU operator's driver container would pull nvcr.io/nvidia/driver:<version>-{tag}, which "
        f"NVIDIA does not publish (driver images exist for {PUBLISHED_IN_WORDS}); {', '.join(operator)} use it",
        f"set {hosts} (the host driver path, with cluster.gpu_driver: host), or run the nodes on an OS with "
        "published driver images",
    )


# --- served models ----------------------------------------------------------------------------


@rule("served-models")
def served_models(inv: Inventory) -> Iterator[Finding]:
    """Model names are unique; each model's GPU product exists on a node with at least TP x PP GPUs."""
    seen: dict[str, int] = {}
    capacity: dict[str, int] = {}
    for node in inv.nodes:
        gpus = inv.gpus_of(node)
        gpu = GPU_TYPES.get(gpus.type)
        if gpu is not None:
            capacity[gpu.label] = max(capacity.get(gpu.label, 0), gpus.count)
    for i, model in enumerate(inv.models):
        if model.name in seen:
            yield err(
                f"models[{i}].name", f"model name {model.name!r} is also models[{seen[model.name]}]", "rename one"
            )
        seen.setdefault(model.name, i)
        product = model.deployment.gpu_product
        path = f"models[{i}].deployment.gpu_product"
        if product not in capacity:
            options = sorted(capacity) or ["(no GPU nodes in the inventory)"]
            yield err(
                path,
                f"no node has {product!r} GPUs, so {model.name} could never be scheduled",
                did_you_mean(product, capacity) or f"use one of {', '.join(options)}",
            )
        elif model.world_size > capacity[product]:
            yield err(
                f"models[{i}].tensor_parallelism",
                f"{model.name} needs {model.world_size} GPUs in one node (TP x PP) but {product} nodes have "
                f"at most {capacity[product]}",
                "lower tensor_parallelism/pipeline_parallelism or pin the model to larger nodes",
            )


@rule("model-storage")
def model_storage(inv: Inventory) -> Iterator[Finding]:
    """Each model's directory on the nodes is its own: two models' directories never nest (delivery's scan,
    and ``--prune``, would take the inner one's files for the outer one's), and one directory has one source.
    An NFS export given by address is on the storage network where the inventory declares one."""
    dests: list[tuple[int, str, str | None]] = []
    for i, model in enumerate(inv.models):
        if model.deployment.storage.kind != "node":
            continue
        dest = model.node_dest
        for j, other, source in dests:
            if dest == other and model.source_dir and source and model.source_dir != source:
                yield err(
                    f"models[{i}].source_dir",
                    f"{model.name} and models[{j}] share the node directory {dest} but name two sources "
                    f"({source}, {model.source_dir}); each delivery would overwrite the other",
                    "give one of them its own hf_model_dir, or the same source_dir",
                )
            elif dest != other and (dest.startswith(other + "/") or other.startswith(dest + "/")):
                yield err(
                    f"models[{i}].hf_model_dir",
                    f"{model.name}'s node directory {dest} and models[{j}]'s {other} nest: one model's files "
                    "would be found (and with --prune removed) as the other's",
                    "give each model a directory beside the others under node_dir",
                )
        dests.append((i, dest, model.source_dir))
    storage_net = inv.networks.cidr_of("storage") if inv.networks.storage else None
    for i, model in enumerate(inv.models):
        server = model.deployment.storage.nfs_server
        if model.deployment.storage.kind != "nfs" or storage_net is None or server is None:
            continue
        try:
            address = ipaddress.IPv4Address(server)
        except ValueError:
            continue  # a name: resolved by the nodes, not checked here
        if address not in storage_net:
            yield warn(
                f"models[{i}].deployment.storage.nfs_server",
                f"NFS server {server} is not on the storage network {storage_net}: the pods' reads of the "
                "model files would share another network",
                "use the export's address on the storage network",
            )


@rule("model-containers")
def model_containers(inv: Inventory) -> Iterator[Finding]:
    """The driver against the Triton container each model runs in, where that is not cluster.versions.triton
    (the software-versions rule checks that one, refusing a driver too old for it). Warnings: inventories on
    the design guide's profile that keep the example's 1.1.0 models validated before this rule."""
    if inv.cluster.software_profile not in PROFILES or not inv.models:
        return
    try:
        versions = inv.cluster.resolved_versions()
    except ValidationError:
        return
    driver = versions.nvidia_driver or operator_default_driver(versions.gpu_operator)
    source = "cluster.versions.nvidia_driver" if versions.nvidia_driver else f"GPU operator {versions.gpu_operator}"
    for i, model in enumerate(inv.models):
        tag = version_info(model.trtllm_version).triton_tag
        if tag == versions.triton or driver is None:
            continue
        path = f"models[{i}].trtllm_version"
        image = version_info(model.trtllm_version).image
        verdict = triton_driver_verdict(tag, driver)
        if verdict is None:
            yield warn(
                path,
                f"{model.name} runs {image}; Triton {tag} is not in rackctl's driver matrix (known: "
                f"{', '.join(TRITON_CUDA)}), so driver {driver} ({source}) was not checked against it",
                "read the release's 'Driver Requirements' notes",
            )
        elif verdict.accepted is False:
            yield warn(
                path,
                f"{model.name} runs {image}, which would not start: driver {driver} ({source}): {verdict.reason}",
                f"pin cluster.versions.nvidia_driver to {verdict.fix}, or use a trtllm_version whose container "
                f"that driver runs (cluster.versions.triton is {versions.triton})",
            )
        elif verdict.accepted is None:
            yield warn(path, f"{model.name} runs {image}: driver {driver} ({source}): {verdict.reason}")


@rule("autoscaling")
def autoscaling(inv: Inventory) -> Iterator[Finding]:
    """A model's autoscaling reads Triton's queue from kube-prometheus-stack's Prometheus (monitoring on), and
    has a maximum: ``max_replicas``, or the instances the ``sizing:`` placement gives the model, which must
    be one served model's alone and at least ``min_replicas``."""
    for i, model in enumerate(inv.models):
        auto = model.deployment.autoscaling
        if auto is None:
            continue
        path = f"models[{i}].deployment.autoscaling"
        if not inv.monitoring.enabled:
            yield err(
                path,
                f"{model.name} scales on Triton's queue metrics, read from kube-prometheus-stack's Prometheus, "
                "but monitoring.enabled is false: KEDA would find no Prometheus",
                "set monitoring.enabled: true, or drop deployment.autoscaling (then deployment.replicas pods)",
            )
        if auto.max_replicas is not None:
            continue
        sized = sizing_instances(inv, model)
        if sized.count is None:
            yield err(
                f"{path}.max_replicas",
                f"{model.name}: max_replicas is unset and {sized.reason}",
                "set max_replicas (the most Triton pods of this model)",
            )
        elif sized.count < auto.min_replicas:
            yield err(
                f"{path}.min_replicas",
                f"{model.name}: min_replicas {auto.min_replicas} exceeds max_replicas, unset and taken from the "
                f"{sized.reason}",
                f"lower min_replicas to {sized.count} or less, or set max_replicas",
            )


# --- BMC addresses vs host addresses ------------------------------------------------------------


@rule("bmc-address-vs-host-ips")
def bmc_address_vs_host_ips(inv: Inventory) -> Iterator[Finding]:
    """A BMC address is never also a node's PXE, management or other host IP (an iDRAC has its own)."""
    host_ips = {str(ip): (path, node, network) for path, node, network, ip in _addresses(inv)}
    for i, node in enumerate(inv.nodes):
        taken = host_ips.get(node.bmc.host)
        if taken is None:
            continue
        path, owner, network = taken
        whose = "its own" if owner is node else f"{owner.hostname}'s"
        yield err(
            _node_path(i, ".bmc.address"),
            f"BMC address {node.bmc.host} is also {whose} {network or 'host'} address ({path})",
            "give the iDRAC its own address on the OOB network, or correct the host IP",
        )


# --- the nodes' name servers (CoreDNS forwards to them) -------------------------------------------


@rule("cluster-dns-upstream")
def cluster_dns_upstream(inv: Inventory) -> Iterator[Finding]:
    """A cluster needs a name server on its nodes: every node address is static (netplan), so the nodes get
    only ``cluster.dns_servers``, and CoreDNS forwards what is not the cluster's to the node's resolv.conf."""
    if inv.cluster.dns_servers or not inv.nodes:
        return
    yield warn(
        "cluster.dns_servers",
        "no name server: the nodes get none (their addresses are static), and CoreDNS, which forwards to the "
        "node's resolv.conf, exits with 'no valid upstream addresses': the cluster has no DNS",
        "list the site's name servers (or the head node's) in cluster.dns_servers",
    )
