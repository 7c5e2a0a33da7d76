"""The lab's VMs: real libvirt domains (qemu TCG) in a namespace, driven by their emulated iDRACs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bootstrap.inventory import load_inventory
from bootstrap.oob import target_for
from rackctl_lab.vms import KVM, LabVms, VmSpec, connect, domain_xml
from redfish_tools.boot import boot_override, set_boot_once
from redfish_tools.connection import BmcConnection
from redfish_tools.power import power_state, set_power
from tests import timing
from tests.lab.vmlab import VmLab, admin_key, missing_prerequisites, write_inventory


def test_domain_xml_is_tcg_with_serial_bios_mac_and_identity() -> None:
    spec = VmSpec(
        "gpu-01",
        "52:54:00:99:00:12",
        "/l/gpu-01.qcow2",
        "/l/gpu-01.log",
        uuid="4c4c4544-0000-1111-2222-333344445555",
        serial="LABG001",
        model="R760xa",
    )
    root = ET.fromstring(domain_xml(spec, "rkbr0", boot=("hd",)))
    assert root.get("type") == "qemu"  # TCG: the nested /dev/kvm hangs guests
    assert root.find("os/bios").get("useserial") == "yes"
    assert [b.get("dev") for b in root.findall("os/boot")] == ["hd"]
    assert root.find("devices/interface/mac").get("address") == "52:54:00:99:00:12"
    assert root.find("devices/interface/source").get("bridge") == "rkbr0"
    assert root.find("devices/serial/source").get("path") == "/l/gpu-01.log"
    assert root.find("uuid").text == spec.uuid
    entries = {e.get("name"): e.text for e in root.findall("sysinfo/system/entry")}
    assert entries["serial"] == "LABG001" and entries["product"] == "PowerEdge R760xa"


def _processes(pattern: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if pattern in line and " Z" not in line]


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.vm
def test_idrac_drives_its_vm_and_lab_down_leaves_nothing(tmp_path: Path) -> None:
    reason = missing_prerequisites()
    if reason:
        pytest.skip(reason)
    kvm_before = (KVM.stat().st_mode, KVM.stat().st_gid) if KVM.exists() else None
    _key, public = admin_key(tmp_path)
    lab = VmLab(tmp_path, write_inventory(tmp_path, ["node-a"], public)).up()
    domain = "rackctl-lab-node-a"
    try:
        inventory = load_inventory(lab.inventory_path)
        with BmcConnection(target_for(inventory, inventory.node("node-a"))) as bmc:
            virt = connect()
            dom = virt.lookupByName(domain)
            assert not dom.isActive()  # defined powered off; only the BMC powers it
            set_boot_once(bmc, "Pxe")
            set_power(bmc, "on")
            assert dom.isActive()
            assert re.findall(r"<boot dev='(\w+)'/>", dom.XMLDesc(0)) == ["network", "hd"]
            assert boot_override(bmc)["enabled"] == "Disabled"  # Once was consumed by that boot
            try:  # iPXE on the node's MAC, read from the serial console as it comes
                timing.wait_for(lambda: "net0: 52:54:00:9a:00:02" in lab.serial("node-a"), 60, 0.5, "iPXE on net0")
            except AssertionError as error:
                raise AssertionError(f"{error}\n{lab.dump()}") from None
            set_power(bmc, "off")
            assert not dom.isActive()
            set_power(bmc, "on")  # no override now: disk only
            assert re.findall(r"<boot dev='(\w+)'/>", dom.XMLDesc(0)) == ["hd"]
            dom.destroy()  # the guest powers itself off (as the deploy ramdisk does)
            timing.wait_for(lambda: power_state(bmc) == "Off", timing.QUICK_S, 0.5, "the BMC reporting Off")
            virt.close()
    finally:
        result = lab.down()
    assert result["vms"]["domains"] == [domain]
    assert result["vms"]["netns_deleted"]
    assert not Path(f"/var/run/netns/{lab.network.name}").exists()
    assert not _processes(str(lab.lab_dir))  # libvirtd, virtlogd, iDRAC workers: all gone
    assert not _processes(f"guest={domain}")
    if kvm_before is not None:
        assert (KVM.stat().st_mode, KVM.stat().st_gid) == kvm_before
    assert os.path.exists(lab.lab_dir)  # the lab's files stay for inspection; only processes go


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.vm
def test_a_lab_killed_before_down_leaves_no_domain_the_next_lab_trips_on(tmp_path: Path) -> None:
    """libvirtd keeps definitions on its disk; a lab whose libvirtd died before ``down`` left its domains there,
    and the next lab's node of the same name but another identity failed to define (CI met it)."""
    reason = missing_prerequisites()
    if reason:
        pytest.skip(reason)
    domain = "rackctl-lab-node-a"
    kept = Path("/etc/libvirt/qemu") / f"{domain}.xml"
    _key, public = admin_key(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = VmLab(tmp_path / "a", write_inventory(tmp_path / "a", ["node-a"], public)).up()
    try:
        state = LabVms(first.lab_dir).state()
        assert state is not None
        os.kill(state.pids["libvirtd"], signal.SIGKILL)  # the run was killed: nothing undefines the domain
        daemon = f"libvirtd --daemon --pid-file {first.lab_dir.resolve()}"
        timing.wait_for(lambda: not _processes(daemon), timing.QUICK_S, 0.2, "libvirtd gone")
    finally:
        first.down()
    assert kept.exists()  # left behind, as a killed run leaves it
    second_inventory = write_inventory(tmp_path / "b", ["node-a"], public)
    second_inventory.write_text(second_inventory.read_text().replace("LABT002", "LABX002"))  # another machine
    second = VmLab(tmp_path / "b", second_inventory).up()
    try:
        state = LabVms(second.lab_dir).state()
        assert state is not None and state.stale_removed == [domain]
        assert second.result["vms"]["stale_removed"] == [domain]  # said in `lab up`'s output
        assert any(f"left defined ({domain})" in w for w in second.result["warnings"]), second.result["warnings"]
        virt = connect()
        try:
            assert virt.lookupByName(domain).UUIDString() == second.vms[0].uuid  # the new node's identity
        finally:
            virt.close()
    finally:
        second.down()
    assert not kept.exists()
