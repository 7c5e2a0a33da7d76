"""What a GPU node's own PCI bus says, against the inventory: GPUs present, NVSwitches, Fabric Manager needed.

Role ``nvidia_host`` returns the node's PCI functions as ``find -L /sys/bus/pci/devices ... -exec grep -H .``
prints them (``<sysfs path>/<vendor|device|class>:0x....``, the files lspci itself reads) and the entries of
``/proc/driver/nvidia-nvswitch/devices``. :func:`assess` turns that into one verdict per node:

- the number of NVIDIA display/3D controllers must equal the inventory's GPU count; a node whose GPUs exist
  only out of band in this environment (a lab VM, see ``Environment.emulated_devices``) is reported as such;
- Fabric Manager is needed where NVSwitches are detected (:mod:`bootstrap.nvidia.detect`), never from the
  model name; a model that should have them (``hardware_models.<model>.nvswitch``) and shows none fails, as does
  a GPU count that differs, on a real site.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bootstrap.inventory.models import Inventory, Node
from bootstrap.nvidia.detect import LSPCI_RE, NVIDIA_VENDOR, NvSwitchReport, nvswitch_pci_slots, proc_devices
from bootstrap.nvidia.smi import read_from_role

#: PCI classes of GPUs: 0300 VGA controller, 0302 3D controller (data-center GPUs without display).
GPU_CLASSES = frozenset({"0300", "0302"})

#: ``/sys/bus/pci/devices/0000:07:00.0/class:0x068000``
_SYSFS_RE = re.compile(
    r"^.*/(?P<slot>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/(?P<attr>vendor|device|class):0x(?P<value>[0-9a-f]+)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class PciFunction:
    """One PCI function: slot, class (4 hex digits), vendor and device ids, as ``lspci -n`` shows them."""

    slot: str
    cls: str
    vendor: str
    device: str

    def lspci_n(self) -> str:
        """The function as one ``lspci -n`` line (``0000:07:00.0 0680: 10de:22a3``)."""
        return f"{self.slot} {self.cls}: {self.vendor}:{self.device}"


def from_sysfs(lines: Iterable[str]) -> list[PciFunction]:
    """PCI functions from ``grep -H .`` of sysfs ``vendor``/``device``/``class`` files (slot order).

    A function missing one of the three attributes is left out (a device removed while it was read).
    """
    attrs: dict[str, dict[str, str]] = {}
    for line in lines:
        match = _SYSFS_RE.match(line.strip())
        if match:
            attrs.setdefault(match["slot"].lower(), {})[match["attr"]] = match["value"].lower()
    out = []
    for slot in sorted(attrs):
        a = attrs[slot]
        if {"vendor", "device", "class"} <= a.keys():
            out.append(PciFunction(slot, a["class"].zfill(6)[:4], a["vendor"].zfill(4), a["device"].zfill(4)))
    return out


def from_lspci(text: str) -> list[PciFunction]:
    """PCI functions from ``lspci -n`` output (``slot class: vendor:device (rev xx)``)."""
    out = []
    for line in text.splitlines():
        match = LSPCI_RE.match(line.strip().lower())
        if match:
            out.append(PciFunction(match["slot"], match["cls"], match["vendor"], match["device"]))
    return out


def nvidia_gpus(functions: Iterable[PciFunction]) -> list[PciFunction]:
    """NVIDIA GPUs among ``functions`` (vendor 10de, class VGA or 3D controller)."""
    return [f for f in functions if f.vendor == NVIDIA_VENDOR and f.cls in GPU_CLASSES]


def nvswitches(functions: Iterable[PciFunction], proc_entries: Iterable[str] = ()) -> NvSwitchReport:
    """NVSwitch detection (:mod:`bootstrap.nvidia.detect`) over the functions and the /proc entries."""
    text = "\n".join(f.lspci_n() for f in functions)
    return NvSwitchReport(proc_devices=proc_devices(proc_entries), pci_slots=nvswitch_pci_slots(text))


@dataclass
class HostAssessment:
    """The verdict on one GPU node's host side: ok, what was found, and the problems (each with its fix)."""

    node: str
    ok: bool
    gpus_found: int
    gpus_expected: int
    fabric_manager: NvSwitchReport
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: per GPU, what ``nvidia-smi -q -x`` said (bus id, product, MIG mode, Fabric Manager state), when it ran
    gpus_fabric: list[dict[str, str]] | None = None
    #: which nvidia-smi was read (``bootstrap.nvidia.smi.HOST`` / ``OPERATOR``; empty: none found), and why it
    #: gave no fabric states when it did not
    nvidia_smi_source: str = ""
    nvidia_smi_why: str | None = None

    def summary(self) -> str:
        """One line for the node's result: problems first, then what was found."""
        return "; ".join([*self.problems, *self.notes])

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "gpus_found": self.gpus_found,
            "gpus_expected": self.gpus_expected,
            **self.fabric_manager.as_dict(),
            "notes": list(self.notes),
            "problems": list(self.problems),
            **({"gpus_fabric": self.gpus_fabric} if self.gpus_fabric is not None else {}),
            "nvidia_smi_source": self.nvidia_smi_source,
            **({"nvidia_smi_why": self.nvidia_smi_why} if self.nvidia_smi_why else {}),
        }


