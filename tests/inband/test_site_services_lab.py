"""Role ``head_mirror`` on a node standing in for a head node (the lab's own head is this machine, never
configured over SSH): nginx serves a signed repository (a small one the test builds) and docker-registry
serves images over TLS from the lab CA, both installed from the head node's mirror; a second run changes
nothing.

The node is a NATIVE one (:mod:`rackctl_lab.nspawn`: the lab image's root tree booted by its own systemd,
on the installed lab's PXE bridge, reached over SSH through the same relay and pinned known_hosts as the
VMs). A head node is an R660 with no GPU and nothing about the role depends on the node being a VM, while
under qemu TCG the role's two runs cost six minutes (359 s in CI's last full run; each Ansible task 4-10 s
there, see docs/lab-kubernetes.md). The apt it installs from is the session's mirror, served by the lab's
head services (``served_lab``); that apt on the installed VMs sees only that mirror is proven by the
network stage's tests (``test_network_stage_lab.py``).

Runs a native node on the installed lab: only under ``flock /tmp/rackctl-lab.lock`` (the
``installed_lab`` fixture takes it).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bootstrap.ansible_driver import run_playbook
from bootstrap.inband.render import write_ansible_inventory
from bootstrap.mirror.build import build_mirror
from bootstrap.mirror.images import push_images, required_images
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import Manifest, build_manifest, parse_request
from bootstrap.provision.hostkeys import ensure_host_key, write_known_hosts
from bootstrap.provision.image import debootstrap_tree, default_mirror
from bootstrap.provision.ramdisk import cache_root
from bootstrap.resources import roles_dir
from tests.installed_lab import ServedLab

pytestmark = [pytest.mark.lab, pytest.mark.slow]

#: the stand-in head node: a native node with an address of its own on the PXE network (no inventory node has it)
NODE = "head-probe"
ADDRESS = "10.200.0.250"
#: an inventory node whose rendered host entry it takes (only its connection variables are replaced)
TEMPLATE = "gpu-01"
PLAYBOOK = Path(__file__).parent / "head_probe.yml"


def _fetch(environment, url: str, cafile: Path | None = None) -> bytes:
    """``url``'s body, fetched from the lab's namespace (verifying TLS against ``cafile`` when given)."""
    code = (
        "import ssl,sys,urllib.request as u;"
        "c=ssl.create_default_context(cafile=sys.argv[2]) if sys.argv[2] else None;"
        "sys.stdout.buffer.write(u.urlopen(sys.argv[1],context=c,timeout=20).read())"
    )
    argv = environment.wrap_command(["python3", "-c", code, url, str(cafile or "")])
    return subprocess.run(argv, capture_output=True, check=True).stdout


@pytest.fixture
def head_node(served_lab: ServedLab, tmp_path: Path) -> Iterator[Path]:
    """The native stand-in head node, running; yields a copy of the rendered Ansible inventory naming it."""
    from rackctl_lab import nspawn

    lab = served_lab.lab
    inventory, environment = lab.inventory, lab.environment
    network = environment.network  # type: ignore[attr-defined]
    assert ADDRESS not in {str(n.interface_on("pxe").ip) for n in inventory.nodes if n.interface_on("pxe")}
    key = environment.admin_key(inventory)
    assert key is not None
    host_key = ensure_host_key(tmp_path / "state", NODE)
    known_hosts = write_known_hosts(tmp_path / "known_hosts", {NODE: (host_key, [ADDRESS])})
    # a copy of the rendered Ansible inventory with the node in it, so that its vars reach no other test
    rendered = write_ansible_inventory(inventory, lab.state_dir, environment).parent
    shutil.copytree(rendered, tmp_path / "inventory")
    hosts = tmp_path / "inventory" / "hosts.yml"
    document = json.loads(hosts.read_text().split("\n", 1)[1])
    access = dataclasses.replace(lab.access(TEMPLATE), hostname=NODE, address=ADDRESS, known_hosts=known_hosts)
    document["all"]["hosts"][NODE] = {**document["all"]["hosts"][TEMPLATE], **access.ansible_vars()}
    hosts.write_text(json.dumps(document, indent=2))
    tree = debootstrap_tree("bookworm", default_mirror(), cache_root())
    node = nspawn.NativeNode(NODE, f"{ADDRESS}/24", tmp_path / "node")
    try:
        nspawn.start(node, tree, network, authorized_keys=key.with_suffix(".pub").read_text(),
                     host_key=host_key.private_path)  # fmt: skip
        yield hosts
    finally:
        nspawn.stop(node)


def test_head_mirror_on_a_node_serves_the_repository_and_the_registry(
    served_lab: ServedLab, head_node: Path, tmp_path: Path
) -> None:
    from rackctl_lab.head_services import lab_ca
    from rackctl_lab.idrac.certs import LabCA

    lab = served_lab.lab
    inventory, environment = lab.inventory, lab.environment
    node_ip = ADDRESS
    ca = lab_ca(lab.lab_dir)
    leaf = ca.issue("registry", node_ip, tmp_path / "tls")
    hosts = head_node
    site = json.loads((hosts.parent / "group_vars/all/site_services.yml").read_text().split("\n", 1)[1])
    # the repository it serves: a small one of its own (one package), not the session's mirror of every
    # role's packages: what the role does with an archive does not depend on its size (the node's apt
    # still installs from the session's mirror)
    small = MirrorLayout(tmp_path / "small")
    full = build_manifest(inventory, roles_dir())
    request = parse_request("tzdata", "tests", "tests: a repository of one package")
    build_mirror(small, Manifest(full.suite, full.components, [request]), key_uid="rackctl small <small@lab.test>")
    server = {
        **site["rackctl_mirror_server"],
        "archive": str(small.archive),
        "revision": small.revision(),
        "address": node_ip,
        "registry_port": 5000,
        "registry_cert_file": str(leaf.cert_file),
        "registry_key_file": str(leaf.key_file),
        "registry_ca_file": str(ca.cert_file),
    }
    (hosts.parent / "host_vars").mkdir(exist_ok=True)
    (hosts.parent / "host_vars" / f"{NODE}.yml").write_text(json.dumps({"rackctl_mirror_server": server}))

    started = time.monotonic()
    first = run_playbook(str(PLAYBOOK), hosts, limit=[NODE], work_dir=tmp_path / "run1")
    assert first.ok, first.output_tail
    assert first.hosts[NODE].changed > 0
    second = run_playbook(str(PLAYBOOK), hosts, limit=[NODE], work_dir=tmp_path / "run2")
    assert second.ok, second.output_tail
    assert second.hosts[NODE].changed == 0, second.output_tail  # idempotent
    print(f"head_mirror on {NODE}: two runs in {time.monotonic() - started:.0f}s")

    # the node's nginx serves the signed index the controller built
    served = _fetch(environment, f"http://{node_ip}:8081/dists/bookworm/InRelease")
    assert served == (small.repo / "dists/bookworm/InRelease").read_bytes()
    # its registry answers over TLS the lab CA verifies, and takes the checks' image
    assert _fetch(environment, f"https://{node_ip}:5000/v2/", ca.cert_file) == b"{}"
    registry = {"address": f"{node_ip}:5000", "ca_pem": ca.cert_file.read_text()}
    layout = MirrorLayout(lab.state_dir)
    pushed = push_images(layout, required_images(inventory), registry, wrap=environment.wrap_command)
    assert [p["ok"] for p in pushed] == [True], pushed
    other_ca = LabCA(tmp_path / "other-ca").cert_file
    with pytest.raises(subprocess.CalledProcessError) as exc:  # another CA does not verify it
        _fetch(environment, f"https://{node_ip}:5000/v2/", other_ca)
    assert b"CERTIFICATE_VERIFY_FAILED" in exc.value.stderr
