"""The whole lab from the inventory: network namespace + bridge, one VM per installable node, their iDRACs.

Every node except the head node becomes a libvirt VM (the head node's boot services run on this machine,
inside the lab's namespace, on the bridge address). The VM carries the node's PXE MAC and the SMBIOS
identity its emulated iDRAC reports (system UUID, service tag), so the provisioning flow's "is this the
machine the BMC drives?" check is real. The node's iDRAC drives that VM (power, boot override).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.models import Inventory, Node, Role
from rackctl_lab import paths
from rackctl_lab.bmc_lab import LabBmcPlan, lab_down, lab_up
from rackctl_lab.idrac.rack import system_uuid
from rackctl_lab.netns import LabNetwork, Segment
from rackctl_lab.vms import LabVms, LabVmState, VmNic, VmSpec

LAB_NETNS = "rackctl-lab"
LAB_BRIDGE = "rkbr0"


@dataclass
class LabVmPlan:
    """The network and the VMs ``lab up`` creates."""

    network: LabNetwork
    vms: list[VmSpec]

    def as_dict(self) -> dict[str, Any]:
        return {
            "netns": self.network.name,
            "bridge": self.network.bridge,
            "head_address": self.network.address,
            "segments": [asdict(s) for s in self.network.segments],
            "vms": [
                {
                    "node": v.hostname,
                    "domain": v.domain,
                    "mac": v.mac,
                    "nics": [asdict(n) for n in v.nics],
                    "memory_mib": v.memory_mib,
                    "disk": v.disk,
                }
                for v in self.vms
            ],
        }


#: bridge name suffix per further network (bridge names stay within the kernel's 15 characters)
SEGMENT_SUFFIX = {"management": "-mg", "storage": "-st", "external": "-ex"}


def lab_network(inventory: Inventory, netns: str = LAB_NETNS, bridge: str = LAB_BRIDGE) -> LabNetwork:
    """The lab's namespace and bridges.

    The first bridge (PXE/OOB) holds the first address of the PXE network. Every other network gets a
    bridge ``<bridge>-mg|-st|-ex`` with its MTU; the head side's address there is the head node's address
    on that network (else the first host address), untagged: a VLAN-tagged network gets no head address
    (the host kernel cannot create VLAN devices; the VMs talk to each other over it).
    """
    cidr = inventory.networks.cidr_of("pxe")
    if cidr is None:
        raise InvalidInput(
            "the lab needs a PXE network",
            problems=[Problem("networks.pxe", "missing", "add networks.pxe (or shared_with: oob)")],
        )
    first = next(cidr.hosts())
    head = next((n for n in inventory.nodes if n.role == Role.HEAD), None)
    segments = []
    for name, suffix in SEGMENT_SUFFIX.items():
        net = inventory.networks.named().get(name)
        seg_cidr = inventory.networks.cidr_of(name)
        if net is None or seg_cidr is None or net.shared_with:
            continue
        address = None
        if net.vlan is None:
            mine = head.address_on(name) if head else None
            host = mine if mine is not None and mine in seg_cidr else next(seg_cidr.hosts())
            address = f"{host}/{seg_cidr.prefixlen}"
        segments.append(Segment(name, bridge + suffix, address, net.mtu))
    return LabNetwork(netns, bridge, f"{first}/{cidr.prefixlen}", tuple(segments))


def vm_nics(node: Node, network: LabNetwork, inventory: Inventory) -> list[VmNic]:
    """The VM ports of ``node`` besides PXE: each interface with a MAC on its network's bridge.

    A bond member takes its bond's network; an interface with no network (and in no bond) is left out.
    """
    bonded = {member: bond.network for bond in node.bonds for member in bond.members}
    nets = inventory.networks.named()
    out = []
    for nic in node.interfaces:
        name = nic.network or bonded.get(nic.name)
        if not nic.mac or name is None or name in ("pxe", "oob") or network.segment(name) is None:
            continue
        mtu = nic.mtu or (nets[name].mtu if name in nets else 1500)
        out.append(VmNic(nic.mac, network.bridge_for(name), mtu))
    return out


def vm_nodes(inventory: Inventory) -> list[Node]:
    """The nodes the lab runs as VMs: every node but the head node."""
    return [n for n in inventory.nodes if n.role != Role.HEAD]


def plan_lab_vms(
    inventory: Inventory,
    lab_dir: Path,
    bmc_plan: LabBmcPlan,
    *,
    memory_mib: int = 1024,
    network: LabNetwork | None = None,
) -> LabVmPlan:
    """One VM per non-head node, identity taken from its BMC spec; every problem reported at once."""
    network = network or lab_network(inventory)
    vms = LabVms(lab_dir, network)
    specs = {s.name: s for s in bmc_plan.specs}
    problems: list[Problem] = []
    out: list[VmSpec] = []
    for index, node in enumerate(inventory.nodes):
        if node.role == Role.HEAD:
            continue
        pxe = node.interface_on("pxe")
        if pxe is None or not pxe.mac:
            problems.append(
                Problem(
                    f"nodes[{index}].interfaces",
                    f"{node.hostname} has no interface with a MAC on the pxe network",
                    "add {name: pxe0, network: pxe, mac: ..., ip: ...}",
                )
            )
            continue
        addr = node.address_on("pxe")
        cidr = inventory.networks.cidr_of("pxe")
        if addr is not None and cidr is not None and ipaddress.ip_address(addr) not in cidr:
            problems.append(Problem(f"nodes[{index}].interfaces", f"{addr} is outside {cidr}", "fix the ip"))
        spec = specs[node.hostname]
        out.append(
            vms.spec_for(
                node.hostname,
                pxe.mac,
                memory_mib=memory_mib,
                uuid=system_uuid(spec),
                serial=spec.service_tag,
                model=node.model,
                nics=vm_nics(node, network, inventory),
            )
        )
        spec.vm_domain = out[-1].domain
    if problems:
        raise InvalidInput("the inventory's nodes cannot become lab VMs", problems=problems)
    return LabVmPlan(network, out)


def ensure_lab_admin_key(lab_dir: Path) -> Path:
    """The lab admin's SSH key pair under ``<lab_dir>/ssh`` (made once, private half 0600); the private path."""
    key = paths.admin_key(lab_dir)
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(key.parent, 0o700)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rackctl-lab-admin", "-f", str(key)], check=True
        )
    return key


