"""The lab's network plan from ``inventory/lab.yml``: one bridge per network, a VM NIC per inventory port.

No VMs here (``tests/inband/test_lab_networks.py`` checks the same on running ones): the plan and the
libvirt domain XML it turns into.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from bootstrap.inventory import load_inventory
from rackctl_lab.bmc_lab import plan_lab_bmcs
from rackctl_lab.vm_lab import lab_network, plan_lab_vms
from rackctl_lab.vms import LabVmState, domain_xml

LAB = Path(__file__).resolve().parents[2] / "inventory" / "lab.yml"


def test_each_network_is_a_bridge_with_its_mtu_and_head_address() -> None:
    network = lab_network(load_inventory(LAB))
    assert network.bridge == "rkbr0" and network.address == "10.200.0.1/24"
    mgmt, storage = network.segment("management"), network.segment("storage")
    assert mgmt is not None and (mgmt.bridge, mgmt.address, mgmt.mtu) == ("rkbr0-mg", "10.200.1.11/24", 1500)
    # tagged: no untagged head-side address on it
    assert storage is not None and (storage.bridge, storage.address, storage.mtu) == ("rkbr0-st", None, 9000)
    assert network.bridge_for("pxe") == "rkbr0" and network.bridge_for("storage") == "rkbr0-st"


def test_vms_get_a_nic_per_port_on_its_networks_bridge(tmp_path: Path) -> None:
    inventory = load_inventory(LAB)
    plan = plan_lab_vms(inventory, tmp_path, plan_lab_bmcs(inventory))
    gpu02 = next(v for v in plan.vms if v.hostname == "gpu-02")
    assert [(n.mac, n.bridge, n.mtu) for n in gpu02.nics] == [
        ("52:54:00:99:01:13", "rkbr0-mg", 1500),  # bond0 members: the bond's network
        ("52:54:00:99:03:13", "rkbr0-mg", 1500),
        ("52:54:00:99:02:13", "rkbr0-st", 9000),
    ]
    root = ET.fromstring(domain_xml(gpu02, plan.network.bridge))
    nics = root.findall("devices/interface")
    assert [n.find("source").get("bridge") for n in nics] == ["rkbr0", "rkbr0-mg", "rkbr0-mg", "rkbr0-st"]
    assert nics[0].find("rom") is None  # only the PXE port network-boots
    assert all(n.find("rom").get("enabled") == "no" for n in nics[1:])
    assert nics[3].find("mtu").get("size") == "9000"


def test_the_vm_state_round_trips_nics_and_segments(tmp_path: Path) -> None:
    inventory = load_inventory(LAB)
    plan = plan_lab_vms(inventory, tmp_path, plan_lab_bmcs(inventory))
    state = LabVmState("ns", "rkbr0", "10.200.0.1/24", vms=plan.vms, segments=list(plan.network.segments))
    again = LabVmState.from_json(state.to_json())
    assert again == state and again.network.segment("storage") == plan.network.segment("storage")
