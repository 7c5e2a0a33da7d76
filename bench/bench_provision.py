"""Provisioning benchmark on the real lab: wall time for 1 and 3 nodes, per phase, beside a lower bound.

For each size N a fresh lab (namespace, libvirt VMs under qemu TCG, emulated iDRACs, dnsmasq + nginx) is
built and N powered-off nodes are provisioned at once by the real flow. Per node it reports:

- network boot -> ramdisk: power-on request until the deploy kernel prints on the serial console;
- image write: ramdisk start until the ramdisk's callback (block map check, holes zeroed, mapped ranges
  streamed, each read whole and hashed, then decompressed (zstd) and written with O_DIRECT), with the
  ramdisk's own figures for each step;
- disk boot -> SSH: disk boot request until SSH answers with the pinned host key;
- a timeline: when the serial console first shows the firmware, iPXE, the node's boot script, the deploy
  kernel, the ramdisk's DHCP, write start and end, the disk boot's firmware, kernel and userspace, beside
  the flow's own phase ends (power on, callback, off, disk power on, pinned SSH), in seconds after power-on;

and the lower bound this machine allows, measured in the same run: the bytes nodes download (the image's
zstd ranges) at the bridge throughput measured inside the lab's namespace (nginx -> a client on the bridge
address), plus a
bare TCG boot of the deploy kernel + ramdisk (qemu -kernel/-initrd, to its /init's first output), plus a
bare TCG boot of the same image from a local disk to sshd started, plus the Redfish round trips the flow
makes (its count x the median of BMC requests timed against the lab's emulated iDRAC).

Targets (issue "installs at the speed of the machine"): one node <= 110 s and <= 1.5x the bound; three
nodes together <= 1.8x one node.

    .venv/bin/python bench/bench_provision.py           # 1 and 3 nodes (~5 minutes on 2 cores)
    .venv/bin/python bench/bench_provision.py --quick   # 1 node
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bootstrap.inventory import load_inventory
from bootstrap.oob import target_for
from bootstrap.provision.blockmap import ranges_path
from bootstrap.provision.flow import Artefacts, FlowSettings, ProvisionSession
from rackctl_lab.environment import LabEnvironment
from tests.lab.vmlab import VmLab, admin_key, missing_prerequisites, write_inventory

KERNEL_MARK = re.compile(rb"Linux version \d")
#: What the serial console shows, in order, from power-on to the installed system's kernel: the bench records
#: when each first appears (0.2 s resolution) so that every phase of the install has its own figure.
TIMELINE = (
    ("firmware", rb"SeaBIOS"),
    ("ipxe", rb"iPXE"),
    ("node script", rb"rackctl: deploying"),
    ("deploy kernel", rb"Linux version \d"),
    ("ramdisk init", rb"rackctl-ramdisk: mode="),
    ("ramdisk dhcp", rb"rackctl-ramdisk: DHCP on"),
    ("write start", rb"rackctl-ramdisk: writing"),
    ("write verified", rb"rackctl-ramdisk: written and verified"),
    ("ramdisk off", rb"rackctl-ramdisk: done"),
    ("kernel power down", rb"reboot: Power down"),
    ("disk firmware", rb"SeaBIOS"),
    ("os kernel", rb"Linux version \d"),
    ("os userspace", rb"systemd\[1\]|Welcome to|rackctl-growroot"),
)
#: The deploy ramdisk's own figures for its write (where the write phase's seconds go), kept as printed.
RAMDISK_FIGURES = re.compile(rb"rackctl-ramdisk: ((?:ranges|holes zeroed)[^\r\n]*)")


class SerialWatch(threading.Thread):
    """Records when each node's serial log first shows each :data:`TIMELINE` mark, in order."""

    def __init__(self, lab: VmLab, hosts: list[str]) -> None:
        super().__init__(daemon=True)
        self.lab, self.hosts = lab, hosts
        self.marks: dict[str, dict[str, float]] = {h: {} for h in hosts}
        self.offsets = {h: _size(lab, h) for h in hosts}
        self.buffers = {h: b"" for h in hosts}
        self.lines = {h: b"" for h in hosts}
        self.figures: dict[str, list[str]] = {h: [] for h in hosts}
        self.stop = threading.Event()

    @property
    def seen(self) -> dict[str, float]:
        """When the deploy kernel first printed, per node."""
        return {h: m["deploy kernel"] for h, m in self.marks.items() if "deploy kernel" in m}

    def run(self) -> None:
        while not self.stop.is_set():
            for host in self.hosts:
                path = self.lab.lab_dir / "vms" / f"{host}.serial.log"
                if not path.exists():
                    continue
                with path.open("rb") as fh:
                    fh.seek(self.offsets[host])
                    data = fh.read()
                now = time.monotonic()
                self.offsets[host] += len(data)
                *complete, self.lines[host] = (self.lines[host] + data).split(b"\n")
                for line in complete:
                    if found := RAMDISK_FIGURES.search(line):
                        self.figures[host].append(found.group(1).decode(errors="replace").strip())
                buf = self.buffers[host] + data
                marks = self.marks[host]
                for name, pattern in TIMELINE[len(marks) :]:
                    found = re.search(pattern, buf)
                    if not found:
                        break
                    marks[name] = now
                    buf = buf[found.end() :]
                self.buffers[host] = buf[-4096:]
            time.sleep(0.2)


