"""Firmware components as rackctl names them, read from a Redfish FirmwareInventory, and how each applies."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bootstrap.inventory.firmware import COMPONENT_ORDER
from bootstrap.inventory.profiles import version_tuple

#: Words in a job's name that tie it to a component ("Firmware Update: BIOS", "... iDRAC with LC").
JOB_WORDS: dict[str, tuple[str, ...]] = {
    "idrac": ("idrac", "remote access controller"),
    "bios": ("bios",),
    "nic": ("network", "nic"),
    "gpu": ("gpu", "nvidia"),
    "raid": ("raid", "perc"),
    "cpld": ("cpld",),
}

#: What applying a component takes: the iDRAC resets itself; everything else needs a host reboot.
REBOOT = {c: ("idrac-reset" if c == "idrac" else "host-reboot") for c in COMPONENT_ORDER}


def component_of(entry: dict[str, Any]) -> str | None:
    """The component of one FirmwareInventory entry (``redfish_tools.firmware.firmware_inventory``), or None
    for entries rackctl does not roll out (and for ``Previous-`` copies)."""
    fid = str(entry.get("id") or "")
    if fid.startswith("Previous"):
        return None
    name = str(entry.get("name") or "").lower()
    fqdd = str(entry.get("fqdd") or "")
    if "remote access controller" in name or "idrac" in name or fqdd.startswith("iDRAC."):
        return "idrac"
    if name.startswith("bios") or fqdd.startswith("BIOS."):
        return "bios"
    if fqdd.startswith("NIC.") or "network" in name or "ethernet" in name:
        return "nic"
    if "gpu" in name or "nvidia" in name or fqdd.startswith(("Video.", "GPU.")):
        return "gpu"
    if fqdd.startswith("RAID.") or any(w in name for w in ("perc", "raid", "boss")):
        return "raid"
    if "cpld" in name:
        return "cpld"
    return None


def installed_versions(entries: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """Component -> installed versions (several for NICs), from FirmwareInventory entries."""
    out: dict[str, list[str]] = {}
    for entry in entries:
        component = component_of(entry)
        if component and entry.get("version"):
            out.setdefault(component, []).append(str(entry["version"]))
    return out


def at_target(installed: list[str] | None, target: str) -> bool:
    """Every installed copy is at or above ``target`` (an unknown version is not)."""
    return bool(installed) and all(version_tuple(v) >= version_tuple(target) for v in installed or [])


def same_version(installed: list[str] | None, target: str) -> bool:
    """Every installed copy is exactly ``target`` (an unknown version is not)."""
    return bool(installed) and all(version_tuple(v) == version_tuple(target) for v in installed or [])


def job_matches(component: str, job_name: str) -> bool:
    """Whether an update job (by its name) is for ``component``."""
    name = job_name.lower()
    return any(word in name for word in JOB_WORDS.get(component, ()))
