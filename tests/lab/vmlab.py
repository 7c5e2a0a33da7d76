"""A real lab for provisioning tests: namespace + bridge, libvirt VMs (qemu TCG), emulated iDRACs driving them.

Each :class:`VmLab` has its own namespace and bridge names, its own BMC ports and lab directory, so it can
run beside a user's ``rackctl lab up``. Everything started is stopped by PID/name in :meth:`VmLab.down`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bootstrap.inventory import load_inventory
from rackctl_lab.bmc_lab import plan_lab_bmcs
from rackctl_lab.netns import LabNetwork
from rackctl_lab.vm_lab import lab_down_all, lab_up_all, plan_lab_vms
from rackctl_lab.vms import VmSpec
from tests.ports import free_ports

TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "libvirtd": "libvirt-daemon-system",
    "virtlogd": "libvirt-daemon-system",
    "dnsmasq": "dnsmasq-base",
    "nginx": "nginx-light",
    "busybox": "busybox-static",
    "ip": "iproute2",
}


def missing_prerequisites() -> str:
    """Why a VM lab cannot exist on this machine ('' when it can): root and the Debian packages."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "the VM lab needs root on Linux (network namespaces, libvirtd)"
    missing = [pkg for tool, pkg in TOOLS.items() if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")]
    if missing:
        return f"missing Debian packages (scripts/setup.sh installs them): {', '.join(sorted(set(missing)))}"
    try:
        import libvirt  # noqa: F401
    except ImportError:
        return "libvirt-python is not installed (pip install -e '.[test]')"
    return ""


def admin_key(folder: Path) -> tuple[Path, str]:
    """A fresh ed25519 admin key pair: (private key file, public key line)."""
    key = Ed25519PrivateKey.generate()
    private = folder / "id_ed25519"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    private.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, public.decode() + " e2e@rackctl"


def write_inventory(folder: Path, workers: list[str], admin_public_key: str) -> Path:
    """A lab inventory: head-01 plus ``workers`` (R760xa), each with a PXE MAC/IP and a free BMC port."""
    nodes: list[dict[str, Any]] = []
    bmc_ports = free_ports(1 + len(workers))
    for index, name in enumerate(["head-01", *workers], start=1):
        nodes.append(
            {
                "hostname": name,
                "role": "head" if index == 1 else "worker",
                "model": "R660" if index == 1 else "R760xa",
                "service_tag": f"LABT{index:03d}",
                "root_disk_hint": "/dev/vda",
                "bmc": {"address": f"127.0.0.1:{bmc_ports[index - 1]}", "credentials": "lab"},
                "interfaces": [
                    {
                        "name": "pxe0",
                        "network": "pxe",
                        "fqdd": "NIC.Embedded.1-1-1",
                        "mac": f"52:54:00:9a:00:{index:02x}",
                        "ip": f"10.200.0.{100 + index}",  # away from the lab inventory's .11-.13
                    },
                    {
                        "name": "mgmt0",
                        "network": "management",
                        "fqdd": "NIC.Integrated.1-1-1",
                        "mac": f"52:54:00:9a:01:{index:02x}",
                        "ip": f"10.200.1.{10 + index}",
                    },
                ],
                **({} if index == 1 else {"gpus": {"type": "L40S", "count": 2}}),
            }
        )
    data = {
        "cluster": {
            "name": "lab",
            "domain": "lab.rackctl.test",
            "timezone": "UTC",
            "admin_ssh_keys": [admin_public_key],
            "software_profile": "current",
            "install_method": "image",
            "lab": True,
        },
        "networks": {
            "oob": {"cidr": "10.200.0.0/24"},
            "pxe": {"shared_with": "oob", "dhcp_range": {"start": "10.200.0.200", "end": "10.200.0.220"}},
            "management": {"cidr": "10.200.1.0/24"},
            "kubernetes": {"api_vip": "10.200.1.10"},
        },
        "credentials": {"lab": {"username": "root", "password_file": ".lab/secrets/bmc.yml"}},
        "bmc": {"defaults": {"ca_file": ".lab/pki/ca.pem"}},
        "nodes": nodes,
    }
    path = folder / "lab.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class VmLab:
    """One lab: ``up()`` builds it from an inventory, ``down()`` removes it, ``dump()`` tells what happened."""

    def __init__(self, folder: Path, inventory_path: Path, *, memory_mib: int = 1024) -> None:
        suffix = secrets.token_hex(3)
        self.folder = folder
        self.lab_dir = folder / ".lab"
        self.inventory_path = inventory_path
        self.network = LabNetwork(f"rkt-{suffix}", f"rkt{suffix}", "10.200.0.1/24")
        self.memory_mib = memory_mib
        self.vms: list[VmSpec] = []
        self.result: dict[str, Any] = {}

    def up(self) -> VmLab:
        inventory = load_inventory(self.inventory_path)
        bmc_plan = plan_lab_bmcs(inventory)
        vm_plan = plan_lab_vms(inventory, self.lab_dir, bmc_plan, memory_mib=self.memory_mib, network=self.network)
        self.vms = vm_plan.vms
        try:
            self.result = lab_up_all(bmc_plan, vm_plan, self.lab_dir, processes=1)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> dict[str, Any]:
        return lab_down_all(self.lab_dir)

    def serial(self, hostname: str) -> str:
        path = self.lab_dir / "vms" / f"{hostname}.serial.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def dump(self, extra: dict[str, str] | None = None, tail: int = 6000) -> str:
        """Serial consoles, boot-service logs, emulator and libvirt logs (for a failing test's output)."""
        parts = [f"===== serial console of {vm.hostname}\n{self.serial(vm.hostname)[-tail:]}" for vm in self.vms]
        for name, text in (extra or {}).items():
            parts.append(f"===== {name}\n{text[-tail:]}")
        for log in sorted((self.lab_dir / "idrac").glob("*.log")) + sorted((self.lab_dir / "vms").glob("*d.log")):
            parts.append(f"===== {log.name}\n{log.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)
