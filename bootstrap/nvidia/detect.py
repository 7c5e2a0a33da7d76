"""NVSwitch detection: decides on the node whether Fabric Manager is needed, never from the model name.

Two sources, either is enough: ``/proc/driver/nvidia-nvswitch/devices`` lists one entry per NVSwitch once
the driver is loaded; ``lspci -n`` shows NVSwitch bridges by PCI id (vendor 10de, class 0680) before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

NVIDIA_VENDOR = "10de"
#: NVSwitch device ids: 1af1 = NVSwitch of HGX A100 (gen 2), 22a3 = NVSwitch of HGX H100/H200 (gen 3),
#: 1ac0-1ac2 = first-generation NVSwitch (DGX-2). All appear with PCI class 0680 ("bridge: other").
NVSWITCH_DEVICE_IDS = frozenset({"1ac0", "1ac1", "1ac2", "1af1", "22a3", "22a4"})
NVSWITCH_PROC = Path("/proc/driver/nvidia-nvswitch/devices")

# `lspci -n` line: "<slot> <class>: <vendor>:<device> (rev xx)", e.g. "07:00.0 0680: 10de:22a3 (rev a1)".
LSPCI_RE = re.compile(r"^(?P<slot>\S+)\s+(?P<cls>[0-9a-f]{4}):\s+(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})")


@dataclass(frozen=True)
class NvSwitchReport:
    """What detection saw: NVSwitches from /proc and from PCI, and whether Fabric Manager is needed."""

    proc_devices: list[str] = field(default_factory=list)
    pci_slots: list[str] = field(default_factory=list)

    @property
    def needs_fabric_manager(self) -> bool:
        return bool(self.proc_devices or self.pci_slots)

    def as_dict(self) -> dict[str, object]:
        return {
            "needs_fabric_manager": self.needs_fabric_manager,
            "nvswitch_proc_devices": self.proc_devices,
            "nvswitch_pci_slots": self.pci_slots,
        }


def nvswitch_pci_slots(lspci_n: str) -> list[str]:
    """PCI slots of NVSwitches in ``lspci -n`` output."""
    slots = []
    for line in lspci_n.splitlines():
        match = LSPCI_RE.match(line.strip().lower())
        if match and match["vendor"] == NVIDIA_VENDOR and match["device"] in NVSWITCH_DEVICE_IDS:
            slots.append(match["slot"])
    return slots


def proc_devices(entries: Iterable[str]) -> list[str]:
    """Non-empty entries of ``/proc/driver/nvidia-nvswitch/devices`` (one per NVSwitch)."""
    return sorted(e for e in entries if e.strip())


def detect(lspci_n: str = "", proc_dir: Path | None = NVSWITCH_PROC) -> NvSwitchReport:
    """Detect NVSwitches from ``lspci -n`` text and the /proc directory (absent on nodes without any)."""
    entries: list[str] = []
    if proc_dir is not None and proc_dir.is_dir():
        entries = proc_devices(p.name for p in proc_dir.iterdir())
    return NvSwitchReport(proc_devices=entries, pci_slots=nvswitch_pci_slots(lspci_n))
