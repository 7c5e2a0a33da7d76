"""`rackctl mirror build` with Kubernetes' repository beside Debian's, for real, against a STAND-IN upstream.

STAND-IN: pkgs.k8s.io cannot be reached here and no real kubeadm can be had, so the upstream is a
throwaway flat repository built on this machine (tests/mirror/standin_upstream.py: stand-in kubeadm,
kubelet, kubectl at ``<version>-1.1`` and at an older version, cri-tools, kubernetes-cni; indexed with
dpkg-scanpackages, ``Release`` signed with a throwaway gpg key) and served over HTTP on loopback. The
inventory points ``site_services.packages.upstreams.kubernetes`` (``uri``, ``key_file``) at it, as an
air-gapped site points it at its staging copy. Everything else is real: Debian's archive for the rest of
the closure, rackctl's private apt, reprepro, gpg, and apt reading the built mirror as a node does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.errors import InvalidInput
from bootstrap.inventory import load_inventory
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.package_upstreams import KUBERNETES_KEY_FINGERPRINT
from bootstrap.mirror.apt_fetch import PrivateApt, Upstream
from bootstrap.mirror.build import BuildResult, build_mirror
from bootstrap.mirror.check import check_mirror
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import Manifest, build_manifest
from bootstrap.mirror.repo import repo_packages
from bootstrap.mirror.upstream_keys import KeyFetchError, keyring_for
from bootstrap.mirror.upstreams import ExtraRepo
from tests.mirror.conftest import gpgv_with_site_key, lab_inventory_copy, mirror_roles, tools_missing
from tests.mirror.standin_upstream import (
    StandinRepo,
    build_repo,
    kubernetes_standins,
    make_key,
    serve,
    stop_agent,
)
from tests.mirror.standin_upstream import (
    tools_missing as standin_tools_missing,
)

pytestmark = pytest.mark.slow

KUBERNETES = ("kubeadm", "kubelet", "kubectl")
FIELD = "site_services.packages.upstreams.kubernetes"


@dataclass
class UpstreamMirror:
    """The STAND-IN upstream (served at ``uri``) and the mirror built from it and Debian's archive."""

    standin: StandinRepo
    uri: str
    version: str
    older: str
    inventory: Inventory
    roles: Path
    layout: MirrorLayout
    manifest: Manifest
    result: BuildResult


def standin_inventory(folder: Path, uri: str, key: Path, version: str | None = None) -> Path:
    """``inventory/lab.yml`` with the Kubernetes upstream at ``uri``, signed by ``key`` (copied beside the
    inventory, named relative to it), and optionally another ``cluster.versions.kubernetes``."""
    path = lab_inventory_copy(folder)
    (path.parent / "keys").mkdir(exist_ok=True)
    shutil.copy(key, path.parent / "keys" / "kubernetes.asc")
    text = path.read_text()
    assert "upstreams: {kubernetes: false}" in text
    text = text.replace(
        "upstreams: {kubernetes: false}", f"upstreams: {{kubernetes: {{uri: '{uri}', key_file: keys/kubernetes.asc}}}}"
    )
    if version:
        text = text.replace(
            "  software_profile: current\n", f"  software_profile: current\n  versions: {{kubernetes: '{version}'}}\n"
        )
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def upstream_mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamMirror]:
    """The STAND-IN upstream served on loopback, and one mirror built from it (module scope)."""
    reason = tools_missing() or standin_tools_missing()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("upstream")
    version = load_inventory(lab_inventory_copy(base / "probe")).cluster.resolved_versions().kubernetes
    major, minor, patch = version.split(".")
    older = f"{major}.{minor}.{max(int(patch) - 1, 0)}-1.1"
    standin = build_repo(base / "standin", kubernetes_standins(f"{version}-1.1", older), "STAND-IN upstream <k8s@x>")
    (standin.root / "Release.key").write_bytes(standin.public_key.read_bytes())  # where pkgs.k8s.io has it
    with serve(standin.root) as uri:
        inventory = load_inventory(standin_inventory(base / "site", uri, standin.public_key))
        roles = mirror_roles(base / "roles")
        layout = MirrorLayout(base / "state")
        manifest = build_manifest(inventory, roles)
        result = build_mirror(layout, manifest, key_uid="rackctl test mirror <mirror@lab.rackctl.test>")
        yield UpstreamMirror(standin, uri, version, older, inventory, roles, layout, manifest, result)


