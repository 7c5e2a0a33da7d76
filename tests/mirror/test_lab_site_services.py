"""The site services on a real lab node (PXE-installed VM, real sshd, real ansible-runner), one node for
the module:

- role ``package_source`` points apt at the head node's mirror only; a package installs from it; a
  second run changes nothing;
- role ``head_mirror`` on the same node standing in for a head node (the lab's own head is this machine,
  never configured over SSH): nginx serves the signed repository, docker-registry serves images over TLS
  from the lab CA, both installed from the mirror; a second run changes nothing.

Runs VMs: only under ``flock /tmp/rackctl-lab.lock``. Until the shared ``installed_lab`` fixture lands,
the module installs its own node the way tests/provision/test_e2e_lab.py does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bootstrap.ansible_driver import run_playbook
from bootstrap.inband.render import write_ansible_inventory
from bootstrap.inventory import load_inventory
from bootstrap.inventory.models import Inventory
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
HERE = Path(__file__).parent


@dataclass
class LabNode:
    lab: VmLab
    environment: LabEnvironment
    inventory: Inventory
    state: Path
    ip: str


@pytest.fixture(scope="module")
def lab_node(built_mirror: BuiltMirror, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabNode]:
    reason = missing_prerequisites() or ("" if shutil.which("skopeo") else "skopeo missing")
    if reason:
        pytest.skip(reason)
    from bootstrap.provision.image import build_image
    from bootstrap.provision.ramdisk import build_ramdisk

    folder = tmp_path_factory.mktemp("site-lab")
    state = folder / "state"
    shutil.copytree(built_mirror.layout.root, MirrorLayout(state).root, ignore=shutil.ignore_patterns("S.*"))
    _, public = admin_key(folder)
    lab = VmLab(folder, write_inventory(folder, [NODE], public)).up()
    try:
        started = time.monotonic()
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
        print(f"node installed in {time.monotonic() - started:.0f}s")
        yield LabNode(lab, environment, inventory, state, str(inventory.node(NODE).interface_on("pxe").ip))
    finally:
        lab.down()


def _twice(playbook: str, hosts: Path, work: Path, facts_var: str | None = None) -> tuple:
    started = time.monotonic()
    first = run_playbook(str(HERE / playbook), hosts, limit=[NODE], facts_var=facts_var, work_dir=work / "run1")
    assert first.ok, first.output_tail
    second = run_playbook(str(HERE / playbook), hosts, limit=[NODE], work_dir=work / "run2")
    assert second.ok, second.output_tail
    print(f"{playbook}: two runs in {time.monotonic() - started:.0f}s")
    return first, second


def test_a_lab_node_installs_from_the_mirror_and_apt_sees_only_it(lab_node: LabNode, tmp_path: Path) -> None:
    inventory, state, environment = lab_node.inventory, lab_node.state, lab_node.environment
    with LabHeadServices(inventory, state, lab_node.lab.lab_dir, environment.network, registry=False) as services:
        hosts = write_ansible_inventory(inventory, state, environment)
        first, second = _twice("probe.yml", hosts, tmp_path, "mirror_probe_report")
        served = (services.run_dir / "mirror-access.log").read_text()
    report = first.facts[NODE]
    assert report["hello"] == "Hello, world!"
    sources = [line.split()[1] for line in report["policy"].splitlines() if " http" in line]
    assert sources and all(s == services.mirror_uri.rstrip("/") for s in sources), report["policy"]
    assert first.hosts[NODE].changed > 0
    assert second.hosts[NODE].changed == 0, second.output_tail  # idempotent
    assert "/pool/main/h/hello/hello_" in served  # the package came over the head node's nginx


def _fetch(environment: LabEnvironment, url: str, cafile: Path | None = None) -> bytes:
    code = (
        "import ssl,sys,urllib.request as u;"
        "c=ssl.create_default_context(cafile=sys.argv[2]) if sys.argv[2] else None;"
        "sys.stdout.buffer.write(u.urlopen(sys.argv[1],context=c,timeout=20).read())"
    )
    argv = environment.wrap_command(["python3", "-c", code, url, str(cafile or "")])
    return subprocess.run(argv, capture_output=True, check=True).stdout


def test_head_mirror_serves_the_repository_and_the_registry(lab_node: LabNode, tmp_path: Path) -> None:
    inventory, state, environment, node_ip = lab_node.inventory, lab_node.state, lab_node.environment, lab_node.ip
    ca = lab_ca(lab_node.lab.lab_dir)
    leaf = ca.issue("registry", node_ip, tmp_path / "tls")
    with LabHeadServices(inventory, state, lab_node.lab.lab_dir, environment.network, registry=False):
        hosts = write_ansible_inventory(inventory, state, environment)
        site = json.loads((hosts.parent / "group_vars/all/site_services.yml").read_text().split("\n", 1)[1])
        server = {
            **site["rackctl_mirror_server"],
            "address": node_ip,
            "registry_port": 5000,
            "registry_cert_file": str(leaf.cert_file),
            "registry_key_file": str(leaf.key_file),
            "registry_ca_file": str(ca.cert_file),
        }
        (hosts.parent / "host_vars").mkdir()
        (hosts.parent / "host_vars" / f"{NODE}.yml").write_text(json.dumps({"rackctl_mirror_server": server}))
        _, second = _twice("head_probe.yml", hosts, tmp_path)
    assert second.hosts[NODE].changed == 0, second.output_tail
    # the node's nginx serves the signed index the controller built (the lab's own nginx is stopped now)
    served = _fetch(environment, f"http://{node_ip}:8081/dists/bookworm/InRelease")
    assert served == (MirrorLayout(state).repo / "dists/bookworm/InRelease").read_bytes()
    # its registry answers over TLS the lab CA verifies, and takes the checks' image
    assert _fetch(environment, f"https://{node_ip}:5000/v2/", ca.cert_file) == b"{}"
    registry = {"address": f"{node_ip}:5000", "ca_pem": ca.cert_file.read_text()}
    pushed = push_images(MirrorLayout(state), required_images(inventory), registry, wrap=environment.wrap_command)
    assert [p["ok"] for p in pushed] == [True]
    other_ca = LabCA(tmp_path / "other-ca").cert_file
    with pytest.raises(subprocess.CalledProcessError) as exc:  # another CA does not verify it
        _fetch(environment, f"https://{node_ip}:5000/v2/", other_ca)
    assert b"CERTIFICATE_VERIFY_FAILED" in exc.value.stderr
