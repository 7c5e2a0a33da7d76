"""The ``networks`` role on the installed lab's two workers, over SSH (ansible-runner): what it left, and its rollback.

Real parts only: the lab's VMs (Debian 12, kernel 6.1 with 8021q and bonding), their NICs on one Linux
bridge per network in the lab's namespace (storage: MTU 9000, tagged VLAN 20), netplan.io on the nodes
from the head node's mirror, the rendered Ansible inventory and ``playbooks/networks.yml`` through
:func:`bootstrap.ansible_driver.run_playbook`.

The role is applied by the network stage (``first_run``, session-scoped in ``tests/installed_lab.py``),
whose tests also prove that its first run changes every node and its second changes nothing. This test
does not apply it again (a TCG VM makes every Ansible task cost seconds): on the networked nodes, the
addresses, VLANs, MTUs and the bond are as the inventory says; a jumbo ping with DF crosses the storage
network and fails when an MTU on the path is wrong (the node's VLAN device, or the switch port); then a
wrong management address injected into one node's rendered config is rolled back by that node itself
while the other node finishes with no change.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from bootstrap.ansible_driver import PlaybookResult, run_playbook
from bootstrap.inband.render import write_ansible_inventory
from tests.inband.debs import preinstall
from tests.installed_lab import failed_nodes

pytestmark = [pytest.mark.lab, pytest.mark.slow]

PING_JUMBO = "ping -c 2 -W 2 -M do -s 8972 -I stor0.20 {dst}"  # 8972 + 28 header bytes = 9000, don't fragment


def _run(lab, name: str, hosts: Path, **extravars) -> PlaybookResult:
    work = lab.state_dir / "ansible" / "runs" / name
    return run_playbook("networks.yml", hosts, limit=lab.nodes, extravars=extravars or None, work_dir=work)


def _report(result: PlaybookResult) -> str:
    """Per-host outcome and the end of ansible's output (a failing assertion's message)."""
    hosts = "\n".join(f"{name}: {outcome.as_dict()}" for name, outcome in result.hosts.items())
    return f"{hosts}\n{result.output_tail}"


DIAGNOSE = (
    "networkctl list --no-pager; ls /run/systemd/network /etc/systemd/network; ip -d addr; "
    "cat /etc/netplan/60-rackctl.yaml; journalctl -u systemd-networkd -n 60 --no-pager; "
    "journalctl -n 30 --no-pager -t rackctl-netplan-rollback"
)


def _diagnose(lab) -> str:
    """The nodes' network state and networkd's log (a failing assertion's message)."""
    return "\n".join(f"===== {h}\n{lab.ssh(h, DIAGNOSE, check=False).stdout[-6000:]}" for h in lab.nodes)


def _link(lab, host: str, name: str) -> dict:
    return json.loads(lab.ssh(host, f"ip -d -j addr show dev {name}").stdout)[0]


def _addresses(link: dict) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("family") == "inet"]


