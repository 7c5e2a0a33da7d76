"""``rackctl redeploy`` of a lab VM end to end: installed over PXE by ``up``, then reinstalled by ``redeploy``.

Everything is real (as in ``tests/provision/test_e2e_lab.py``): the network namespace, a libvirt VM under
qemu TCG, its emulated iDRAC, dnsmasq + nginx, the deploy ramdisk and the debootstrap image, pinned SSH and
the os-check playbook. Run it only under ``flock /tmp/rackctl-lab.lock`` (the lab's names are fixed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.journal.store import Journal
from rackctl_lab import paths
from tests.lab.vmlab import VmLab, admin_key, missing_prerequisites, write_inventory

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.vm]

NODE = "gpu-01"


def invoke(env: dict[str, str], *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["--env", "lab", *args, "--json"], env=env)
    try:
        return result.exit_code, json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {result.exit_code}): {result.output}") from None


def test_redeploy_reinstalls_a_lab_vm_over_pxe_and_brings_it_back(tmp_path: Path) -> None:
    reason = missing_prerequisites()
    if reason:
        pytest.skip(reason)
    from bootstrap.provision.image import build_image
    from bootstrap.provision.ramdisk import build_ramdisk

    _, public = admin_key(tmp_path)
    lab = VmLab(tmp_path, write_inventory(tmp_path, [NODE], public)).up()
    try:
        key = paths.admin_key(lab.lab_dir)
        ramdisk = build_ramdisk("lab")
        image = build_image([key.with_suffix(".pub").read_text().strip()])
        state = tmp_path / "state"
        artefacts = state / "artefacts"
        artefacts.mkdir(parents=True)
        for name, source in (("vmlinuz", ramdisk.kernel), ("initrd.img", ramdisk.initrd), ("disk.raw.gz", image.path)):
            (artefacts / name).symlink_to(source)
        env = {"RACKCTL_LAB_DIR": str(lab.lab_dir)}
        common = ("-i", str(lab.inventory_path), "--state-dir", str(state))
        stages = "preflight,discover,bios,provision,os-check"
        code, up = invoke(env, "up", "--limit", NODE, "--stages", stages, *common, "--yes")
        assert code == 0, f"{up}\n{lab.dump()}"
        with Journal(state, readonly=True) as journal:
            first = journal.latest_facts(NODE)["provision"]["dmi"]
            epoch = journal.status(NODE).epoch

        # --until os-check: the network stage needs the head node's mirror, which this test does not build
        code, done = invoke(env, "redeploy", NODE, "--until", "os-check", *common, "--yes")
        assert code == 0, f"{done}\n{lab.dump()}"  # reinstalled, brought through os-check
        assert done["state"] == "provisioned"
        statuses = {s["name"]: s["status"] for s in done["run"]["stages"]}
        assert statuses["provision"] == "completed" and statuses["os-check"] == "completed"
        assert "network" not in statuses
        with Journal(state, readonly=True) as journal:
            installs = [
                s
                for s in journal.steps(node=NODE)
                if s.stage == "provision" and s.step == "install" and s.status == "completed"
            ]
            assert [s.epoch for s in installs] == [epoch, epoch + 1]  # once by `up`, once by the redeploy
            assert journal.latest_facts(NODE)["provision"]["dmi"] == first  # the same machine came back
            assert journal.latest_facts(NODE)["redeploy"]["status"] == "completed"
    finally:
        lab.down()