def packages_index(layout: MirrorLayout) -> dict[str, list[str]]:
    """Every version of every package in the mirror's served ``Packages`` index."""
    found: dict[str, list[str]] = {}
    name = ""
    for line in (layout.repo / "dists/bookworm/main/binary-amd64/Packages").read_text().splitlines():
        if line.startswith("Package: "):
            name = line.split(": ", 1)[1]
        elif line.startswith("Version: "):
            found.setdefault(name, []).append(line.split(": ", 1)[1])
    return found


def packages_stanza(layout: MirrorLayout, name: str) -> str:
    """The served ``Packages`` index's stanza of ``name``."""
    text = (layout.repo / "dists/bookworm/main/binary-amd64/Packages").read_text()
    return next(s for s in text.split("\n\n") if s.startswith(f"Package: {name}\n"))


def state_copy(built: UpstreamMirror, folder: Path) -> Path:
    """A copy of the built state dir (apt lists and cache, site key, repository): a rebuild reads no archive
    index anew (gpg-agent sockets left out)."""
    shutil.copytree(built.layout.state_dir, folder, ignore=shutil.ignore_patterns("S.*"))
    return folder


def test_the_mirror_holds_exactly_the_pinned_version_signed_by_the_site_key(upstream_mirror: UpstreamMirror) -> None:
    built, layout = upstream_mirror, upstream_mirror.layout
    wanted = f"{built.version}-1.1"
    index = packages_index(layout)
    for name in KUBERNETES:
        assert index[name] == [wanted], index.get(name)  # the pinned version, and not the older one
    assert index["cri-tools"] == ["1.31.1-1.1"] and index["kubernetes-cni"] == ["1.5.1-1.1"]  # their dependencies
    stanza = packages_stanza(layout, "kubernetes-cni")  # built without Section/Priority: given the defaults
    assert "Section: misc" in stanza and "Priority: optional" in stanza
    assert {"socat", "hello", "python3-apt"} <= set(index)  # Debian's part, kubelet's socat included
    assert repo_packages(layout, "bookworm", ["main"]) == built.result.lock
    assert not list(layout.repo.rglob(f"kubeadm_{built.older}_*.deb"))
    origins = built.result.origins
    assert {n for n, o in origins.items() if o == "kubernetes"} == {*KUBERNETES, "cri-tools", "kubernetes-cni"}
    assert origins["socat"] == "debian" and origins["hello"] == "debian"
    # the index is the one InRelease lists, and InRelease verifies against the site key (and no other)
    inrelease = layout.repo / "dists/bookworm/InRelease"
    packages = (layout.repo / "dists/bookworm/main/binary-amd64/Packages").read_bytes()
    assert hashlib.sha256(packages).hexdigest() in inrelease.read_text()
    verify = gpgv_with_site_key(layout, inrelease)
    assert verify.returncode == 0, verify.stderr
    assert built.standin.fingerprint not in verify.stderr  # signed by the site key, not the upstream's
    lock = json.loads(layout.lock.read_text())
    assert lock["origins"]["kubeadm"] == "kubernetes"
    assert lock["manifest"]["upstreams"][0]["uri"] == built.uri
    # STAND-IN, and labelled so inside the package
    deb = next(layout.repo.rglob(f"kubeadm_{wanted}_amd64.deb"))
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], check=True, capture_output=True, text=True).stdout
    assert "usr/share/doc/kubeadm/STAND-IN" in listing
    # `rackctl mirror check` agrees: every request (the globs `<version>-*` included) is there
    assert check_mirror(layout, built.manifest).ok


