"""Role ``head_mirror`` on a real lab node standing in for a head node (the lab's own head is this
machine, never configured over SSH): nginx serves a signed repository (a small one the test builds) and
docker-registry serves images over TLS from the lab CA, both installed from the head node's mirror; a
second run changes nothing.

It works on THE installed lab of ``tests/inband`` (``served_lab``: the mirror of every role's packages,
built by the controller and served by the lab's head services; ``first_run``: the network stage applied),
on gpu-01. The module runs after the other in-band modules (file order): the node keeps nginx and the
registry afterwards, which no later test of the package looks at.

That apt on the nodes sees only the mirror and installs from it is proven by the network stage's tests
(``test_network_stage_lab.py``), on the same nodes.

Runs VMs: only under ``flock /tmp/rackctl-lab.lock`` (the ``installed_lab`` fixture takes it).
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
from bootstrap.mirror.build import build_mirror
from bootstrap.mirror.images import push_images, required_images
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import Manifest, build_manifest, parse_request
from bootstrap.resources import roles_dir
from tests.installed_lab import ServedLab

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NODE = "gpu-01"
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


def test_head_mirror_on_a_node_serves_the_repository_and_the_registry(
    served_lab: ServedLab, first_run, tmp_path: Path
) -> None:
    from rackctl_lab.head_services import lab_ca
    from rackctl_lab.idrac.certs import LabCA

    lab = served_lab.lab
    inventory, environment = lab.inventory, lab.environment
    node_ip = str(inventory.node(NODE).interface_on("pxe").ip)
    ca = lab_ca(lab.lab_dir)
    leaf = ca.issue("registry", node_ip, tmp_path / "tls")
    # a copy of the rendered Ansible inventory, so the node's extra host vars reach no other test
    rendered = write_ansible_inventory(inventory, lab.state_dir, environment).parent
    shutil.copytree(rendered, tmp_path / "inventory")
    hosts = tmp_path / "inventory" / "hosts.yml"
    site = json.loads((hosts.parent / "group_vars/all/site_services.yml").read_text().split("\n", 1)[1])
    # the repository it serves: a small one of its own (one package), not the session's mirror of every
    # role's packages: what the role does with an archive does not depend on its size, and unpacking and
    # comparing 90 MB under TCG twice cost minutes (the node's apt still installs from the session's mirror)
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
