"""Role ``head_mirror`` for real on a lab node standing in for a head node (the lab's own head is this
machine, never configured over SSH): nginx serves the signed repository, docker-registry serves images
over TLS from the lab CA, both installed from the mirror; a second run changes nothing.

Runs VMs: only under ``flock /tmp/rackctl-lab.lock``; installs its own single node like
tests/provision/test_e2e_lab.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from bootstrap.ansible_driver import run_playbook
from bootstrap.inband.render import write_ansible_inventory
from bootstrap.inventory import load_inventory
from bootstrap.mirror.images import push_images, required_images
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.provision.flow import Artefacts, FlowSettings, ProvisionSession
from bootstrap.stages.oob import target_for
from rackctl_lab import paths
from rackctl_lab.environment import LabEnvironment
from rackctl_lab.head_services import LabHeadServices, lab_ca
from rackctl_lab.idrac.certs import LabCA
from tests.lab.vmlab import VmLab, admin_key, missing_prerequisites, write_inventory
from tests.mirror.conftest import BuiltMirror

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NODE = "gpu-01"
PLAYBOOK = Path(__file__).with_name("head_probe.yml")


def _fetch(environment: LabEnvironment, url: str, cafile: Path | None = None) -> bytes:
    code = (
        "import ssl,sys,urllib.request as u;c=ssl.create_default_context(cafile=sys.argv[2]) if sys.argv[2] else None;"
    )
    code += "sys.stdout.buffer.write(u.urlopen(sys.argv[1],context=c,timeout=20).read())"
    argv = environment.wrap_command(["python3", "-c", code, url, str(cafile or "")])
    return subprocess.run(argv, capture_output=True, check=True).stdout


def test_head_mirror_serves_the_repository_and_the_registry(built_mirror: BuiltMirror, tmp_path: Path) -> None:
    reason = missing_prerequisites() or ("" if shutil.which("skopeo") else "skopeo missing")
    if reason:
        pytest.skip(reason)
    from bootstrap.provision.image import build_image
    from bootstrap.provision.ramdisk import build_ramdisk

    state = tmp_path / "state"
    shutil.copytree(built_mirror.layout.root, MirrorLayout(state).root, ignore=shutil.ignore_patterns("S.*"))
    _, public = admin_key(tmp_path)
    lab = VmLab(tmp_path, write_inventory(tmp_path, [NODE], public)).up()
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
        node_ip = str(inventory.node(NODE).interface_on("pxe").ip)
        leaf = lab_ca(lab.lab_dir).issue("registry", node_ip, tmp_path / "tls")
        ca_file = lab_ca(lab.lab_dir).cert_file
        with LabHeadServices(inventory, state, lab.lab_dir, environment.network, registry=False):
            hosts = write_ansible_inventory(inventory, state, environment)
            site = json.loads((hosts.parent / "group_vars/all/site_services.yml").read_text().split("\n", 1)[1])
            server = {
                **site["rackctl_mirror_server"],
                "address": node_ip,
                "registry_port": 5000,
                "registry_cert_file": str(leaf.cert_file),
                "registry_key_file": str(leaf.key_file),
                "registry_ca_file": str(ca_file),
            }
            (hosts.parent / "host_vars").mkdir()
            (hosts.parent / "host_vars" / f"{NODE}.yml").write_text(json.dumps({"rackctl_mirror_server": server}))
            started = time.monotonic()
            first = run_playbook(str(PLAYBOOK), hosts, limit=[NODE], work_dir=tmp_path / "run1")
            assert first.ok, first.output_tail
            second = run_playbook(str(PLAYBOOK), hosts, limit=[NODE], work_dir=tmp_path / "run2")
            assert second.ok, second.output_tail
            print(f"head_mirror: two runs {time.monotonic() - started:.0f}s")
        assert second.hosts[NODE].changed == 0, second.output_tail
        # the node's nginx serves the same signed index the controller built (the lab's nginx is stopped)
        served = _fetch(environment, f"http://{node_ip}:8081/dists/bookworm/InRelease")
        assert served == (MirrorLayout(state).repo / "dists/bookworm/InRelease").read_bytes()
        # its registry answers over TLS the lab CA verifies, and takes the checks' image
        assert _fetch(environment, f"https://{node_ip}:5000/v2/", ca_file) == b"{}"
        registry = {"address": f"{node_ip}:5000", "ca_pem": ca_file.read_text()}
        pushed = push_images(MirrorLayout(state), required_images(inventory), registry, wrap=environment.wrap_command)
        assert [p["ok"] for p in pushed] == [True]
        other_ca = LabCA(tmp_path / "other-ca").cert_file
        with pytest.raises(subprocess.CalledProcessError) as exc:  # another CA does not verify it
            _fetch(environment, f"https://{node_ip}:5000/v2/", other_ca)
        assert b"CERTIFICATE_VERIFY_FAILED" in exc.value.stderr
    finally:
        lab.down()
