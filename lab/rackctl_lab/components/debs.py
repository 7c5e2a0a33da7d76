"""The lab's Kubernetes packages: its own builds of kubeadm, kubelet, kubectl and crictl as ``.deb`` files in a
signed flat repository shaped like pkgs.k8s.io, so a site's path is the lab's path.

A site points ``site_services.packages.upstreams.kubernetes`` at pkgs.k8s.io (or its staging copy), and
``rackctl mirror build`` mirrors kubeadm, kubelet and kubectl at exactly ``cluster.versions.kubernetes``
with their dependencies. pkgs.k8s.io cannot be reached from the lab machine, so the lab makes that upstream
itself from the programs ``rackctl-lab components`` built at the same release: the same package names, the
same version shape (``1.37.2-1.1``), dependencies of the same shape (kubeadm on kubelet, kubectl and
cri-tools; kubelet on Debian's conntrack, iptables, socat...), and a kubelet with a systemd unit and the
kubeadm drop-in that reads ``kubeadm-flags.env`` and ``config.yaml`` (texts of the lab's own, written for
this: no file of the upstream packages is copied). ``dpkg-deb`` builds them, ``dpkg-scanpackages`` indexes
them, gpg signs ``Release`` with the lab's own key. What they are not: the Kubernetes project's packages
(``Maintainer`` and ``Description`` say so). kubernetes-cni carries the CNI plugins a bridge-based pod
network (Flannel's) calls, in ``/opt/cni/bin`` as pkgs.k8s.io's does; pkgs.k8s.io's kubelet no longer
depends on it, and neither does the lab's.

The lab's containerd is packaged the same way as ``containerd.io`` in a repository shaped like Docker's (a
suite layout, ``<uri> bookworm stable``, its key served as ``gpg``: :func:`containerd_repository`), which
``site_services.packages.upstreams.containerd`` names as a site names Docker's; role ``container_runtime``
then installs it at exactly ``cluster.versions.containerd`` through the head node's mirror. Unlike Docker's
package it carries no runc of its own: it depends on Debian's.

Built once per set of binaries (their sha256s key the cache, like the components), under
``<cache>/components/debs/<release>-<key>/`` (``containerd-<version>-<key>/`` for containerd.io).
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bootstrap.errors import EnvironmentMissing
from bootstrap.provision.ramdisk import cache_lock, cache_root, mark_used
from rackctl_lab.components.pins import CNI_PLUGINS, KubernetesRelease

#: pkgs.k8s.io's revision suffix shape (``<upstream version>-<revision>``)
REVISION = "1.1"
#: Bump when what the packages hold changes (part of the cache key).
RECIPE = 4
MAINTAINER = "rackctl lab <lab@rackctl.invalid>"
ORIGIN = "rackctl-lab"
KEY_UID = "rackctl lab Kubernetes packages <kubernetes@lab.rackctl.invalid>"
#: the binaries the packages carry
PROGRAMS = ("kubeadm", "kubelet", "kubectl", "crictl", *CNI_PLUGINS)

KUBELET_UNIT = """\
[Unit]
Description=kubelet: The Kubernetes Node Agent (rackctl lab package)
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

#: The kubelet package's postinst: the unit enabled as a Debian package's systemd helper does (pkgs.k8s.io's
#: also starts it, to wait in a restart loop for kubeadm; kubeadm's kubelet-start phase starts it here).
KUBELET_POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    deb-systemd-helper enable kubelet.service >/dev/null
fi
"""

#: What kubeadm expects of the kubelet's unit: its kubeconfigs, its config file and the flags kubeadm writes.
KUBEADM_DROPIN = """\
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""


@dataclass(frozen=True)
class LabPackage:
    """One package: its name, version, Depends, the binaries it puts in ``/usr/bin`` and other files."""

    name: str
    version: str
    depends: str = ""
    programs: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)  #: absolute path -> text
    scripts: Mapping[str, str] = field(default_factory=dict)  #: maintainer script name (postinst) -> text
    bin_dir: str = "usr/bin"  #: where ``programs`` go
    conflicts: str = ""  #: its Conflicts (and Replaces)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_amd64.deb"


