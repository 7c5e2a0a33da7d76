"""The GPU node's host side against the inventory (bootstrap/nvidia/host.py).

The sysfs parser is checked against this machine's real /sys/bus/pci (the role reads it with the same
``find -L ... -exec grep -H .`` command); the GPU and NVSwitch verdicts against the recorded ``lspci -n``
outputs of tests/nvidia/fixtures (their README says where each format comes from).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bootstrap.inventory.loader import load_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.nvidia.host import PciFunction, assess, assess_report, from_lspci, from_sysfs, nvidia_gpus

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"
PCI = Path("/sys/bus/pci/devices")
#: the role's command (roles/nvidia_host/tasks/main.yml), run here on this machine's own bus
FIND = ["find", "-L", str(PCI), "-mindepth", "2", "-maxdepth", "2", "(", "-name", "vendor", "-o", "-name", "device",
        "-o", "-name", "class", ")", "-exec", "grep", "-H", ".", "{}", "+"]  # fmt: skip


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    return load_inventory(EXAMPLE)


def lspci(name: str) -> list[PciFunction]:
    return from_lspci((FIXTURES / f"lspci-n-{name}.txt").read_text())


@pytest.mark.skipif(not PCI.is_dir() or not any(PCI.iterdir()), reason="no PCI bus in sysfs on this machine")
def test_the_sysfs_listing_of_this_machine_parses_to_its_pci_functions() -> None:
    out = subprocess.run(FIND, capture_output=True, text=True, check=True).stdout.splitlines()
    functions = from_sysfs(out)
    expected = {
        d.name: (
            (d / "class").read_text().strip()[2:6],
            (d / "vendor").read_text().strip()[2:],
            (d / "device").read_text().strip()[2:],
        )
        for d in PCI.iterdir()
    }
    assert {f.slot: (f.cls, f.vendor, f.device) for f in functions} == expected
    assert [f.slot for f in functions] == sorted(expected)


def test_a_function_read_half_way_is_left_out() -> None:
    lines = [
        "/sys/bus/pci/devices/0000:07:00.0/vendor:0x10de",
        "/sys/bus/pci/devices/0000:07:00.0/class:0x068000",
        "/sys/bus/pci/devices/0000:07:00.0/device:0x22a3",
        "/sys/bus/pci/devices/0000:4a:00.0/vendor:0x10de",
        "garbage",
    ]
    assert from_sysfs(lines) == [PciFunction("0000:07:00.0", "0680", "10de", "22a3")]


def test_gpus_are_nvidia_display_or_3d_controllers_not_nvswitches() -> None:
    assert len(nvidia_gpus(lspci("xe9680"))) == 8
    assert len(nvidia_gpus(lspci("r760xa-l40s"))) == 4


def test_an_xe9680_with_its_gpus_and_nvswitches_needs_fabric_manager(inventory: Inventory) -> None:
    verdict = assess(inventory, inventory.node("gpu-xe9680-01"), lspci("xe9680"))
    assert verdict.ok, verdict.problems
    assert verdict.gpus_found == verdict.gpus_expected == 8
    assert verdict.fabric_manager.needs_fabric_manager and len(verdict.fabric_manager.pci_slots) == 4
    assert "4 NVSwitch(es) detected: Fabric Manager needed" in verdict.summary()


def test_an_r760xa_needs_no_fabric_manager(inventory: Inventory) -> None:
    verdict = assess(inventory, inventory.node("gpu-l40s-01"), lspci("r760xa-l40s"))
    assert verdict.ok and not verdict.fabric_manager.needs_fabric_manager
    assert "no NVSwitch detected: Fabric Manager not needed" in verdict.summary()


def test_missing_gpus_and_nvswitches_fail_on_a_real_site_naming_the_fields(inventory: Inventory) -> None:
    # an XE9680 whose bus shows an R760xa's devices: 4 GPUs instead of 8, no NVSwitch
    verdict = assess(inventory, inventory.node("gpu-xe9680-01"), lspci("r760xa-l40s"))
    assert not verdict.ok
    first, second = verdict.problems
    assert "8 x H100-SXM" in first and "shows 4 NVIDIA GPU(s)" in first and "nodes[gpu-xe9680-01].gpus" in first
    assert "hardware_models.XE9680.nvswitch" in second and "lspci" in second


def test_in_an_environment_that_emulates_the_devices_their_absence_is_a_note(inventory: Inventory) -> None:
    why = "a lab VM: its GPUs exist only in its emulated iDRAC"
    verdict = assess(inventory, inventory.node("gpu-xe9680-01"), [], emulated=why)
    assert verdict.ok and verdict.gpus_found == 0 and not verdict.fabric_manager.needs_fabric_manager
    assert f"0 NVIDIA GPU(s) on the PCI bus, the inventory says 8 x H100-SXM: {why}" in verdict.notes
    assert f"no NVSwitch detected: Fabric Manager not needed (XE9680 would have them: {why})" in verdict.notes


def test_nvswitches_where_the_model_has_none_still_need_fabric_manager(inventory: Inventory) -> None:
    # detected, not assumed from the model: an R760xa showing NVSwitch bridges gets Fabric Manager
    switches = [f for f in lspci("xe9680") if f.cls == "0680"]
    verdict = assess(inventory, inventory.node("gpu-l40s-01"), [*lspci("r760xa-l40s"), *switches])
    assert verdict.ok and verdict.fabric_manager.needs_fabric_manager


def test_the_nvswitch_drivers_proc_entries_count_too(inventory: Inventory) -> None:
    verdict = assess(inventory, inventory.node("gpu-l40s-01"), lspci("r760xa-l40s"), ["0", "1", ""])
    assert verdict.fabric_manager.proc_devices == ["0", "1"] and verdict.fabric_manager.needs_fabric_manager


def test_the_roles_report_is_assessed_with_its_nouveau_notes(inventory: Inventory) -> None:
    report = {
        "pci_sysfs": [
            f"/sys/bus/pci/devices/{f.slot}/{attr}:0x{value}"
            for f in lspci("r760xa-l40s")
            for attr, value in (("vendor", f.vendor), ("device", f.device), ("class", f.cls + "00"))
        ],
        "nvswitch_proc_devices": [],
        "nouveau_loaded": True,
        "nouveau_blacklist": "/etc/modprobe.d/rackctl-blacklist-nouveau.conf",
    }
    verdict = assess_report(inventory, inventory.node("gpu-l40s-01"), report)
    assert verdict.ok and verdict.gpus_found == 4
    assert verdict.notes[:2] == [
        "nouveau blacklisted (/etc/modprobe.d/rackctl-blacklist-nouveau.conf)",
        "nouveau is loaded now: it is gone after the next reboot",
    ]
    assert verdict.as_dict()["gpus_expected"] == 4 and verdict.as_dict()["needs_fabric_manager"] is False


def test_nvidia_smis_report_gives_each_gpus_fabric_manager_state(inventory: Inventory) -> None:
    xml = (FIXTURES / "nvidia-smi-h100-sxm.xml").read_text()
    verdict = assess_report(inventory, inventory.node("gpu-xe9680-01"), {"nvidia_smi_xml": xml}, emulated="test")
    fabric = verdict.as_dict()["gpus_fabric"]
    assert len(fabric) == 8
    assert {(g["fabric_state"], g["fabric_status"]) for g in fabric} == {("Completed", "Success")}
    assert fabric[0]["product"].startswith("NVIDIA H100")
    assert any(n.startswith("the host's nvidia-smi: 8 GPU(s), driver ") for n in verdict.notes)

    broken = assess_report(inventory, inventory.node("gpu-xe9680-01"), {"nvidia_smi_xml": "<oops"}, emulated="test")
    assert "gpus_fabric" not in broken.as_dict()
    assert any("is not nvidia-smi XML: " in n and n.endswith(": Fabric Manager state unknown") for n in broken.notes)
    assert "gpus_fabric" not in assess_report(inventory, inventory.node("gpu-xe9680-01"), {}).as_dict()