def test_the_networks_are_as_the_inventory_says_and_a_wrong_address_rolls_back(installed_lab, first_run) -> None:
    lab = installed_lab
    assert first_run.ok and first_run.stages[0].status == "completed", failed_nodes(first_run)
    started = time.monotonic()
    for host in lab.nodes:
        preinstall(lab, host, ["iputils-ping"])  # the jumbo ping below (not in the minimal image)
    prepared = time.monotonic()
    hosts = write_ansible_inventory(lab.inventory, lab.state_dir, lab.environment)

    # gpu-01: management on its port, storage as VLAN 20 on stor0, both at the inventory's MTU
    diagnosis = _diagnose(lab)
    print(diagnosis)  # shown with -s: what the nodes' networks look like after the role
    mgmt = _link(lab, "gpu-01", "mgmt0")
    assert _addresses(mgmt) == ["10.200.1.12/24"] and mgmt["mtu"] == 1500
    assert _link(lab, "gpu-01", "stor0")["mtu"] == 9000
    for host, address in (("gpu-01", "10.200.2.12/24"), ("gpu-02", "10.200.2.13/24")):
        vlan = _link(lab, host, "stor0.20")
        assert vlan["linkinfo"]["info_kind"] == "vlan" and vlan["linkinfo"]["info_data"]["id"] == 20
        assert vlan["mtu"] == 9000 and _addresses(vlan) == [address]
    # gpu-02: the bond is up with both members, and carries the management address
    bond = _link(lab, "gpu-02", "bond0")
    assert _addresses(bond) == ["10.200.1.13/24"]
    status = lab.ssh("gpu-02", "cat /proc/net/bonding/bond0").stdout
    assert "Bonding Mode: fault-tolerance (active-backup)" in status
    members = [block for block in status.split("Slave Interface: ")[1:]]
    assert sorted(m.split("\n", 1)[0] for m in members) == ["mgmt0", "mgmt1"]
    assert all("MII Status: up" in m for m in members)
    assert lab.ssh("gpu-02", "hostname", address="10.200.1.13").stdout.strip() == "gpu-02"  # the new path

    # a 9000-byte frame with don't-fragment crosses the storage network...
    lab.ssh("gpu-01", PING_JUMBO.format(dst="10.200.2.13"))
    # ...and does not when the node's VLAN device has the wrong MTU,
    lab.ssh("gpu-01", "ip link set dev stor0.20 mtu 1500")
    wrong = lab.ssh("gpu-01", PING_JUMBO.format(dst="10.200.2.13"), check=False)
    assert wrong.returncode != 0 and "message too long" in (wrong.stdout + wrong.stderr).lower()
    lab.ssh("gpu-01", "ip link set dev stor0.20 mtu 9000")
    # ...or when a switch port on the path has it (the bridge drops frames bigger than the egress port's MTU)
    network = lab.environment.network
    tap = next(
        t["ifname"]
        for t in json.loads(network.ip_in("-j", "link", "show", "master", network.bridge_for("storage")).stdout)
        if t["address"] == "fe:54:00:99:02:13"  # gpu-02's storage port (libvirt: fe + the guest MAC's tail)
    )
    network.ip_in("link", "set", "dev", tap, "mtu", "1500")
    try:
        assert lab.ssh("gpu-01", PING_JUMBO.format(dst="10.200.2.13"), check=False).returncode != 0
        lab.ssh("gpu-01", "ping -c 1 -W 2 -M do -s 1472 -I stor0.20 10.200.2.13")  # ordinary frames still pass
    finally:
        network.ip_in("link", "set", "dev", tap, "mtu", "9000")
    lab.ssh("gpu-01", PING_JUMBO.format(dst="10.200.2.13"))

    # a wrong management address reaches gpu-01 (injected into its rendered host vars, past the rules)
    document = yaml.safe_load(hosts.read_text())
    gpu01 = document["all"]["hosts"]["gpu-01"]["networks_netplan_config"]["network"]["ethernets"]["mgmt0"]
    gpu01["addresses"] = ["10.200.9.12/24"]
    hosts.write_text(json.dumps(document))
    before = time.monotonic()
    broken = _run(
        lab,
        "networks-broken",
        hosts,
        networks_confirm_timeout_s=60,
        networks_reach_timeout_s=15,
        networks_settle_timeout_s=20,
    )
    rolled = time.monotonic()
    outcome, other = broken.hosts["gpu-01"], broken.hosts["gpu-02"]
    assert outcome.failed and "rolled its netplan back by itself" in outcome.message, _report(broken)
    assert "10.200.1.12" in outcome.message
    assert other.success and other.changed == 0  # the other node finished its run
    # the node put its previous configuration back by itself: reachable on its management address again
    restored = _addresses(_link(lab, "gpu-01", "mgmt0"))
    assert "10.200.1.12/24" in restored, restored
    assert lab.ssh("gpu-01", "hostname", address="10.200.1.12").stdout.strip() == "gpu-01"
    assert "10.200.1.12/24" in lab.ssh("gpu-01", "cat /etc/netplan/60-rackctl.yaml").stdout
    print(
        f"networks role: ping preinstall {prepared - started:.0f}s, rollback run {rolled - before:.0f}s; "
        f"lab install {lab.timings}"
    )
