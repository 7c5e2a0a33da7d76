"""Every node's netplan of the shipped inventories passes the real ``netplan generate`` (offline, --root-dir).

``netplan generate`` (Debian ``netplan.io``) parses the YAML the ``networks`` role writes and renders the
systemd-networkd files for it; the test then reads those files to check the VLANs, MTUs and bonds really
came out as the inventory says. A wrong config (a VLAN without a link) is refused with its line.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bootstrap.inband.netplan import netplan_config
from bootstrap.inband.render import host_vars
from bootstrap.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
INVENTORIES = [ROOT / "inventory" / "lab.yml", ROOT / "inventory" / "examples" / "dvd-inference.yml"]

pytestmark = pytest.mark.skipif(not shutil.which("netplan"), reason="netplan.io is not installed (apt)")


def _generate(root: Path, config: dict) -> subprocess.CompletedProcess[str]:
    (root / "etc" / "netplan").mkdir(parents=True, exist_ok=True)
    path = root / "etc" / "netplan" / "60-rackctl.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return subprocess.run(["netplan", "generate", "--root-dir", str(root)], capture_output=True, text=True, check=False)


def _units(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (root / "run" / "systemd" / "network").glob("*")}


@pytest.mark.parametrize("inventory", INVENTORIES, ids=lambda p: p.name)
def test_every_nodes_netplan_generates(inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RACKCTL_BMC_PASSWORD", "not-used-here")
    inv = load_inventory(inventory)
    for node in inv.nodes:
        config = host_vars(inv, node)["networks_netplan_config"]
        root = tmp_path / node.hostname
        proc = _generate(root, config)
        assert proc.returncode == 0, f"{inventory.name} {node.hostname}: {proc.stderr}"
        units = _units(root)
        storage = inv.networks.storage
        stor = node.interface_on("storage")
        if storage is not None and stor is not None and storage.vlan:
            vlan = units[f"10-netplan-{stor.name}.{storage.vlan}.netdev"]
            assert f"Id={storage.vlan}" in vlan and f"MTUBytes={storage.mtu}" in vlan
            assert f"Address={stor.ip}/" in units[f"10-netplan-{stor.name}.{storage.vlan}.network"]
            assert f"VLAN={stor.name}.{storage.vlan}" in units[f"10-netplan-{stor.name}.network"]
        for bond in node.bonds:
            netdev = units[f"10-netplan-{bond.name}.netdev"]
            assert "Kind=bond" in netdev and f"Mode={bond.mode}" in netdev
            for member in bond.members:
                assert f"Bond={bond.name}" in units[f"10-netplan-{member}.network"]


def test_lab_has_a_tagged_jumbo_storage_network_and_a_bond() -> None:
    inv = load_inventory(INVENTORIES[0])
    gpu02 = netplan_config(inv, inv.node("gpu-02"))["network"]
    assert gpu02["bonds"]["bond0"]["parameters"]["mode"] == "active-backup"
    assert gpu02["vlans"]["stor0.20"]["mtu"] == 9000 and gpu02["ethernets"]["stor0"]["mtu"] == 9000
    assert "pxe0" not in gpu02["ethernets"]  # the access port stays as the install configured it


def test_netplan_generate_refuses_a_broken_config_with_its_line(tmp_path: Path) -> None:
    proc = _generate(tmp_path, {"network": {"version": 2, "vlans": {"stor0.20": {"id": 20}}}})
    assert proc.returncode != 0 and "60-rackctl.yaml" in proc.stderr and "link" in proc.stderr


def test_lacp_bond_external_default_route_and_dns_generate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bootstrap.inventory import validate_data

    monkeypatch.setenv("RACKCTL_BMC_PASSWORD", "not-used-here")
    data = yaml.safe_load(INVENTORIES[1].read_text())
    data["cluster"]["dns_servers"] = ["10.20.0.2"]
    data["networks"]["external"] = {"cidr": "192.0.2.0/24", "gateway": "192.0.2.1"}
    node = data["nodes"][3]
    node["interfaces"] = [i for i in node["interfaces"] if i["network"] != "storage"] + [
        {"name": "stor0", "fqdd": "NIC.Slot.1-1-1", "mac": "b0:7b:25:00:30:01", "mtu": 9000},
        {"name": "stor1", "fqdd": "NIC.Slot.1-2-1", "mac": "b0:7b:25:00:30:02", "mtu": 9000},
        {"name": "ext0", "network": "external", "fqdd": "NIC.Slot.2-1-1", "ip": "192.0.2.24"},
    ]
    node["bonds"] = [{"name": "bond1", "members": ["stor0", "stor1"], "network": "storage", "ip": "10.30.0.24"}]
    inv = validate_data(data).inventory
    config = netplan_config(inv, inv.nodes[3])
    proc = _generate(tmp_path, config)
    assert proc.returncode == 0, proc.stderr
    units = _units(tmp_path)
    bond = units["10-netplan-bond1.netdev"]
    assert "Mode=802.3ad" in bond and "LACPTransmitRate=fast" in bond and "TransmitHashPolicy=layer3+4" in bond
    assert "MTUBytes=9000" in units["10-netplan-stor0.network"]  # members carry the bond's MTU
    vlan = units["10-netplan-bond1.30.network"]
    assert "Address=10.30.0.24/24" in vlan and "VLAN=bond1.30" in units["10-netplan-bond1.network"]
    # the default route and DNS go through the external network, not management
    ext = units["10-netplan-ext0.network"]
    assert "Gateway=192.0.2.1" in ext and "DNS=10.20.0.2" in ext
    assert "Gateway" not in units["10-netplan-mgmt0.20.network"]