def test_a_node_with_only_the_mirror_resolves_kubeadm_at_the_version(
    upstream_mirror: UpstreamMirror, tmp_path: Path
) -> None:
    """apt as role package_source leaves a node: the mirror as the one source, trusting the site key only."""
    built, key = upstream_mirror, upstream_mirror.layout.public_key
    wanted = f"{built.version}-1.1"
    with serve(built.layout.repo) as uri:
        node = PrivateApt(tmp_path / "node", Upstream(archive=uri, security=None, keyring=key), "bookworm", ["main"])
        node.prepare()
        (node.root / "sources.list").write_text(f"deb [signed-by={key}] {uri} bookworm main\n")
        node.update()
        madison = node.madison(list(KUBERNETES))
        assert {n: [v for v, _ in vs] for n, vs in madison.items()} == {n: [wanted] for n in KUBERNETES}
        lock = node.resolve({n: f"{built.version}-*" for n in KUBERNETES})  # what the role asks, resolved by apt
    assert {n: lock[n] for n in KUBERNETES} == {n: wanted for n in KUBERNETES}
    assert {"cri-tools", "kubernetes-cni", "socat"} <= set(lock)  # the closure is in the mirror too


def test_plan_lists_the_upstream_packages_with_their_origin(upstream_mirror: UpstreamMirror) -> None:
    built = upstream_mirror
    revision = built.layout.revision()
    args = ["mirror", "build", "--plan", "-i", str(built.inventory.source), "--state-dir", str(built.layout.state_dir)]
    args += ["--roles", str(built.roles)]
    doc = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    text = CliRunner().invoke(cli, args).output
    wanted = f"{built.version}-1.1"
    assert doc["applied"] is False and doc["lock"]["kubeadm"] == wanted
    assert doc["origins"]["kubeadm"] == "kubernetes" and doc["origins"]["hello"] == "debian"
    assert [r["version"] for r in doc["manifest"]["requests"] if r["name"] == "kubeadm"] == [f"{built.version}-*"]
    assert doc["manifest"]["upstreams"][0]["name"] == "kubernetes"
    assert f"kubeadm {wanted} (requested, kubernetes)" in text
    assert "cri-tools 1.31.1-1.1 (kubernetes)" in text
    assert "upstream kubernetes: Kubernetes' pkgs.k8s.io" in text
    assert built.layout.revision() == revision  # a plan builds nothing


def test_a_wrong_key_fails_the_build_naming_the_upstream(upstream_mirror: UpstreamMirror, tmp_path: Path) -> None:
    built = upstream_mirror
    home = tmp_path / "other-gnupg"
    make_key(home, "not the upstream <x@y>")
    wrong = tmp_path / "wrong.asc"
    wrong.write_bytes(
        subprocess.run(["gpg", "--homedir", str(home), "--armor", "--export"], capture_output=True, check=True).stdout
    )
    stop_agent(home)
    state = state_copy(built, tmp_path / "state")
    revision = MirrorLayout(state).revision()
    inventory = standin_inventory(tmp_path / "site", built.uri, wrong)
    out = CliRunner().invoke(
        cli,
        ["mirror", "build", "--json", "-i", str(inventory), "--state-dir", str(state), "--roles", str(built.roles)],
    )
    assert out.exit_code == 2, out.output
    doc = json.loads(out.output)
    problem = doc["errors"][0]
    assert problem["path"] == FIELD, doc
    assert "Kubernetes' pkgs.k8s.io" in problem["message"] and built.uri.rstrip("/") in problem["message"]
    assert "NO_PUBKEY" in problem["message"] or "not signed" in problem["message"], problem
    assert "keys/kubernetes.asc" in problem["fix"]
    assert "Traceback" not in out.output
    assert MirrorLayout(state).revision() == revision  # the served repository is untouched


