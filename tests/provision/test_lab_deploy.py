"""Lab proof of the image method's failure, below the flow: the real deploy ramdisk, booted under qemu (TCG)
with the kernel command line rendered for the node, served a ranges stream with one byte flipped inside its
largest range, must fail the install and say which range in its callback, then power off.

The good path (the mapped ranges only written, each verified, under the map the node was told; the disk
booting by itself with the pinned host key; the root grown to the disk) is asserted on the session's one
PXE install by tests/provision/test_e2e_lab.py; until 2026-12-07 this test installed and booted a VM of its
own for it (about 70 s of TCG time a run). The provisioning flow's other failures (a wrong image URL, no
callback, an unknown MAC): tests/provision/test_flow_failures.py.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from bootstrap.inventory.models import Inventory
from bootstrap.provision.api import BootConfig
from bootstrap.provision.blockmap import ensure_block_map, ranges_path
from bootstrap.provision.image import build_image
from bootstrap.provision.ramdisk import build_ramdisk
from bootstrap.provision.render import render_boot_tree
from tests.provision.netlab import BRIDGE, CALLBACK_PORT, SERVER_IP, NetLab, netns_available

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.vm]


def _kernel_args(script: str) -> str:
    return next(x for x in script.splitlines() if x.startswith("kernel ")).split(" ", 2)[2]


def _wait_for(lab: NetLab, count: int, timeout: float) -> list[dict[str, str]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(lab.callbacks()) < count:
        time.sleep(2)
    return lab.callbacks()


def test_a_corrupt_range_in_the_stream_fails_the_install_naming_the_range(
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
            nodes=["gpu-02"],
            callback_upstream=f"127.0.0.1:{CALLBACK_PORT}",
        )
    )
    bad = tree.nodes["gpu-02"]
    assert bad.ipxe_script
    bmap = ensure_block_map(image.path)
    # gpu-02 is served the ranges stream with one byte flipped inside its largest range (a wrong URL is
    # covered by test_flow_failures): the install must fail, naming that range
    largest = max(range(len(bmap.ranges)), key=lambda i: bmap.ranges[i].length)
    flip = sum(r.packed_length for r in bmap.ranges[:largest]) + bmap.ranges[largest].packed_length // 2
    corrupt = bytearray(ranges_path(image.path).read_bytes())
    corrupt[flip] ^= 0x01
    (tree.http_root / "images" / "corrupt.ranges").write_bytes(bytes(corrupt))
    del corrupt
    args = _kernel_args(bad.ipxe_script.read_text())
    assert "rackctl.bmapsha256=" in args and "rackctl.gzsha256" not in args
    bad_args = re.sub(r"rackctl\.image=(\S+)/[^/\s]+", r"rackctl.image=\1/corrupt.ranges", args)
    assert "corrupt.ranges" in bad_args
    work = tmp_path / "lab"
    work.mkdir()
    disk = work / "gpu-02.raw"
    with disk.open("wb") as fh:
        fh.truncate(image.size + (512 << 20))
    with NetLab(work) as lab:
        lab.start_services(tree)
        lab.boot_vm("gpu-02", bad.mac, ramdisk.kernel, ramdisk.initrd, bad_args, disk=disk)
        calls = {c["path"]: c for c in _wait_for(lab, 1, 600)}
        lab.wait_vms(60)
        diag = lab.diagnostics()
        failed = calls.get("/callback/gpu-02")
        assert failed and failed["status"] == "error" and failed["token"] == bad.token, diag
        bad_range = bmap.ranges[largest]
        assert f"range {largest + 1} (bytes {bad_range.offset}+{bad_range.length})" in failed["detail"], diag
        assert all(vm.poll() is not None for vm in lab.vms), "the ramdisk did not power off\n" + diag
