"""End to end on the real lab: two powered-off VMs to SSH with pinned host keys, then the project's Ansible.

Everything is real: the network namespace and bridge, libvirt VMs under qemu TCG, the emulated iDRACs
driving them over Redfish (one-time PXE, power, one-time Hdd), dnsmasq + nginx serving iPXE, the deploy
ramdisk built from Debian's kernel and busybox, the debootstrap image it writes, paramiko checking the
pinned host key, the DMI identity check, and the os-check stage (``playbooks/preflight.yml`` through the
rendered Ansible inventory, ansible-runner over SSH through a ProxyCommand into the namespace). On failure
the test prints the serial consoles, the DHCP and HTTP logs and the emulator/libvirt logs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.inventory import load_inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.provision.flow import PHASES, Artefacts, FlowSettings, ProvisionSession
from bootstrap.stages.base import RunOptions, StageContext, get_stage
from bootstrap.stages.oob import target_for
from rackctl_lab import paths
from rackctl_lab.environment import LabEnvironment
from redfish_tools.boot import boot_override
from redfish_tools.connection import BmcConnection
from redfish_tools.resources import Service
from tests.lab.vmlab import VmLab, admin_key, missing_prerequisites, write_inventory

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NODES = ["gpu-01", "gpu-02"]


@pytest.fixture(scope="module")
def ramdisk():
    reason = missing_prerequisites()
    if reason:
        pytest.skip(reason)
    from bootstrap.provision.ramdisk import build_ramdisk

    return build_ramdisk("lab")


def test_pxe_install_to_pinned_ssh_then_ansible(tmp_path: Path, ramdisk) -> None:
    from bootstrap.provision.image import build_image

    _, public = admin_key(tmp_path)
    lab = VmLab(tmp_path, write_inventory(tmp_path, NODES, public)).up()
    logs: dict[str, str] = {}
    try:
        # The lab's environment, as `rackctl --env lab` builds it: its network, relay and admin key.
        environment = LabEnvironment(lab.lab_dir)
        key = paths.admin_key(lab.lab_dir)
        # debootstrap once per machine (cached); re-assembled for the lab admin's key
        image = build_image([key.with_suffix(".pub").read_text().strip()])
        inventory = load_inventory(lab.inventory_path)
        targets = {h: target_for(inventory, inventory.node(h)) for h in NODES}
        session = ProvisionSession(
            inventory,
            NODES,
            state_dir=tmp_path / "state",
            artefacts=Artefacts(kernel=ramdisk.kernel, initrd=ramdisk.initrd, image=image.path),
            site=environment.boot_site(inventory),
            environment=environment,
            settings=FlowSettings(callback_timeout_s=900, ssh_timeout_s=600, ssh_user="root", ssh_key=key),
            targets=targets,
        )
        with session:
            runs = session.provision_all()
            logs = session.logs()
        dump = lab.dump(logs)
        for host in NODES:
            print(f"{host}: {runs[host].timings}")  # shown with -s or on failure: seconds per phase
            run = runs[host]
            assert run.ok, f"{host}: {run.message}\n{dump}"
            assert set(run.timings) == set(PHASES)
            with BmcConnection(targets[host]) as bmc:
                system = Service(bmc).system(fresh=True)
                # the machine that answered SSH is the one this BMC drives
                assert run.identity == {"uuid": system["UUID"].lower(), "serial": system["SKU"]}
                override = boot_override(bmc)
                assert override["target"] != "Pxe" or override["enabled"] == "Disabled"  # never network-first
        # The in-band seam: the os-check stage renders the inventory `rackctl inventory render` writes
        # (pxe address, root, the admin key, the state dir's pinned known_hosts, the lab's proxy) and
        # runs playbooks/preflight.yml through it; its lab thresholds come from group_vars/all/lab.yml.
        state = tmp_path / "state"
        with Journal(state) as journal:
            journal.register_nodes([n.hostname for n in inventory.nodes])
            for host in NODES:
                for to in (NodeState.DISCOVERED, NodeState.CONFIGURED, NodeState.PROVISIONING, NodeState.PROVISIONED):
                    journal.transition(host, to, "provisioned by the session above")
            run_id = journal.begin_run("e2e")
            ctx = StageContext(
                "os-check",
                inventory,
                list(NODES),
                journal,
                state,
                run_id,
                options=RunOptions(environment=environment),
            )
            result = get_stage("os-check").run(ctx)
            facts = {h: journal.latest_facts(h).get("os-check", {}) for h in NODES}
        assert result.ok, f"{result}\n{dump}"
        for host in NODES:
            report = facts[host]["preflight_report"]
            assert report["os"].startswith("Debian")
            assert report["product_uuid"].lower() == runs[host].identity["uuid"]
    finally:
        lab.down()