def _size(lab: VmLab, host: str) -> int:
    path = lab.lab_dir / "vms" / f"{host}.serial.log"
    return path.stat().st_size if path.exists() else 0


def bridge_throughput(lab: VmLab, image: Path, server_ip: str, port: int) -> float:
    """Bytes/s of nginx (in the namespace) sending ``image`` to a client on the bridge address."""
    sock = lab.network.connect(server_ip, port, timeout=30)
    name = image.name
    sock.sendall(f"GET /images/{name} HTTP/1.0\r\nHost: {server_ip}\r\n\r\n".encode())
    start, total = time.monotonic(), 0
    while chunk := sock.recv(1 << 20):
        total += len(chunk)
    sock.close()
    return total / max(time.monotonic() - start, 1e-6)


def bare_kernel_boot(kernel: Path, initrd: Path) -> float:
    """Seconds from qemu start (TCG) until the deploy ramdisk's kernel reaches its init's first output."""
    argv = [
        "qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-nodefaults", "-nographic", "-no-reboot",
        "-serial", "stdio", "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", "console=ttyS0,115200 rackctl.mode=none panic=-1",
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    buf = b""
    elapsed = float("nan")
    try:
        while time.monotonic() - start < 120:
            data = proc.stdout.read1(4096) if hasattr(proc.stdout, "read1") else proc.stdout.read(4096)
            if not data:
                break
            buf += data
            if b"rackctl-ramdisk:" in buf:  # the ramdisk's /init speaks: the kernel has booted
                elapsed = time.monotonic() - start
                break
    finally:
        proc.kill()
        proc.wait()
    return elapsed


#: Redfish requests the flow makes per node on the critical path: identity read, power state + power off,
#: PXE override, power on, power-off wait (>= 1 read), power state + Hdd override + power on.
FLOW_REDFISH_REQUESTS = 10
SSH_MARK = re.compile(rb"Started ssh\.service|Reached target multi-user|login:")


def bare_image_boot(image: Path, workdir: Path) -> float:
    """Seconds from qemu start (TCG, no network) until the image's systemd has started sshd (serial console)."""
    raw = workdir / "bare-boot.raw"
    with raw.open("wb") as out:
        subprocess.run(["pigz", "-dc", str(image)], stdout=out, check=True)
    argv = [
        "qemu-system-x86_64", "-accel", "tcg", "-m", "1024", "-nodefaults", "-nographic", "-no-reboot",
        "-serial", "stdio", "-drive", f"file={raw},format=raw,if=virtio,cache=unsafe",
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    buf, elapsed = b"", float("nan")
    try:
        while time.monotonic() - start < 300:
            data = proc.stdout.read1(4096)
            if not data:
                break
            buf = (buf + data)[-8192:]
            if SSH_MARK.search(buf):
                elapsed = time.monotonic() - start
                break
    finally:
        proc.kill()
        proc.wait()
        raw.unlink(missing_ok=True)
    return elapsed


def redfish_round_trip(lab: VmLab, inventory: Any, host: str, samples: int = 15) -> float:
    """Median seconds of one authenticated GET of the node's system resource on its emulated iDRAC."""
    from redfish_tools.connection import BmcConnection  # noqa: PLC0415
    from redfish_tools.resources import Service  # noqa: PLC0415

    times = []
    with BmcConnection(target_for(inventory, inventory.node(host))) as conn:
        service = Service(conn)
        for _ in range(samples):
            start = time.monotonic()
            service.system(fresh=True)
            times.append(time.monotonic() - start)
    return sorted(times)[len(times) // 2]


def run_size(count: int, folder: Path, *, ramdisk: Any, image: Any, key: Path, public: str) -> dict[str, Any]:
    hosts = [f"gpu-{i:02d}" for i in range(1, count + 1)]
    lab = VmLab(folder, write_inventory(folder, hosts, public)).up()
    try:
        inventory = load_inventory(lab.inventory_path)
        session = ProvisionSession(
            inventory,
            hosts,
            state_dir=folder / "state",
            artefacts=Artefacts(kernel=ramdisk.kernel, initrd=ramdisk.initrd, image=image.path),
            site=LabEnvironment(lab.lab_dir).boot_site(inventory),
            environment=LabEnvironment(lab.lab_dir),
            settings=FlowSettings(callback_timeout_s=1200, ssh_timeout_s=900, ssh_user="root", ssh_key=key),
            targets={h: target_for(inventory, inventory.node(h)) for h in hosts},
        )
        rtt = redfish_round_trip(lab, inventory, hosts[0])
        with session:
            throughput = bridge_throughput(lab, image.path, lab.network.ip, 8080)
            watch = SerialWatch(lab, hosts)
            started: dict[str, float] = {}

            def on_phase(host: str, phase: str) -> None:
                if phase == "network-boot":
                    started[host] = time.monotonic()

            watch.start()
            t0 = time.monotonic()
            runs = session.provision_all(on_phase=on_phase)
            wall = time.monotonic() - t0
            watch.stop.set()
        nodes = {}
        for host, run in runs.items():
            t = run.timings
            to_ramdisk = watch.seen.get(host, float("nan")) - started.get(host, float("nan"))
            base = started.get(host, float("nan"))
            timeline = {name: round(at - base, 1) for name, at in watch.marks[host].items()}
            elapsed = 0.0
            for phase, label in (("network-boot", "power on"), ("install", "callback"), ("power-off", "off"),
                                 ("disk-boot", "disk power on"), ("ssh", "pinned ssh")):  # fmt: skip
                elapsed += t.get(phase, 0.0)
                timeline[label] = round(elapsed, 1)
            timeline = dict(sorted(timeline.items(), key=lambda item: item[1]))
            nodes[host] = {
                "timeline_s": timeline,
                "ok": run.ok,
                "message": run.message,
                "network_boot_to_ramdisk_s": round(to_ramdisk, 1),
                "image_write_s": round(t.get("network-boot", 0) + t.get("install", 0) - to_ramdisk, 1),
                "power_off_s": t.get("power-off"),
                "disk_boot_to_ssh_s": round(t.get("disk-boot", 0) + t.get("ssh", 0), 1),
                "identity_s": t.get("identity"),
                "ramdisk_figures": watch.figures[host],
            }
        return {
            "nodes": count,
            "wall_s": round(wall, 1),
            "bridge_bytes_per_s": throughput,
            "redfish_rtt_s": rtt,
            "per_node": nodes,
        }
    finally:
        lab.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 node only")
    parser.add_argument("--full", action="store_true", help="1 and 3 nodes (the default)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reason = missing_prerequisites()
    if reason:
        print(f"bench_provision: cannot run here: {reason}")
        return 0
    from bootstrap.provision.image import build_image  # noqa: PLC0415
    from bootstrap.provision.ramdisk import build_ramdisk  # noqa: PLC0415

    sizes = [1] if args.quick else [1, 3]
    with tempfile.TemporaryDirectory(prefix="bench-provision-") as tmp:
        folder = Path(tmp)
        key, public = admin_key(folder)
        ramdisk = build_ramdisk("lab")
        image = build_image([public])
        boot_s = bare_kernel_boot(ramdisk.kernel, ramdisk.initrd)
        image_boot_s = bare_image_boot(image.path, folder)
        compressed = image.path.stat().st_size
        served = ranges_path(image.path).stat().st_size  # what nodes download: the mapped ranges, zstd
        results = []
        for count in sizes:
            sub = folder / f"n{count}"
            sub.mkdir()
            results.append(run_size(count, sub, ramdisk=ramdisk, image=image, key=key, public=public))
    for res in results:
        bound = served / res["bridge_bytes_per_s"] + boot_s + image_boot_s
        bound += FLOW_REDFISH_REQUESTS * res["redfish_rtt_s"]
        res["lower_bound_s"] = round(bound, 1)
        res["ratio_to_bound"] = round(res["wall_s"] / bound, 2)
    one = next((r["wall_s"] for r in results if r["nodes"] == 1), None)
    for res in results:
        res["ratio_to_one_node"] = round(res["wall_s"] / one, 2) if one else None
    summary = {
        "bare_kernel_boot_s": boot_s,
        "bare_image_boot_s": image_boot_s,
        "image_gz_bytes": compressed,
        "ranges_zstd_bytes": served,
        "runs": results,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(
        f"image: {image.size / 1e6:.0f} MB raw, {compressed / 1e6:.0f} MB gzipped; "
        f"nodes download its mapped ranges: {served / 1e6:.0f} MB zstd"
    )
    print(f"bare TCG boot of the deploy kernel + ramdisk: {boot_s:.1f} s; of the image to sshd: {image_boot_s:.1f} s")
    for res in results:
        print(
            f"\n{res['nodes']} node(s): wall {res['wall_s']:.0f} s; lower bound {res['lower_bound_s']:.1f} s "
            f"(image at {res['bridge_bytes_per_s'] / 1e6:.0f} MB/s + bare ramdisk boot + bare image boot + "
            f"{FLOW_REDFISH_REQUESTS} x {res['redfish_rtt_s'] * 1000:.0f} ms Redfish); "
            f"ratio {res['ratio_to_bound']}x the bound (target <= 1.5 for one node), "
            f"{res['ratio_to_one_node']}x one node (target <= 1.8 for three)"
        )
        print(f"  {'node':8} {'net boot->ramdisk':>18} {'image write':>12} {'disk boot->SSH':>15} ok")
        for host, n in res["per_node"].items():
            print(
                f"  {host:8} {n['network_boot_to_ramdisk_s']:>17}s {n['image_write_s']:>11}s "
                f"{n['disk_boot_to_ssh_s']:>14}s {n['ok']}{'' if n['ok'] else ' ' + n['message']}"
            )
            marks = ", ".join(f"{name} {at}" for name, at in n["timeline_s"].items())
            print(f"  {'':8} serial console, s after the power-on request: {marks}")
            if n["ramdisk_figures"]:
                print(f"  {'':8} the ramdisk's write: {'; '.join(n['ramdisk_figures'])}")
    return 0 if all(n["ok"] for r in results for n in r["per_node"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