@dataclass(frozen=True)
class LabRepository:
    """The signed flat repository: its tree (served as is), the armored public key, the key's fingerprint."""

    root: Path
    public_key: Path
    fingerprint: str
    packages: dict[str, str]  #: name -> version

    def as_dict(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "public_key": str(self.public_key),
            "fingerprint": self.fingerprint,
            "packages": self.packages,
        }


def package_version(release: KubernetesRelease) -> str:
    """``1.37.2`` -> ``1.37.2-1.1``: the version kubeadm, kubelet and kubectl carry."""
    return f"{release.version}-{REVISION}"


def packages(release: KubernetesRelease) -> list[LabPackage]:
    """The packages of ``release``, dependencies as pkgs.k8s.io shapes them (Debian's packages otherwise)."""
    version = package_version(release)
    cri_tools = f"{release.cri_tools.removeprefix('v')}-{REVISION}"
    return [
        LabPackage("cri-tools", cri_tools, programs=("crictl",)),
        LabPackage(
            "kubernetes-cni",
            f"{release.cni_plugins.removeprefix('v')}-{REVISION}",
            programs=tuple(CNI_PLUGINS),
            bin_dir="opt/cni/bin",
        ),
        LabPackage("kubectl", version, programs=("kubectl",)),
        LabPackage(
            "kubelet",
            version,
            "iptables, iproute2, mount, ethtool, conntrack, socat, util-linux",
            programs=("kubelet",),
            files={
                "/usr/lib/systemd/system/kubelet.service": KUBELET_UNIT,
                "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": KUBEADM_DROPIN,
            },
            scripts={"postinst": KUBELET_POSTINST},
        ),
        LabPackage(
            "kubeadm",
            version,
            f"kubelet (>= {release.minor}.0), kubectl (>= {release.minor}.0), cri-tools (>= {release.minor}.0)",
            programs=("kubeadm",),
        ),
    ]


def tools_missing() -> str:
    """What this machine lacks to build the repository (empty when nothing)."""
    missing = [t for t in ("dpkg-deb", "dpkg-scanpackages", "gpg") if shutil.which(t) is None]
    return f"missing {', '.join(missing)} (Debian's dpkg-dev and gnupg)" if missing else ""


def repository(release: KubernetesRelease, binaries: Mapping[str, Path], cache: Path | None = None) -> LabRepository:
    """The signed flat repository of ``release``'s packages made from ``binaries`` (name -> built file), cached."""
    reason = tools_missing()
    if reason:
        raise EnvironmentMissing(f"cannot build the lab's Kubernetes packages: {reason}")
    absent = [name for name in PROGRAMS if name not in binaries]
    if absent:
        raise ValueError(f"the lab's Kubernetes packages need the built {', '.join(absent)}")
    sums = {name: hashlib.sha256(Path(binaries[name]).read_bytes()).hexdigest() for name in PROGRAMS}
    key = hashlib.sha256(json.dumps([RECIPE, release.version, sums], sort_keys=True).encode()).hexdigest()[:16]
    base = (cache or cache_root()) / "components" / "debs"
    target = base / f"{release.version}-{key}"
    base.mkdir(parents=True, exist_ok=True)
    with cache_lock(base):
        if not (target / ".rackctl-complete").exists():
            shutil.rmtree(target, ignore_errors=True)
            work = base / f".{target.name}.partial"
            shutil.rmtree(work, ignore_errors=True)
            _build(release, binaries, work)
            (work / ".rackctl-complete").write_text(json.dumps(sums, indent=2) + "\n")
            work.rename(target)
    mark_used(target)
    fingerprint = (target / "fingerprint").read_text().strip()
    return LabRepository(
        target / "repo", target / "Release.key", fingerprint, {p.name: p.version for p in packages(release)}
    )


def _build(release: KubernetesRelease, binaries: Mapping[str, Path], work: Path) -> None:
    repo, trees, home = work / "repo", work / "trees", work / "gnupg"
    repo.mkdir(parents=True)
    for package in packages(release):
        _deb(package, binaries, trees / package.name, repo / package.filename)
    shutil.rmtree(trees)
    write_index(repo, origin=ORIGIN, label="rackctl lab Kubernetes packages")
    try:
        fingerprint = _sign(repo, home)
        exported = _gpg(home, "--armor", "--export", fingerprint)
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
    (work / "Release.key").write_bytes(exported)
    (repo / "Release.key").write_bytes(exported)  # where pkgs.k8s.io serves its key
    (work / "fingerprint").write_text(fingerprint + "\n")
    shutil.rmtree(home)  # the private half is not kept: a rebuild signs with a new key


