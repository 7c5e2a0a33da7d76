"""Lab proof of the image method, below the flow: the real deploy ramdisk, booted under qemu (TCG) with the
kernel command line rendered for the node, streams the real debootstrap image from nginx onto an empty
virtual disk, verifies its sha256, installs the node's overlay and calls back; the disk then boots by itself
(SeaBIOS → GRUB → Debian) and presents the pinned SSH host key. A second node whose image URL is wrong
reports a clear error while the first one finishes.

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
from bootstrap.provision.image import build_image
from bootstrap.provision.ramdisk import build_ramdisk
from bootstrap.provision.render import render_boot_tree
from tests.provision.netlab import BRIDGE, CALLBACK_PORT, SERVER_IP, NetLab, netns_available

pytestmark = [pytest.mark.lab, pytest.mark.slow]

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
    # gpu-02 is told another digest than the image's: the stream it receives must be refused (a wrong URL
    # is covered by test_flow_failures)
    bad_args = re.sub(
        r"rackctl\.gzsha256=\w+", "rackctl.gzsha256=" + "0" * 64, _kernel_args(bad.ipxe_script.read_text())
    )
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
        assert "sha256 mismatch of the served image" in failed["detail"], diag
        done = calls.get("/callback/gpu-01")
        assert done and done["status"] == "ok" and done["token"] == good.token, diag
        # the ramdisk hashed the stream it wrote (no read-back) and counted the bytes dd wrote
        served = hashlib.sha256(image.path.read_bytes()).hexdigest()
        assert done["detail"].endswith(f"bytes={image.size} gzsha256={served}"), diag
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
