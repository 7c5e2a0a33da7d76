"""Lab proof of the image method, below the flow: the real deploy ramdisk, booted under qemu (TCG) with the
kernel command line rendered for the node, checks the image's block map, writes only its mapped ranges from
nginx onto a virtual disk (each range's digest verified), installs the node's overlay and calls back; the
disk then boots by itself (SeaBIOS → GRUB → Debian) and presents the pinned SSH host key. A second node
served a stream with one corrupt range reports which range while the first one finishes.

The provisioning flow (Redfish, iPXE chain, journal) is tested end to end by LABVM's test_e2e; this test
pins down the boot artefacts themselves.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import pytest

from bootstrap.inventory.models import Inventory
from bootstrap.provision.api import BootConfig
from bootstrap.provision.blockmap import ensure_block_map, map_path, ranges_path
from bootstrap.provision.image import build_image
from bootstrap.provision.ramdisk import build_ramdisk
from bootstrap.provision.render import render_boot_tree
from tests.provision.netlab import BRIDGE, CALLBACK_PORT, SERVER_IP, NetLab, netns_available

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.vm]

VERIFY = (
    "import sys, time\n"
    "from bootstrap.provision.hostkeys import verify_host_key\n"
    "deadline = time.monotonic() + float(sys.argv[3])\n"
    "while True:\n"
    "    try:\n"
    "        print(verify_host_key(sys.argv[1], 22, sys.argv[2], timeout=5)); break\n"
    "    except OSError:\n"
    "        if time.monotonic() > deadline: raise\n"
    "        time.sleep(2)\n"
)


def _kernel_args(script: str) -> str:
    return next(x for x in script.splitlines() if x.startswith("kernel ")).split(" ", 2)[2]


def _wait_for(lab: NetLab, count: int, timeout: float) -> list[dict[str, str]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(lab.callbacks()) < count:
        time.sleep(2)
    return lab.callbacks()


def test_ramdisk_deploys_the_image_and_the_disk_boots_with_the_pinned_key(
    lab_inventory: Inventory, tmp_path: Path
) -> None:
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    ramdisk = build_ramdisk("lab")
    image = build_image(list(lab_inventory.cluster.admin_ssh_keys))
    tree = render_boot_tree(
        BootConfig(
            inventory=lab_inventory,
            out_dir=tmp_path / "state" / "boot",
            server_ip=SERVER_IP,
            interface=BRIDGE,
            kernel=ramdisk.kernel,
            initrd=ramdisk.initrd,
            image=image.path,
            nodes=["gpu-01", "gpu-02"],
            callback_upstream=f"127.0.0.1:{CALLBACK_PORT}",
        )
    )
    good, bad = tree.nodes["gpu-01"], tree.nodes["gpu-02"]
    assert good.ipxe_script and bad.ipxe_script
    good_args = _kernel_args(good.ipxe_script.read_text())
    bmap = ensure_block_map(image.path)
    assert "rackctl.bmapsha256=" in good_args and "rackctl.gzsha256" not in good_args
    # gpu-02 is served the ranges stream with one byte flipped inside its largest range (a wrong URL is
    # covered by test_flow_failures): the install must fail, naming that range
    largest = max(range(len(bmap.ranges)), key=lambda i: bmap.ranges[i].length)
    flip = sum(r.packed_length for r in bmap.ranges[:largest]) + bmap.ranges[largest].packed_length // 2
    corrupt = bytearray(ranges_path(image.path).read_bytes())
    corrupt[flip] ^= 0x01
    (tree.http_root / "images" / "corrupt.ranges").write_bytes(bytes(corrupt))
    del corrupt
    bad_args = re.sub(
        r"rackctl\.image=(\S+)/[^/\s]+", r"rackctl.image=\1/corrupt.ranges", _kernel_args(bad.ipxe_script.read_text())
    )
    assert "corrupt.ranges" in bad_args
    work = tmp_path / "lab"
    work.mkdir()
    disks = {}
    for name in ("gpu-01", "gpu-02"):
        disks[name] = work / f"{name}.raw"
        with disks[name].open("wb") as fh:
            fh.truncate(image.size + (512 << 20))  # larger than the image: the root grows on first boot
    with NetLab(work) as lab:
        lab.start_services(tree)
        lab.boot_vm("gpu-01", good.mac, ramdisk.kernel, ramdisk.initrd, good_args, disk=disks["gpu-01"])
        lab.boot_vm("gpu-02", bad.mac, ramdisk.kernel, ramdisk.initrd, bad_args, disk=disks["gpu-02"])
        calls = {c["path"]: c for c in _wait_for(lab, 2, 600)}
        lab.wait_vms(60)
        diag = lab.diagnostics()
        failed = calls.get("/callback/gpu-02")
        assert failed and failed["status"] == "error" and failed["token"] == bad.token, diag
        bad_range = bmap.ranges[largest]
        assert f"range {largest + 1} (bytes {bad_range.offset}+{bad_range.length})" in failed["detail"], diag
        done = calls.get("/callback/gpu-01")
        assert done and done["status"] == "ok" and done["token"] == good.token, diag
        # the ramdisk wrote the mapped ranges only, each verified (no read-back), under the map it was told
        digest = hashlib.sha256(map_path(image.path).read_bytes()).hexdigest()
        tail = f"bytes={image.size} mapped={bmap.mapped_bytes} ranges={len(bmap.ranges)} bmapsha256={digest}"
        assert done["detail"].endswith(tail), diag
        assert all(vm.poll() is not None for vm in lab.vms), "the ramdisk did not power off\n" + diag

        # Boot the written disk by itself (SeaBIOS → GRUB): the node presents its pinned key on the PXE address.
        lab.vms.clear()
        lab.boot_disk("gpu-01-disk", good.mac, disks["gpu-01"])
        pinned = tree.known_hosts.read_text().split("\n")[[line.startswith("gpu-01,") for line in
                  tree.known_hosts.read_text().split("\n")].index(True)].split(" ", 1)[1]  # fmt: skip
        seen = lab.nspython(VERIFY, good.ip, pinned, "300")
        assert seen.strip() == good.host_key_fingerprint, lab.diagnostics()
        console = work / "gpu-01-disk.console.log"
        grown = [line for line in console.read_text(errors="replace").splitlines() if "rackctl-growroot:" in line]
        assert grown, lab.diagnostics()
        assert int(grown[0].split("is now ")[1].split()[0]) > (image.size >> 20), grown