def test_an_unreachable_upstream_fails_the_build_naming_it(upstream_mirror: UpstreamMirror, tmp_path: Path) -> None:
    built = upstream_mirror
    with serve(tmp_path) as gone:  # a port that served once and is closed now
        pass
    inventory = standin_inventory(tmp_path / "site", gone, built.standin.public_key)
    state = state_copy(built, tmp_path / "s")
    out = CliRunner().invoke(
        cli,
        ["mirror", "build", "--json", "-i", str(inventory), "--state-dir", str(state), "--roles", str(built.roles)],
    )
    assert out.exit_code == 2, out.output
    (problem,) = json.loads(out.output)["errors"]
    assert (
        problem["path"] == FIELD and "Failed to fetch" in problem["message"] and gone.rstrip("/") in problem["message"]
    )


def test_a_version_the_upstream_lacks_fails_naming_the_field(upstream_mirror: UpstreamMirror, tmp_path: Path) -> None:
    built = upstream_mirror
    major, minor, _ = built.version.split(".")
    missing = f"{major}.{minor}.99"
    inventory = standin_inventory(tmp_path / "site", built.uri, built.standin.public_key, version=missing)
    state = state_copy(built, tmp_path / "state")
    out = CliRunner().invoke(
        cli,
        ["mirror", "build", "--json", "-i", str(inventory), "--state-dir", str(state), "--roles", str(built.roles)],
    )
    assert out.exit_code == 2, out.output
    errors = json.loads(out.output)["errors"]
    assert [e["path"] for e in errors] == ["cluster.versions.kubernetes"]
    assert errors[0]["message"] == (
        f"kubeadm/kubelet/kubectl {missing} not in Kubernetes' pkgs.k8s.io v{major}.{minor} ({built.uri}): "
        f"it has {built.version}-1.1, {built.older}"
    )
    with pytest.raises(InvalidInput):  # the library refuses the same way
        build_mirror(
            MirrorLayout(state), build_manifest(load_inventory(inventory), built.roles), key_uid="unused: exists"
        )


def test_a_fetched_key_must_be_the_pinned_one(upstream_mirror: UpstreamMirror, tmp_path: Path) -> None:
    """Without key_file the key is fetched from the upstream's URL (here the STAND-IN's ``Release.key``, where
    pkgs.k8s.io publishes its own) and trusted only if it is the key whose fingerprint rackctl pins."""
    built = upstream_mirror
    repo = ExtraRepo(
        "kubernetes", "STAND-IN pkgs.k8s.io", built.uri, None, built.uri + "Release.key", built.standin.fingerprint
    )
    keyring = keyring_for(repo, tmp_path / "keys")
    shown = subprocess.run(
        ["gpg", "--homedir", str(tmp_path), "--with-colons", "--show-keys", str(keyring)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert f"fpr:::::::::{built.standin.fingerprint}:" in shown
    real_pin = dataclasses.replace(repo, fingerprint=KUBERNETES_KEY_FINGERPRINT)
    with pytest.raises(InvalidInput) as exc:
        keyring_for(real_pin, tmp_path / "refused")
    (problem,) = exc.value.problems
    assert problem.path == FIELD
    assert problem.message == (
        f"{built.uri}Release.key holds {built.standin.fingerprint}, rackctl pins {KUBERNETES_KEY_FINGERPRINT}"
    )
    assert not (tmp_path / "refused" / "kubernetes.gpg").exists()
    with pytest.raises(KeyFetchError) as gone:
        keyring_for(dataclasses.replace(repo, key_url=built.uri + "no-such.key"), tmp_path / "gone")
    assert gone.value.problems[0].path == FIELD and "404" in gone.value.problems[0].message
    assert f"{FIELD}.key_file" in gone.value.problems[0].fix
