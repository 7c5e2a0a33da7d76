"""Provisioning failures on the real lab: each node fails on its own, clearly, and nothing is left half-done.

One lab (namespace, libvirt VMs, emulated iDRACs, real dnsmasq/nginx, the real deploy ramdisk):

- ``bad-url``: its iPXE script points the ramdisk at an image URL that does not exist -> the ramdisk
  reports the error -> the node fails in ``install`` with the ramdisk's detail;
- ``silent``: its iPXE script is missing (the node never reaches the ramdisk) -> no callback -> the node
  fails in ``install`` after the timeout, naming what to check;
- a machine whose MAC is not in the inventory asks for DHCP -> dnsmasq ignores it and logs it.

Afterwards: both nodes are powered off with no network-first override, their tokens are burnt, and the
boot services are stopped.
"""

from __future__ import annotations

import gzip
import re
import subprocess
from pathlib import Path

import pytest

from bootstrap.inventory import load_inventory
from bootstrap.oob import target_for
from bootstrap.provision.flow import Artefacts, FlowSettings, ProvisionSession
from rackctl_lab.environment import LabEnvironment
from rackctl_lab.vms import VmSpec, connect, domain_xml
from redfish_tools.boot import boot_override
from redfish_tools.connection import BmcConnection
from redfish_tools.power import power_state
from tests.lab.vmlab import VmLab, admin_key, missing_prerequisites, write_inventory

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.vm]

STRANGER_MAC = "52:54:00:de:ad:01"


@pytest.fixture(scope="module")
def ramdisk():
    reason = missing_prerequisites()
    if reason:
        pytest.skip(reason)
    from bootstrap.provision.ramdisk import build_ramdisk

    return build_ramdisk("lab")


def _placeholder_image(folder: Path) -> Path:
    """A small gzipped "image": the failing nodes never get to write it (the bad URL is elsewhere)."""
    image = folder / "image.raw.gz"
    with gzip.open(image, "wb") as fh:
        fh.write(b"\0" * (1 << 20))
    return image


def _start_stranger(lab: VmLab) -> VmSpec:
    spec = VmSpec(
        "stranger",
        STRANGER_MAC,
        str(lab.lab_dir / "vms" / "stranger.qcow2"),
        str(lab.lab_dir / "vms" / "stranger.serial.log"),
        memory_mib=256,
    )
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", spec.disk, "1G"], check=True)
    conn = connect()
    try:
        dom = conn.defineXML(domain_xml(spec, lab.network.bridge, boot=("network",)))
        dom.create()
    finally:
        conn.close()
    return spec


def _remove_stranger(spec: VmSpec) -> None:
    conn = connect()
    try:
        dom = conn.lookupByName(spec.domain)
        if dom.isActive():
            dom.destroy()
        dom.undefine()
    finally:
        conn.close()


def test_bad_image_url_no_callback_and_unknown_mac(tmp_path: Path, ramdisk) -> None:
    key, public = admin_key(tmp_path)
    lab = VmLab(tmp_path, write_inventory(tmp_path, ["bad-url", "silent"], public), memory_mib=768).up()
    inventory = load_inventory(lab.inventory_path)
    hosts = ["bad-url", "silent"]
    targets = {h: target_for(inventory, inventory.node(h)) for h in hosts}
    session = ProvisionSession(
        inventory,
        hosts,
        state_dir=tmp_path / "state",
        artefacts=Artefacts(kernel=ramdisk.kernel, initrd=ramdisk.initrd, image=_placeholder_image(tmp_path)),
        site=LabEnvironment(lab.lab_dir).boot_site(inventory),
        environment=LabEnvironment(lab.lab_dir),
        settings=FlowSettings(callback_timeout_s=75, power_off_timeout_s=10, ssh_key=key),
        targets=targets,
    )
    stranger = None
    logs: dict[str, str] = {}
    try:
        with session:
            tree = session.tree
            script = tree.nodes["bad-url"].ipxe_script
            text = script.read_text()
            bad = f"http://{lab.network.ip}:8080/images/no-such-image.raw.gz"
            script.write_text(re.sub(r"rackctl\.image=\S+", f"rackctl.image={bad}", text))
            tree.nodes["silent"].ipxe_script.unlink()
            stranger = _start_stranger(lab)
            runs = session.provision_all()
            logs = session.logs()
            tokens = {h: tree.nodes[h].token for h in hosts}
            callback = f"http://{lab.network.ip}:8080/callback"
            # the tokens are burnt: a late or replayed callback changes nothing
            for host in hosts:
                sock_status = _get_in_netns(lab, f"{callback}/{host}?token={tokens[host]}&status=ok")
                assert sock_status in (404, 409), sock_status
            service_pids = dict(session.services.pids)
        assert session.services is None and service_pids  # they ran, and are stopped now
        dump = lab.dump(logs)
        bad_run, silent_run = runs["bad-url"], runs["silent"]
        assert not bad_run.ok and bad_run.phase == "install", dump
        assert "reported an error" in bad_run.message and bad_run.message.split("error:", 1)[1].strip(), dump
        assert not silent_run.ok and silent_run.phase == "install", dump
        assert "no callback within 75s" in silent_run.message, dump
        assert silent_run.timings["install"] >= 75
        assert bad_run.timings["install"] < 75  # the error came back, no waiting for the timeout
        dnsmasq = logs.get("dnsmasq", "")
        assert STRANGER_MAC in dnsmasq and "ignored" in dnsmasq, dump
        assert not re.search(rf"DHCPACK\S* \S+ {STRANGER_MAC}", dnsmasq), dump
        for host in hosts:
            with BmcConnection(targets[host]) as bmc:
                assert power_state(bmc) == "Off"
                override = boot_override(bmc)
                assert not (override["target"] == "Pxe" and override["enabled"] != "Disabled"), override
    finally:
        if stranger is not None:
            _remove_stranger(stranger)
        lab.down()


def _get_in_netns(lab: VmLab, url: str) -> int:
    """GET ``url`` from inside the lab's namespace (where nginx listens); the HTTP status."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    sock = lab.network.connect(parts.hostname or "", parts.port or 80)
    try:
        request = f"GET {parts.path}?{parts.query} HTTP/1.0\r\nHost: {parts.hostname}\r\n\r\n"
        sock.sendall(request.encode())
        head = sock.recv(128).decode(errors="replace")
    finally:
        sock.close()
    return int(head.split()[1])
