"""STAND-IN upstream: a throwaway flat apt repository shaped like pkgs.k8s.io, built and served on loopback.

pkgs.k8s.io (and NVIDIA's repository) cannot be reached here, and no real kubeadm can be had: every
package built here is a STAND-IN. It carries the real package's name, a pkgs.k8s.io-style version
(``1.31.2-1.1``) and dependencies of the same shape (kubeadm -> cri-tools, kubelet -> kubernetes-cni and
Debian's socat), and nothing else but a file saying it is a stand-in. What is real: ``dpkg-deb`` builds
the ``.deb`` files, ``dpkg-scanpackages`` indexes them, gpg signs ``Release`` (``InRelease`` and
``Release.gpg``) with a throwaway key, and Python's ``http.server`` serves the tree on 127.0.0.1, so
rackctl's private apt reads it exactly as it reads a flat upstream repository. The stand-in
kubernetes-cni is built without Section and Priority (an upstream's package may lack them; reprepro
refuses such a package unless given defaults).
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rackctl_lab.components.debs import write_index

STANDIN_NOTE = "STAND-IN for tests of rackctl's mirror build: not the real package, installs nothing useful"


@dataclass(frozen=True)
class StandinPackage:
    """One STAND-IN package: name, version, Depends."""

    name: str
    version: str
    depends: str = ""
    #: Section and Priority in its control file (a package built without them tests that reprepro gets defaults)
    classified: bool = True


def kubernetes_standins(version: str, other: str) -> list[StandinPackage]:
    """STAND-INs of pkgs.k8s.io's packages at ``version`` and ``other`` (e.g. ``1.31.2-1.1``, ``1.31.1-1.1``)."""
    out = []
    for v in (version, other):
        out += [
            StandinPackage("kubeadm", v, "cri-tools (>= 1.31.0)"),
            StandinPackage("kubelet", v, "kubernetes-cni (>= 1.5.0), socat"),
            StandinPackage("kubectl", v),
        ]
    return [
        *out,
        StandinPackage("cri-tools", "1.31.1-1.1"),
        StandinPackage("kubernetes-cni", "1.5.1-1.1", classified=False),
    ]


def tools_missing() -> str:
    missing = [t for t in ("dpkg-deb", "dpkg-scanpackages", "gpg") if shutil.which(t) is None]
    return f"missing tools: {', '.join(missing)} (dpkg-dev, gnupg)" if missing else ""


def build_deb(package: StandinPackage, work: Path, out: Path) -> Path:
    """``<out>/<name>_<version>_amd64.deb``, a STAND-IN built with dpkg-deb."""
    tree = work / f"{package.name}_{package.version}"
    (tree / "DEBIAN").mkdir(parents=True)
    doc = tree / "usr" / "share" / "doc" / package.name
    doc.mkdir(parents=True)
    (doc / "STAND-IN").write_text(f"{STANDIN_NOTE}\n")
    control = [
        f"Package: {package.name}",
        f"Version: {package.version}",
        "Architecture: amd64",
        "Maintainer: rackctl tests <tests@rackctl.invalid>",
        *(["Section: admin", "Priority: optional"] if package.classified else []),
        *([f"Depends: {package.depends}"] if package.depends else []),
        f"Description: {STANDIN_NOTE}",
        " (rackctl's tests build it with dpkg-deb; pkgs.k8s.io is not reachable here)",
    ]
    (tree / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    deb = out / f"{package.name}_{package.version}_amd64.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)], check=True, capture_output=True
    )
    return deb


def make_key(home: Path, uid: str) -> str:
    """A throwaway ed25519 signing key in the GnuPG home ``home``; its fingerprint."""
    home.mkdir(parents=True, mode=0o700, exist_ok=True)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-gen-key", uid, "ed25519", "sign", "never"], check=True, capture_output=True)
    out = subprocess.run(
        ["gpg", "--homedir", str(home), "--with-colons", "--list-keys"], check=True, capture_output=True, text=True
    ).stdout
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


def export_key(home: Path, out: Path, *, armor: bool = True) -> Path:
    args = ["--armor"] if armor else []
    data = subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", *args, "--export"], check=True, capture_output=True
    )
    out.write_bytes(data.stdout)
    return out


def stop_agent(home: Path) -> None:
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)


def sign_release(repo: Path, home: Path) -> None:
    """``InRelease`` (clear-signed) and ``Release.gpg`` (detached) with the key in ``home``."""
    gpg = ["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release")], check=True)
    subprocess.run([*gpg, "-abs", "-o", str(repo / "Release.gpg"), str(repo / "Release")], check=True)


@dataclass
class StandinRepo:
    """The built tree, its signing key (armored public half) and the key's fingerprint."""

    root: Path
    public_key: Path
    fingerprint: str


def build_repo(folder: Path, packages: list[StandinPackage], uid: str) -> StandinRepo:
    """A signed flat repository of STAND-IN ``packages`` under ``folder/repo``."""
    repo, work, home = folder / "repo", folder / "work", folder / "gnupg"
    repo.mkdir(parents=True)
    work.mkdir()
    for package in packages:
        build_deb(package, work, repo)
    shutil.rmtree(work)
    fingerprint = make_key(home, uid)
    try:
        write_index(repo, origin="rackctl-tests STAND-IN", label="STAND-IN pkgs.k8s.io")
        sign_release(repo, home)
        public = export_key(home, folder / "upstream-key.asc")
    finally:
        stop_agent(home)
    return StandinRepo(repo, public, fingerprint)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (a free port) for the ``with`` block; its URI (ends in /)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
