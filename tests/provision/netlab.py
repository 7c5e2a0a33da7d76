"""A private PXE segment for provisioning tests: a network namespace with a bridge, the head node's boot
services (real dnsmasq + nginx) inside it, a callback receiver, and qemu (TCG) VMs on tap ports.

Nothing leaves the namespace: no veth to the root namespace, every server binds inside it. Everything is
stopped by PID and the namespace is deleted on :meth:`NetLab.close`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bootstrap.provision.api import BootTree
from bootstrap.provision.services import BootServices

BRIDGE = "rkbr0"
SERVER_IP = "10.200.0.1"
CALLBACK_PORT = 8099  # inside the test's own namespace: cannot collide with other runs

RECEIVER = r"""
import json, sys, urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer
log = sys.argv[2]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        with open(log, "a") as fh:
            fh.write(json.dumps({"path": url.path, **q}) + "\n")
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok\n")
    do_POST = do_GET
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def netns_available() -> str | None:
    """Why a network namespace lab cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root for ip netns (CI runs as root)"
    for tool in ("ip", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/apt-packages.txt)"
    return None


class NetLab:
    """One namespace + bridge; boot services and VMs attach to it."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.ns = f"rkb-{secrets.token_hex(4)}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.vms: list[subprocess.Popen[bytes]] = []
        self.services: BootServices | None = None
        self.callback_log = work / "callbacks.jsonl"
        self._taps = 0
        self.sh("ip", "netns", "add", self.ns)
        self.nsexec("ip", "link", "set", "lo", "up")
        self.nsexec("ip", "link", "add", BRIDGE, "type", "bridge")
        self.nsexec("ip", "addr", "add", f"{SERVER_IP}/24", "dev", BRIDGE)
        self.nsexec("ip", "link", "set", BRIDGE, "up")

    @staticmethod
    def sh(*argv: str) -> str:
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout

    def nsexec(self, *argv: str) -> str:
        return self.sh("ip", "netns", "exec", self.ns, *argv)

    def start_services(self, tree: BootTree) -> BootServices:
        in_netns = ["ip", "netns", "exec", self.ns]
        self.services = BootServices(tree, wrap=lambda argv: [*in_netns, *argv], log_dir=self.work / "logs")
        self.services.start()
        self.callback_log.touch()
        receiver = self.work / "receiver.py"
        receiver.write_text(RECEIVER)
        self.procs.append(
            subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.ns,
                    sys.executable,
                    str(receiver),
                    str(CALLBACK_PORT),
                    str(self.callback_log),
                ]
            )
        )
        return self.services

    def boot_vm(
        self, name: str, mac: str, kernel: Path, initrd: Path, append: str, *, disk: Path | None = None
    ) -> Path:
        """Start a qemu TCG VM with a tap on the bridge; returns its serial console log."""
        tap = self._tap()
        console = self.work / f"{name}.console.log"
        argv = [
            "qemu-system-x86_64", "-accel", "tcg", "-m", "384", "-smp", "1", "-nodefaults",
            "-display", "none", "-no-reboot", "-serial", f"file:{console}",
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
            "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n0,mac={mac}",
        ]  # fmt: skip
        if disk is not None:
            argv += ["-drive", f"file={disk},format=raw,if=virtio,cache=unsafe"]
        vm = subprocess.Popen(["ip", "netns", "exec", self.ns, *argv], stdin=subprocess.DEVNULL)
        self.vms.append(vm)
        self.procs.append(vm)
        return console

    def boot_disk(self, name: str, mac: str, disk: Path) -> Path:
        """Start a qemu TCG VM (SeaBIOS) that boots from ``disk``; returns its serial console log."""
        tap = self._tap()
        console = self.work / f"{name}.console.log"
        argv = [
            "qemu-system-x86_64", "-accel", "tcg", "-m", "768", "-smp", "1", "-nodefaults",
            "-display", "none", "-no-reboot", "-serial", f"file:{console}",
            "-drive", f"file={disk},format=raw,if=virtio,cache=unsafe",
            "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n0,mac={mac}",
        ]  # fmt: skip
        vm = subprocess.Popen(["ip", "netns", "exec", self.ns, *argv], stdin=subprocess.DEVNULL)
        self.vms.append(vm)
        self.procs.append(vm)
        return console

    def nspython(self, code: str, *args: str) -> str:
        """Run Python code (this interpreter, so rackctl is importable) inside the namespace."""
        return self.nsexec(sys.executable, "-c", code, *args)

    def _tap(self) -> str:
        tap = f"rkt{self._taps}"
        self._taps += 1
        self.nsexec("ip", "tuntap", "add", tap, "mode", "tap")
        self.nsexec("ip", "link", "set", tap, "master", BRIDGE)
        self.nsexec("ip", "link", "set", tap, "up")
        return tap

    def callbacks(self) -> list[dict[str, str]]:
        if not self.callback_log.exists():
            return []
        return [json.loads(line) for line in self.callback_log.read_text().splitlines() if line.strip()]

    def wait_vms(self, timeout: float) -> None:
        """Wait until every VM has powered off (qemu exits), killing them at ``timeout``."""
        deadline = time.monotonic() + timeout
        for proc in self.vms:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))

    def diagnostics(self) -> str:
        parts = [f"callbacks: {self.callbacks()}"]
        for console in sorted(self.work.glob("*.console.log")):
            parts.append(f"--- {console.name}\n{console.read_text(errors='replace')[-6000:]}")
        if self.services:
            parts += [f"--- {k}\n{v[-6000:]}" for k, v in self.services.logs().items()]
        return "\n".join(parts)

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        if self.services:
            self.services.stop()
        subprocess.run(["ip", "netns", "del", self.ns], check=False, capture_output=True)

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
