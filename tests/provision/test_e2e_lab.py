"""End to end on the real lab: two powered-off VMs to SSH with pinned host keys, then the project's Ansible.

Everything is real: the network namespace and bridge, libvirt VMs under qemu TCG, the emulated iDRACs
driving them over Redfish (one-time PXE, power, one-time Hdd), dnsmasq + nginx serving iPXE, the deploy
ramdisk built from Debian's kernel and busybox, the debootstrap image it writes, paramiko checking the
pinned host key, the DMI identity check, and ``playbooks/preflight.yml`` run by ansible-runner over SSH
(through a ProxyCommand into the namespace). On failure the test prints the serial consoles, the DHCP and
HTTP logs and the emulator/libvirt logs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bootstrap.ansible_driver import run_playbook
from bootstrap.inventory import load_inventory
from bootstrap.provision.flow import PHASES, Artefacts, FlowSettings, ProvisionSession
from bootstrap.stages.oob import target_for
from rackctl_lab.environment import LabEnvironment
from rackctl_lab.nsrelay import proxy_command
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

    key, public = admin_key(tmp_path)
    image = build_image([public])  # debootstrap once per machine (cached); re-assembled for this key
    lab = VmLab(tmp_path, write_inventory(tmp_path, NODES, public)).up()
    logs: dict[str, str] = {}
    try:
        inventory = load_inventory(lab.inventory_path)
        targets = {h: target_for(inventory, inventory.node(h)) for h in NODES}
        session = ProvisionSession(
            inventory,
            NODES,
            state_dir=tmp_path / "state",
            artefacts=Artefacts(kernel=ramdisk.kernel, initrd=ramdisk.initrd, image=image.path),
            site=LabEnvironment(lab.lab_dir).boot_site(inventory),
            environment=LabEnvironment(lab.lab_dir),
            settings=FlowSettings(callback_timeout_s=900, ssh_timeout_s=600, ssh_user="root", ssh_key=key),
            targets=targets,
        )
        with session:
            runs = session.provision_all()
            logs = session.logs()
            known_hosts = session.tree.known_hosts
            ips = {h: session.tree.nodes[h].ip for h in NODES}
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
        hosts = {
            "all": {
                "hosts": {h: {"ansible_host": ips[h], "ansible_user": "root"} for h in NODES},
                "vars": {"ansible_python_interpreter": "/usr/bin/python3"},
            }
        }
        hosts_file = tmp_path / "hosts.yml"
        hosts_file.write_text(yaml.safe_dump(hosts))
        result = run_playbook(
            "preflight.yml",
            hosts_file,
            private_key=key,
            known_hosts=known_hosts,
            ssh_extra_args=f'-o "ProxyCommand={proxy_command(lab.network.name)}"',
            # lab VMs have 1 GiB of memory (a little less once the kernel took its share) and a 1 GiB
            # image (~0.5 GB free on /): the role's production thresholds are lowered, every check still runs
            extravars={"preflight_min_memory_mb": 512, "preflight_min_root_free_gb": 0},
            work_dir=tmp_path / "ansible",
        )
        assert result.ok, f"{result.as_dict()}\n{dump}"
        for host in NODES:
            report = result.facts[host]["preflight"]
            assert report["os"].startswith("Debian")
            assert report["product_uuid"].lower() == runs[host].identity["uuid"]
    finally:
        lab.down()
