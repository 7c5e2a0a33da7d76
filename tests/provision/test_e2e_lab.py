"""End to end on the real lab: two powered-off VMs to SSH with pinned host keys, then the project's Ansible.

Everything is real: the network namespace and bridge, libvirt VMs under qemu TCG, the emulated iDRACs
driving them over Redfish (one-time PXE, power, one-time Hdd), dnsmasq + nginx serving iPXE, the deploy
ramdisk built from Debian's kernel and busybox, the debootstrap image it writes, paramiko checking the
pinned host key, the DMI identity check, and the os-check stage (``playbooks/preflight.yml`` through the
rendered Ansible inventory, ansible-runner over SSH through a ProxyCommand into the namespace). On failure
the test prints the serial consoles, the DHCP and HTTP logs and the emulator/libvirt logs.

The install asserted here is the session's one PXE install (``installed_lab``, tests/installed_lab.py:
``inventory/lab.yml``'s two workers through :class:`~bootstrap.provision.flow.ProvisionSession`), which
every other VM test that does not test installing itself then works on: paid once, proven here.
"""

from __future__ import annotations

import hashlib

import pytest

from bootstrap.journal.store import Journal
from bootstrap.oob import target_for
from bootstrap.provision.blockmap import ensure_block_map, map_path
from bootstrap.provision.flow import PHASES
from bootstrap.stages.base import RunOptions, StageContext, get_stage
from redfish_tools.boot import boot_override
from redfish_tools.connection import BmcConnection
from redfish_tools.resources import Service
from tests.installed_lab import IMAGE_KERNEL_ARGS, InstalledLab

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_pxe_install_to_pinned_ssh_then_ansible(installed_lab: InstalledLab) -> None:
    lab = installed_lab
    inventory = lab.inventory
    dump = lab.dump + "\n".join(f"===== {name}\n{text[-6000:]}" for name, text in lab.logs.items())
    assert sorted(lab.runs) == sorted(lab.nodes), f"{lab.runs}\n{dump}"
    print(f"installed lab: {lab.timings}")  # lab up and the two installs, paid once for the session
    # the image build said what it was doing at each phase (or that the image was cached)
    phases = [p for p in lab.image_phases if not p.startswith("compressing the disk: ")]
    tenths = [p.split(": ")[1].split(" %")[0] for p in lab.image_phases if p.startswith("compressing the disk: ")]
    assert phases == ["the image is cached"] or (
        phases[-2:] == ["checksumming and compressing the disk", "mapping the disk's used blocks"]
        and "copying the root tree" in phases
        and tenths == [str(p) for p in range(10, 101, 10)]  # each tenth of the compression said, in order
    ), lab.image_phases
    assert lab.image is not None
    bmap = ensure_block_map(lab.image.path)
    digest = hashlib.sha256(map_path(lab.image.path).read_bytes()).hexdigest()
    written = f"bytes={lab.image.size} mapped={bmap.mapped_bytes} ranges={len(bmap.ranges)} bmapsha256={digest}"
    image_mib = lab.image.size >> 20
    for host in lab.nodes:
        print(f"{host}: {lab.runs[host].timings}")  # shown with -s or on failure: seconds per phase
        run = lab.runs[host]
        assert run.ok, f"{host}: {run.message}\n{dump}"
        assert set(run.timings) == set(PHASES)
        with BmcConnection(target_for(inventory, inventory.node(host))) as bmc:
            system = Service(bmc).system(fresh=True)
            # the machine that answered SSH is the one this BMC drives
            assert run.identity == {"uuid": system["UUID"].lower(), "serial": system["SKU"]}
            override = boot_override(bmc)
            assert override["target"] != "Pxe" or override["enabled"] == "Disabled"  # never network-first
        # the image's kernel arguments (`rackctl image build --kernel-arg`) reach the boot from disk
        cmdline = lab.ssh(host, "cat /proc/cmdline").stdout.split()
        assert set(IMAGE_KERNEL_ARGS) <= set(cmdline) and "root=LABEL=rackctl-root" in cmdline, cmdline
        # the deploy ramdisk wrote the image's mapped ranges only, each verified (no read-back), under the map
        # it was told, and said so in its callback
        callback = lab.step_details[host]["install"]["callback"]
        assert callback.endswith(written), callback
        # the root file system grew to the disk on first boot (the disk is larger than the image)
        grown = lab.ssh(host, "test -e /etc/rackctl-growroot.done && df -m --output=size / | tail -n 1").stdout
        assert int(grown) > image_mib, grown
    # The in-band seam: the os-check stage renders the inventory `rackctl inventory render` writes
    # (pxe address, root, the admin key, the state dir's pinned known_hosts, the lab's proxy) and
    # runs playbooks/preflight.yml through it; its lab thresholds come from group_vars/all/lab.yml.
    with Journal(lab.state_dir) as journal:
        run_id = journal.begin_run("e2e")
        ctx = StageContext(
            "os-check",
            inventory,
            list(lab.nodes),
            journal,
            lab.state_dir,
            run_id,
            options=RunOptions(environment=lab.environment),
        )
        result = get_stage("os-check").run(ctx)
        facts = {h: journal.latest_facts(h).get("os-check", {}) for h in lab.nodes}
    assert result.ok, f"{result}\n{dump}"
    for host in lab.nodes:
        report = facts[host]["preflight_report"]
        assert report["os"].startswith("Debian")
        assert report["product_uuid"].lower() == lab.runs[host].identity["uuid"]
