"""On a real lab node (PXE-installed VM, real sshd, real ansible-runner): the package_source role points apt
at the head node's mirror only, a package installs from it, and a second run changes nothing.

Runs VMs: only under ``flock /tmp/rackctl-lab.lock``. Until the shared ``installed_lab`` fixture lands, this
test installs its own single node the way tests/provision/test_e2e_lab.py does.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from bootstrap.ansible_driver import run_playbook
from bootstrap.inband.render import write_ansible_inventory
from bootstrap.inventory import load_inventory
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.provision.flow import Artefacts, FlowSettings, ProvisionSession
from bootstrap.stages.oob import target_for
from rackctl_lab import paths
from rackctl_lab.environment import LabEnvironment
from rackctl_lab.head_services import LabHeadServices
from tests.lab.vmlab import VmLab, admin_key, missing_prerequisites, write_inventory
from tests.mirror.conftest import BuiltMirror

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NODE = "gpu-01"
PROBE = Path(__file__).with_name("probe.yml")


def test_a_lab_node_installs_from_the_mirror_and_apt_sees_only_it(built_mirror: BuiltMirror, tmp_path: Path) -> None:
    reason = missing_prerequisites()
    if reason:
        pytest.skip(reason)
    from bootstrap.provision.image import build_image
    from bootstrap.provision.ramdisk import build_ramdisk

    state = tmp_path / "state"
    shutil.copytree(built_mirror.layout.root, MirrorLayout(state).root, ignore=shutil.ignore_patterns("S.*"))
    _, public = admin_key(tmp_path)
    lab = VmLab(tmp_path, write_inventory(tmp_path, [NODE], public)).up()
    started = time.monotonic()
    try:
        environment = LabEnvironment(lab.lab_dir)
        key = paths.admin_key(lab.lab_dir)
        image = build_image([key.with_suffix(".pub").read_text().strip()])
        ramdisk = build_ramdisk("lab")
        inventory = load_inventory(lab.inventory_path)
        session = ProvisionSession(
            inventory,
            [NODE],
            state_dir=state,
            artefacts=Artefacts(kernel=ramdisk.kernel, initrd=ramdisk.initrd, image=image.path),
            site=environment.boot_site(inventory),
            environment=environment,
            settings=FlowSettings(callback_timeout_s=900, ssh_timeout_s=600, ssh_user="root", ssh_key=key),
            targets={NODE: target_for(inventory, inventory.node(NODE))},
        )
        with session:
            run = session.provision_all()[NODE]
        assert run.ok, f"{run.message}\n{lab.dump(session.logs())}"
        installed = time.monotonic()
        with LabHeadServices(inventory, state, lab.lab_dir, environment.network, registry=False) as services:
            hosts = write_ansible_inventory(inventory, state, environment)
            first = run_playbook(
                str(PROBE), hosts, limit=[NODE], facts_var="mirror_probe_report", work_dir=tmp_path / "run1"
            )
            assert first.ok, first.output_tail
            second = run_playbook(str(PROBE), hosts, limit=[NODE], work_dir=tmp_path / "run2")
            assert second.ok, second.output_tail
            served = (services.run_dir / "mirror-access.log").read_text()
        print(f"install {installed - started:.0f}s, two playbook runs {time.monotonic() - installed:.0f}s")
        report = first.facts[NODE]
        assert report["hello"] == "Hello, world!"
        sources = [line.split()[1] for line in report["policy"].splitlines() if " http" in line]
        assert sources and all(s == services.mirror_uri.rstrip("/") for s in sources), report["policy"]
        assert first.hosts[NODE].changed > 0
        assert second.hosts[NODE].changed == 0, second.output_tail  # idempotent
        assert "/pool/main/h/hello/hello_" in served  # the package came over the head node's nginx
    finally:
        lab.down()
