"""The lab's own Kubernetes packages (``rackctl_lab.components.debs``) as the Kubernetes upstream of a real
``rackctl mirror build``: the air-gapped path a site takes from pkgs.k8s.io, with real binaries inside.

The lab's builds of kubeadm, kubelet, kubectl, crictl and the CNI plugins at the inventory's release
(``rackctl-lab components``, cached) are packaged with dpkg-deb, indexed and signed with the lab's key, served
over HTTP on loopback and named in ``site_services.packages.upstreams.kubernetes`` (``uri``, ``key_file``) as
a site names its staging copy. The inventory's pod network is Flannel's, so the mirror carries kubernetes-cni.
The mirror build is the product's; what comes out of it is run. The mirror's rules with an upstream (the exact
version, a wrong key, a missing version) are tested with a stand-in upstream that can hold two versions:
``test_upstream_build.py``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bootstrap.inventory import load_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.mirror.apt_fetch import PrivateApt, Upstream
from bootstrap.mirror.build import BuildResult, build_mirror
from bootstrap.mirror.check import check_mirror
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import build_manifest
from bootstrap.mirror.upstreams import CNI_PACKAGE
from rackctl_lab.components import debs
from rackctl_lab.components.build import release_for
from tests.conftest import built_components
from tests.mirror.conftest import gpgv_with_site_key, lab_inventory_copy, mirror_roles, tools_missing
from tests.mirror.standin_upstream import serve
from tests.mirror.test_upstream_build import standin_inventory

pytestmark = pytest.mark.slow

KUBERNETES = ("kubeadm", "kubelet", "kubectl")


@dataclass
class LabUpstream:
    """The lab's repository, the inventory naming it, and the mirror built from it."""

    repository: debs.LabRepository
    uri: str
    version: str
    inventory: Inventory
    layout: MirrorLayout
    result: BuildResult
    manifest_ok: bool


@pytest.fixture(scope="module")
def lab_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabUpstream]:
    reason = tools_missing() or debs.tools_missing()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("lab-upstream")
    version = load_inventory(lab_inventory_copy(base / "probe")).cluster.resolved_versions().kubernetes
    release = release_for(version)
    repository = debs.repository(release, built_components(debs.PROGRAMS))
    with serve(repository.root) as uri:
        path = standin_inventory(base / "site", uri, repository.public_key)
        path.write_text(path.read_text() + "\nkubernetes:\n  cni: flannel\n")
        inventory = load_inventory(path)
        layout = MirrorLayout(base / "state")
        manifest = build_manifest(inventory, mirror_roles(base / "roles"))
        result = build_mirror(layout, manifest, key_uid="rackctl test mirror <mirror@lab.rackctl.test>")
        ok = check_mirror(layout, manifest).ok
        yield LabUpstream(repository, uri, version, inventory, layout, result, ok)


def test_the_mirror_takes_the_lab_packages_at_exactly_the_inventorys_release(lab_upstream: LabUpstream) -> None:
    up = lab_upstream
    wanted = f"{up.version}-{debs.REVISION}"
    lock, origins = up.result.lock, up.result.origins
    assert {n: lock[n] for n in KUBERNETES} == dict.fromkeys(KUBERNETES, wanted)
    assert lock["cri-tools"] == up.repository.packages["cri-tools"]  # kubeadm's dependency came with it
    assert {n for n, o in origins.items() if o == "kubernetes"} == {*KUBERNETES, "cri-tools", CNI_PACKAGE}
    assert lock[CNI_PACKAGE] == up.repository.packages[CNI_PACKAGE]  # the newest (the only) kubernetes-cni
    assert {"conntrack", "socat", "ethtool"} <= set(lock) and origins["conntrack"] == "debian"  # kubelet's
    assert up.manifest_ok  # `rackctl mirror check` finds every request
    verify = gpgv_with_site_key(up.layout, up.layout.repo / "dists/bookworm/InRelease")
    assert verify.returncode == 0, verify.stderr
    assert up.repository.fingerprint not in verify.stderr  # re-signed by the site key, not the lab's upstream key


def test_the_mirrored_packages_carry_the_real_programs_of_that_release(
    lab_upstream: LabUpstream, tmp_path: Path
) -> None:
    """Unpacked from the mirror's pool as dpkg would, the programs run and report the inventory's release."""
    up = lab_upstream
    root = tmp_path / "root"
    for name in (*KUBERNETES, "cri-tools", CNI_PACKAGE):
        deb = next(up.layout.repo.rglob(f"{name}_*_amd64.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)

    def run(*argv: str) -> str:
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()

    assert run(str(root / "usr/bin/kubeadm"), "version", "-o", "short") == f"v{up.version}"
    assert run(str(root / "usr/bin/kubelet"), "--version") == f"Kubernetes v{up.version}"
    assert f"v{up.version}" in run(str(root / "usr/bin/kubectl"), "version", "--client")
    release = release_for(up.version)
    assert run(str(root / "usr/bin/crictl"), "--version") == f"crictl version {release.cri_tools.removeprefix('v')}"
    # the kubelet's unit reads what kubeadm writes (its flags file and config), as a kubeadm node needs
    dropin = (root / "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf").read_text()
    assert "/var/lib/kubelet/kubeadm-flags.env" in dropin and "--config=/var/lib/kubelet/config.yaml" in dropin
    assert (root / "usr/lib/systemd/system/kubelet.service").is_file()
    # the CNI plugins where a container runtime looks for them, answering the CNI protocol's VERSION
    for plugin in ("bridge", "host-local", "loopback", "portmap"):
        answer = subprocess.run(
            [str(root / "opt/cni/bin" / plugin)], env={"CNI_COMMAND": "VERSION"}, input="{}",
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert "1.0.0" in json.loads(answer.stdout)["supportedVersions"], (plugin, answer.stdout)


def test_a_node_with_only_the_mirror_resolves_the_closure_from_debian_and_the_lab(
    lab_upstream: LabUpstream, tmp_path: Path
) -> None:
    """apt as role package_source leaves a node (the mirror as its one source) installs kubeadm's closure."""
    up, key = lab_upstream, lab_upstream.layout.public_key
    with serve(up.layout.repo) as uri:
        node = PrivateApt(tmp_path / "node", Upstream(archive=uri, security=None, keyring=key), "bookworm", ["main"])
        node.prepare()
        (node.root / "sources.list").write_text(f"deb [signed-by={key}] {uri} bookworm main\n")
        node.update()
        # what role kubernetes_packages asks: the three at the release, kubernetes-cni for Flannel
        lock = node.resolve({n: f"{up.version}-*" for n in KUBERNETES} | {CNI_PACKAGE: "*"})
    assert {n: lock[n] for n in KUBERNETES} == dict.fromkeys(KUBERNETES, f"{up.version}-{debs.REVISION}")
    assert lock[CNI_PACKAGE] == up.repository.packages[CNI_PACKAGE]
    assert {"cri-tools", "conntrack", "iptables", "socat"} <= set(lock)


def test_the_repository_is_built_once_per_set_of_binaries(lab_upstream: LabUpstream) -> None:
    """A second call with the same binaries is the cached tree (same signature); the key pins it."""
    up = lab_upstream
    release = release_for(up.version)
    before = (up.repository.root / "InRelease").read_bytes()
    again = debs.repository(release, built_components(debs.PROGRAMS))
    assert again == up.repository
    assert (again.root / "InRelease").read_bytes() == before
