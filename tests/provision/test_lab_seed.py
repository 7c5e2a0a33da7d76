"""Lab proof of the autoinstall plumbing without an Ubuntu archive.

The deploy kernel + ramdisk boot under qemu (TCG) with the *kernel command line rendered for the Ubuntu
installer* (``ds=nocloud-net;s=<seed URL>``), on a bridge inside a private network namespace where the real
dnsmasq gives it its lease (known MAC) and the real nginx serves the seed. The ramdisk fetches user-data and
meta-data from that URL, checks them and calls back through nginx's /callback/ proxy. Standing in for the
installer kernel is the only difference from a real autoinstall boot (no Ubuntu ISO can be had here).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from bootstrap.inventory.models import InstallMethod, Inventory
from bootstrap.provision.api import BootConfig
from bootstrap.provision.ramdisk import build_ramdisk
from bootstrap.provision.render import render_boot_tree
from tests.provision.netlab import BRIDGE, CALLBACK_PORT, SERVER_IP, NetLab, netns_available

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.vm]


def _kernel_args(ipxe_script: str) -> str:
    line = next(x for x in ipxe_script.splitlines() if x.startswith("kernel "))
    return line.split(" ", 2)[2]


def test_ramdisk_fetches_and_checks_the_autoinstall_seed(lab_inventory: Inventory, tmp_path: Path) -> None:
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    ramdisk = build_ramdisk("lab")
    inv = lab_inventory.model_copy(
        update={"cluster": lab_inventory.cluster.model_copy(update={"install_method": InstallMethod.AUTOINSTALL})}
    )
    tree = render_boot_tree(
        BootConfig(
            inventory=inv,
            out_dir=tmp_path / "state" / "boot",
            server_ip=SERVER_IP,
            interface=BRIDGE,
            kernel=ramdisk.kernel,
            initrd=ramdisk.initrd,
            nodes=["gpu-01"],
            callback_upstream=f"127.0.0.1:{CALLBACK_PORT}",
        )
    )
    node = tree.nodes["gpu-01"]
    assert node.ipxe_script and node.seed_dir
    args = _kernel_args(node.ipxe_script.read_text())
    assert f"ds=nocloud-net;s=http://{SERVER_IP}:8080/private/gpu-01/{node.token}/" in args
    append = (
        f"{args} rackctl.mode=seedcheck rackctl.hostname=gpu-01 rackctl.mac={node.mac} "
        f"rackctl.callback={tree.url('callback/gpu-01')} rackctl.token={node.token}"
    )
    with NetLab(tmp_path / "lab") as lab:
        (tmp_path / "lab").mkdir(exist_ok=True)
        lab.start_services(tree)
        lab.boot_vm("gpu-01", node.mac, ramdisk.kernel, ramdisk.initrd, append)
        # A MAC that is not in the inventory asks for DHCP at the same time: it is logged and ignored.
        stranger = "52:54:00:99:99:99"
        lab.boot_vm("stranger", stranger, ramdisk.kernel, ramdisk.initrd, append.replace(node.mac, stranger))
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not lab.callbacks():
            time.sleep(1)
        lab.wait_vms(60)
        diag = lab.diagnostics()
        calls = lab.callbacks()
        assert len(calls) == 1, f"expected exactly gpu-01's callback\n{diag}"
        call = calls[0]
        assert call["path"] == "/callback/gpu-01", diag
        assert call["token"] == node.token, diag
        assert call["status"] == "ok", diag
        user_data = hashlib.sha256((node.seed_dir / "user-data").read_bytes()).hexdigest()
        meta_data = hashlib.sha256((node.seed_dir / "meta-data").read_bytes()).hexdigest()
        assert call["detail"] == f"seed-ok user-data={user_data} meta-data={meta_data}", diag
        dhcp = lab.services.logs()["dnsmasq"] if lab.services else ""
        assert f"DHCPACK({BRIDGE}) 10.200.0.12 {node.mac} gpu-01" in dhcp, diag
        assert f"DHCPDISCOVER({BRIDGE}) {stranger} ignored" in dhcp, diag
        assert f"DHCPOFFER({BRIDGE})" not in "".join(x for x in dhcp.splitlines() if stranger in x), diag
        stranger_console = (tmp_path / "lab" / "stranger.console.log").read_text(errors="replace")
        assert "rackctl-ramdisk: no DHCP answer on eth0" in stranger_console, diag
