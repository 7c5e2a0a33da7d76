"""``rackctl redeploy`` of a lab VM end to end: a node of THE installed lab reinstalled over PXE and brought back.

Everything is real (as in ``tests/provision/test_e2e_lab.py``): the network namespace, a libvirt VM under
qemu TCG, its emulated iDRAC, dnsmasq + nginx, the deploy ramdisk and the debootstrap image, pinned SSH and
the os-check playbook. It works on the session's installed lab (``tests/installed_lab.py``), whose first
install of the node it reinstalls, instead of booting and installing a lab of its own first; it runs last
of that lab's modules (:data:`tests.installed_lab.LAST`), because it wipes the node the others configured.
The provision stage's install that ``rackctl up`` runs is the one ``redeploy`` runs here (the stages from
``provision`` on, :func:`bootstrap.day2.redeploy.stages_after`).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.journal.store import Journal
from tests.installed_lab import IMAGE_KERNEL_ARGS, InstalledLab

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.vm]

NODE = "gpu-01"


def invoke(env: dict[str, str], *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["--env", "lab", *args, "--json"], env=env)
    try:
        return result.exit_code, json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {result.exit_code}): {result.output}") from None


def test_redeploy_reinstalls_a_lab_vm_over_pxe_and_brings_it_back(installed_lab: InstalledLab) -> None:
    from bootstrap.provision.image import build_image
    from bootstrap.provision.ramdisk import build_ramdisk
    from rackctl_lab import paths

    lab = installed_lab
    first = lab.runs[NODE].identity  # the machine the session's install found over SSH
    key = paths.admin_key(lab.lab_dir)
    ramdisk = build_ramdisk("lab")  # cached: the very artefacts the session's install used
    image = build_image([key.with_suffix(".pub").read_text().strip()], kernel_args=IMAGE_KERNEL_ARGS)
    artefacts = lab.state_dir / "artefacts"
    artefacts.mkdir(parents=True, exist_ok=True)
    for name, source in (("vmlinuz", ramdisk.kernel), ("initrd.img", ramdisk.initrd), ("disk.raw.gz", image.path)):
        (artefacts / name).unlink(missing_ok=True)
        (artefacts / name).symlink_to(source)
    boot_before = lab.ssh(NODE, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    lab.ssh(NODE, "touch /root/written-before-the-redeploy")
    with Journal(lab.state_dir, readonly=True) as journal:
        epoch = journal.status(NODE).epoch

    env = {"RACKCTL_LAB_DIR": str(lab.lab_dir)}
    common = ("-i", str(lab.inventory_path), "--state-dir", str(lab.state_dir))
    # --until os-check: what the network stage adds is proven on this lab by tests/inband
    code, done = invoke(env, "redeploy", NODE, "--until", "os-check", *common, "--yes")
    assert code == 0, f"{done}\n{lab.dump}"  # reinstalled, brought through os-check
    assert done["state"] == "provisioned"
    statuses = {s["name"]: s["status"] for s in done["run"]["stages"]}
    assert statuses["provision"] == "completed" and statuses["os-check"] == "completed"
    assert "network" not in statuses
    with Journal(lab.state_dir, readonly=True) as journal:
        installs = [
            s
            for s in journal.steps(node=NODE)
            if s.stage == "provision" and s.step == "install" and s.status == "completed"
        ]
        assert [s.epoch for s in installs] == [epoch + 1]  # the redeploy's, in the node's next epoch
        assert journal.latest_facts(NODE)["provision"]["dmi"] == first  # the same machine came back
        assert journal.latest_facts(NODE)["redeploy"]["status"] == "completed"
    # a fresh disk booted: another boot, and nothing written on the old one is left
    assert lab.ssh(NODE, "cat /proc/sys/kernel/random/boot_id").stdout.strip() != boot_before
    assert lab.ssh(NODE, "test -e /root/written-before-the-redeploy", check=False).returncode == 1