def lab_up_all(bmc_plan: LabBmcPlan, vm_plan: LabVmPlan, lab_dir: Path, **bmc_options: Any) -> dict[str, Any]:
    """VMs first (their iDRACs need the domains), then the iDRACs; on failure undo the VM part."""
    ensure_lab_admin_key(lab_dir)
    vms = LabVms(lab_dir, vm_plan.network)
    state = vms.up(vm_plan.vms)
    try:
        result = lab_up(bmc_plan, lab_dir, **bmc_options)
    except Exception:
        vms.down()
        raise
    result["vms"] = _vm_summary(state)
    if state.stale_removed:  # said, not silently done: a lab before this one did not come down
        result["warnings"].append(
            f"removed {len(state.stale_removed)} domain(s) an earlier lab left defined "
            f"({', '.join(state.stale_removed)}): that lab did not come down"
        )
    return result


def lab_down_all(lab_dir: Path) -> dict[str, Any]:
    """iDRACs, then domains, daemons, /dev/kvm and the namespace."""
    result = lab_down(lab_dir)
    result["vms"] = LabVms(lab_dir).down()
    n = len(result["vms"]["domains"])
    result["message"] = f"{result['message']}; removed {n} VM(s) and the lab network"
    return result


def _vm_summary(state: LabVmState) -> dict[str, Any]:
    return {
        "netns": state.netns,
        "bridge": state.bridge,
        "head_address": state.address,
        "segments": [asdict(s) for s in state.segments],
        "daemons": state.pids,
        "domains": [{"node": v.hostname, "domain": v.domain, "serial_log": v.serial_log} for v in state.vms],
        "stale_removed": list(state.stale_removed),
    }