def assess_report(
    inv: Inventory, node: Node, report: Mapping[str, Any], *, emulated: str | None = None
) -> HostAssessment:
    """:func:`assess` of role ``nvidia_host``'s ``nvidia_host_report`` for ``node``, with its nouveau notes."""
    out = assess(
        inv,
        node,
        from_sysfs(report.get("pci_sysfs") or []),
        report.get("nvswitch_proc_devices") or [],
        emulated=emulated,
    )
    out.notes.insert(0, f"nouveau blacklisted ({report.get('nouveau_blacklist') or 'modprobe.d'})")
    if report.get("nouveau_loaded"):
        out.notes.insert(1, "nouveau is loaded now: it is gone after the next reboot")
    smi = read_from_role(report, node.hostname)
    out.nvidia_smi_source, out.nvidia_smi_why = smi.source, smi.why
    if smi.report is not None:
        out.gpus_fabric = [
            {
                "bus_id": g.bus_id,
                "product": g.product,
                "mig_current": g.mig_current,
                "fabric_state": g.fabric_state,
                "fabric_status": g.fabric_status,
            }
            for g in smi.report.gpus
        ]
        out.notes.append(f"{smi.where}: {len(smi.report.gpus)} GPU(s), driver {smi.report.driver_version}")
    elif smi.source:  # nvidia-smi is there and did not answer
        out.notes.append(f"{smi.why}: Fabric Manager state unknown")
    return out


def assess(
    inv: Inventory,
    node: Node,
    functions: list[PciFunction],
    proc_entries: Iterable[str] = (),
    *,
    emulated: str | None = None,
) -> HostAssessment:
    """Compare what ``node``'s PCI bus (and the NVSwitch driver's /proc entries) show with the inventory.

    ``emulated``: why this node's GPUs and NVSwitches exist only out of band here (a lab VM); then a
    missing device is a note, not a problem.
    """
    found = nvidia_gpus(functions)
    switches = nvswitches(functions, proc_entries)
    gpus = inv.gpus_of(node)
    hw = inv.hardware(node.model)
    expects_switches = bool(hw is not None and hw.nvswitch)
    out = HostAssessment(node.hostname, True, len(found), gpus.count, switches)
    seen = f"{len(found)} NVIDIA GPU(s) on the PCI bus"
    if len(found) == gpus.count:
        out.notes.append(f"{seen}, as the inventory says ({gpus.count} x {gpus.type})")
    elif emulated:
        out.notes.append(f"{seen}, the inventory says {gpus.count} x {gpus.type}: {emulated}")
    else:
        out.problems.append(
            f"the inventory says {gpus.count} x {gpus.type}, the node's PCI bus shows {len(found)} NVIDIA GPU(s): "
            f"check the GPUs are seated and enabled in the BIOS, or correct nodes[{node.hostname}].gpus"
        )
    if switches.needs_fabric_manager:
        count = max(len(switches.pci_slots), len(switches.proc_devices))
        out.notes.append(f"{count} NVSwitch(es) detected: Fabric Manager needed")
    elif expects_switches and not emulated:
        out.problems.append(
            f"{node.model} should have NVSwitches (hardware_models.{node.model}.nvswitch) and the node shows none "
            "on its PCI bus: check the GPU baseboard is seen (lspci), or correct the hardware model"
        )
    else:
        why = f" ({node.model} would have them: {emulated})" if expects_switches else ""
        out.notes.append(f"no NVSwitch detected: Fabric Manager not needed{why}")
    out.ok = not out.problems
    return out