def _deb(package: LabPackage, binaries: Mapping[str, Path], tree: Path, out: Path) -> None:
    (tree / "DEBIAN").mkdir(parents=True)
    for program in package.programs:
        target = tree / package.bin_dir / program
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(binaries[program], target)
        target.chmod(0o755)
    for path, text in package.files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(0o644)
    for name, text in package.scripts.items():
        (tree / "DEBIAN" / name).write_text(text)
        (tree / "DEBIAN" / name).chmod(0o755)
    size_kib = sum(f.stat().st_size for f in tree.rglob("*") if f.is_file()) // 1024
    control = [
        f"Package: {package.name}",
        f"Version: {package.version}",
        "Architecture: amd64",
        f"Maintainer: {MAINTAINER}",
        "Section: admin",
        "Priority: optional",
        f"Installed-Size: {size_kib}",
        *([f"Depends: {package.depends}"] if package.depends else []),
        *([f"Conflicts: {package.conflicts}", f"Replaces: {package.conflicts}"] if package.conflicts else []),
        f"Description: {package.name} built by the rackctl lab from its Go module",
        " Not the upstream project's package: the rackctl lab's own build, shaped like the upstream's.",
    ]
    (tree / "DEBIAN/control").write_text("\n".join(control) + "\n")
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(out)], check=True, capture_output=True
    )


def write_index(repo: Path, *, origin: str, label: str) -> None:
    """``Packages``, ``Packages.gz`` and ``Release`` with their SHA256 sums: the index of the flat repository
    of the ``.deb`` files in ``repo`` (what apt reads from ``deb [signed-by=...] URI /``)."""
    scan = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."], cwd=repo, check=True, capture_output=True, text=True
    ).stdout
    (repo / "Packages").write_text(scan)
    (repo / "Packages.gz").write_bytes(gzip.compress(scan.encode(), mtime=0))
    lines = [
        f"Origin: {origin}",
        f"Label: {label}",
        "Architectures: amd64",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        data = (repo / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (repo / "Release").write_text("\n".join(lines) + "\n")


def _gpg(home: Path, *args: str) -> bytes:
    base = ["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""]
    return subprocess.run([*base, *args], check=True, capture_output=True).stdout


def _sign(repo: Path, home: Path, uid: str = KEY_UID) -> str:
    """A new ed25519 key in ``home`` signs ``InRelease`` and ``Release.gpg``; its fingerprint."""
    home.mkdir(mode=0o700, parents=True)
    _gpg(home, "--quick-gen-key", uid, "ed25519", "sign", "never")
    listed = _gpg(home, "--with-colons", "--list-keys").decode()
    fingerprint = next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))
    _gpg(home, "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release"))
    _gpg(home, "-abs", "-o", str(repo / "Release.gpg"), str(repo / "Release"))
    return fingerprint


# -- containerd.io in Docker's suite layout -----------------------------------------------------------------------
#: Docker's repository layout for Debian: ``dists/<suite>/<component>/binary-amd64/Packages`` and ``pool/``
CONTAINERD_SUITE = "bookworm"
CONTAINERD_COMPONENT = "stable"
CONTAINERD_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr")
CONTAINERD_KEY_UID = "rackctl lab containerd packages <containerd@lab.rackctl.invalid>"
#: Bump when what the package holds changes (part of the cache key).
CONTAINERD_RECIPE = 1

#: containerd's unit (the lab's own text): no OOMScoreAdjust, which a native node, without
#: CAP_SYS_RESOURCE, cannot lower; Delegate and KillMode as containerd needs for its shims.
CONTAINERD_UNIT = """\
[Unit]
Description=containerd container runtime (rackctl lab package)
After=network.target local-fs.target

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
LimitNOFILE=infinity
TasksMax=infinity

[Install]
WantedBy=multi-user.target
"""

CONTAINERD_POSTINST = """\
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    deb-systemd-helper enable containerd.service >/dev/null
fi
"""


