"""The host an emulated iDRAC manages: a libvirt domain of the lab (or nothing, for fake-only BMCs).

sushy-tools' fake driver stays the BMC's power/boot state machine (so Dell ids, sessions, BIOS jobs,
faults and the ``Once`` semantics of :class:`rackctl_lab.idrac.bmc.EmulatedIdrac` are unchanged); a
:class:`LibvirtMachine` mirrors it onto the real VM: a boot starts the domain with the firmware boot
order the override asks for (``Pxe`` -> network then disk, anything else -> disk), power off destroys
it, and a guest that powered itself off (the deploy ramdisk does) shows as ``Off`` on the BMC.
"""

from __future__ import annotations

import re
import threading
from typing import Any

LIBVIRT_URI = "qemu:///system"
_BOOT_RE = re.compile(r"<boot dev='[a-z]+'/>")


class LibvirtMachine:
    """Power and boot device of one libvirt domain (connection opened lazily, reopened when lost)."""

    def __init__(self, domain: str, uri: str = LIBVIRT_URI) -> None:
        self.domain = domain
        self.uri = uri
        self._conn: Any = None
        self._lock = threading.Lock()
        self.last_error = ""

    def _dom(self) -> Any:
        import libvirt  # noqa: PLC0415 - only lab BMCs with a VM need it

        if self._conn is None or not self._conn.isAlive():
            libvirt.registerErrorHandler(lambda *_: None, None)
            self._conn = libvirt.open(self.uri)
        return self._conn.lookupByName(self.domain)

    def running(self) -> bool | None:
        """Whether the domain runs (None when libvirt cannot be asked)."""
        with self._lock:
            try:
                return bool(self._dom().isActive())
            except Exception as exc:
                self.last_error = str(exc)
                self._conn = None
                return None

    def start(self, boot_source: str | None) -> None:
        """Start the domain booting from ``boot_source`` (Redfish target: ``Pxe``, ``Hdd``...)."""
        order = ("network", "hd") if boot_source in ("Pxe", "UefiHttp") else ("hd",)
        boots = "".join(f"<boot dev='{dev}'/>" for dev in order)
        with self._lock:
            try:
                dom = self._dom()
                if dom.isActive():
                    dom.destroy()
                xml = _BOOT_RE.sub("", dom.XMLDesc(0))
                xml = re.sub(r"<type [^>]*>hvm</type>", lambda m: m.group(0) + boots, xml, count=1)
                self._conn.defineXML(xml)
                self._dom().create()
            except Exception as exc:
                self.last_error = str(exc)
                self._conn = None

    def stop(self) -> None:
        """Pull the plug (ForceOff)."""
        with self._lock:
            try:
                dom = self._dom()
                if dom.isActive():
                    dom.destroy()
            except Exception as exc:
                self.last_error = str(exc)
                self._conn = None