def containerd_package_version(version: str) -> str:
    """``v2.4.2`` -> ``2.4.2-1~debian.12~bookworm``: the shape of Docker's containerd.io versions."""
    return f"{version.removeprefix('v')}-1~debian.12~{CONTAINERD_SUITE}"


def containerd_package(version: str) -> LabPackage:
    """containerd.io at ``version``: containerd, its runc shim and ctr, a unit, Debian's runc as a dependency
    (Docker's bundles its own runc and conflicts with Debian's; the lab's is the lab's build, and says so)."""
    return LabPackage(
        "containerd.io",
        containerd_package_version(version),
        "runc",
        programs=CONTAINERD_PROGRAMS,
        files={"/usr/lib/systemd/system/containerd.service": CONTAINERD_UNIT},
        scripts={"postinst": CONTAINERD_POSTINST},
        conflicts="containerd",
    )


def containerd_repository(version: str, binaries: Mapping[str, Path], cache: Path | None = None) -> LabRepository:
    """A signed repository in Docker's suite layout (``<root> bookworm stable``) with the lab's containerd.io at
    ``version`` made from ``binaries`` (its programs), its key served as ``gpg`` at the root; cached."""
    reason = tools_missing()
    if reason:
        raise EnvironmentMissing(f"cannot build the lab's containerd package: {reason}")
    absent = [name for name in CONTAINERD_PROGRAMS if name not in binaries]
    if absent:
        raise ValueError(f"the lab's containerd package needs the built {', '.join(absent)}")
    sums = {name: hashlib.sha256(Path(binaries[name]).read_bytes()).hexdigest() for name in CONTAINERD_PROGRAMS}
    key = hashlib.sha256(json.dumps([CONTAINERD_RECIPE, version, sums], sort_keys=True).encode()).hexdigest()[:16]
    base = (cache or cache_root()) / "components" / "debs"
    target = base / f"containerd-{version}-{key}"
    base.mkdir(parents=True, exist_ok=True)
    package = containerd_package(version)
    with cache_lock(base):
        if not (target / ".rackctl-complete").exists():
            shutil.rmtree(target, ignore_errors=True)
            work = base / f".{target.name}.partial"
            shutil.rmtree(work, ignore_errors=True)
            _build_suite(package, binaries, work)
            (work / ".rackctl-complete").write_text(json.dumps(sums, indent=2) + "\n")
            work.rename(target)
    mark_used(target)
    fingerprint = (target / "fingerprint").read_text().strip()
    return LabRepository(target / "repo", target / "gpg", fingerprint, {package.name: package.version})


def _build_suite(package: LabPackage, binaries: Mapping[str, Path], work: Path) -> None:
    repo, home = work / "repo", work / "gnupg"
    pool = repo / "pool" / CONTAINERD_COMPONENT
    pool.mkdir(parents=True)
    _deb(package, binaries, work / "tree", pool / package.filename)
    shutil.rmtree(work / "tree")
    dist = repo / "dists" / CONTAINERD_SUITE
    index = dist / CONTAINERD_COMPONENT / "binary-amd64"
    index.mkdir(parents=True)
    scan = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "pool"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout
    (index / "Packages").write_text(scan)
    (index / "Packages.gz").write_bytes(gzip.compress(scan.encode(), mtime=0))
    lines = [
        f"Origin: {ORIGIN}",
        "Label: rackctl lab containerd packages (Docker's layout)",
        f"Suite: {CONTAINERD_SUITE}",
        f"Codename: {CONTAINERD_SUITE}",
        f"Components: {CONTAINERD_COMPONENT}",
        "Architectures: amd64",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        data = (index / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {CONTAINERD_COMPONENT}/binary-amd64/{name}")
    (dist / "Release").write_text("\n".join(lines) + "\n")
    try:
        fingerprint = _sign(dist, home, CONTAINERD_KEY_UID)
        exported = _gpg(home, "--armor", "--export", fingerprint)
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
    (work / "gpg").write_bytes(exported)
    (repo / "gpg").write_bytes(exported)  # where Docker serves its key
    (work / "fingerprint").write_text(fingerprint + "\n")
    shutil.rmtree(home)
