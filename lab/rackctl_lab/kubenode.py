"""A native lab node made ready for kubeadm: the runtime; the Kubernetes packages and images by the head node.

What a Kubernetes node has before rackctl's host side runs, for a :class:`~rackctl_lab.nspawn.NativeNode`
that is running: runc and the tools kubeadm's preflight looks for from Debian's packages (with dpkg);
containerd, its shim and ``ctr`` from ``rackctl lab components`` in ``/usr/bin`` with a unit of ours (no
package of them is made yet); etcdctl off PATH (:data:`TEST_ETCDCTL`, for the tests' own reads: a kubeadm
node has none, so rackctl's roles use the etcd pod's). containerd reads its registry hosts from
:data:`CERTS_DIR`, where role ``container_runtime`` points every upstream registry at the site's registry: the
node holds no image until it pulls one from there. kubeadm, kubelet, kubectl, cri-tools
and kubernetes-cni come from the lab's own packages (:mod:`rackctl_lab.components.debs`) through a head
mirror and role ``kubernetes_packages``, as on a site; given to :func:`install`, they are installed with
dpkg instead.

Two concessions to the lab machine, both in this module and nowhere in the product: its cgroups are v1
(hybrid), so the node remounts its controller hierarchies read-write before containerd starts (nspawn mounts
them read-only; the node's cgroup namespace keeps it inside its own subtree), and it has no
CAP_SYS_RESOURCE, so containerd clamps the OOM score adjustments it asks runc for
(``restrict_oom_score_adj``; a sandbox's -998 fails in runc otherwise: "can't get final child's PID from
pipe: EOF").
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from rackctl_lab.nspawn import NativeNode

#: The lab's builds a kubeadm node runs that no package carries yet, installed in ``/usr/bin``.
PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr")
#: etcdctl for the tests' own look at etcd, where no role looks for it (kubeadm installs no etcdctl on a
#: node: rackctl's role ``etcdctl`` then runs the etcd pod's through crictl, as on a site)
TEST_ETCDCTL = "/usr/local/lib/rackctl-lab/etcdctl"
#: What Debian gives the node: the OCI runtime, what kubeadm's preflight looks for, and what the lab's
#: kubelet package depends on (:data:`rackctl_lab.components.debs` shapes it like pkgs.k8s.io's).
DEBIAN_PACKAGES = ("runc", "conntrack", "iptables", "iproute2", "ethtool", "socat", "kmod")
#: Where containerd reads each registry's ``hosts.toml`` (role container_runtime's ``container_runtime_certs_dir``).
CERTS_DIR = "/etc/containerd/certs.d"

CGROUPS_UNIT = """\
[Unit]
Description=rackctl lab: cgroup v1 controllers read-write for containerd and the kubelet
DefaultDependencies=no
Before=containerd.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for d in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$d" 2>/dev/null || true; done'

[Install]
WantedBy=multi-user.target
"""

CONTAINERD_UNIT = """\
[Unit]
Description=containerd (the lab's build)
After=network.target rackctl-lab-cgroups.service

[Service]
ExecStart=/usr/bin/containerd
Restart=always
Delegate=yes
KillMode=process
LimitNOFILE=infinity

[Install]
WantedBy=multi-user.target
"""


def containerd_config(sandbox: str) -> str:
    """containerd's config: the sandbox image kubeadm pins, the registry hosts directory, and OOM scores clamped
    (see the module docstring)."""
    return (
        "version = 3\n"
        '[plugins."io.containerd.cri.v1.runtime"]\n'
        "  restrict_oom_score_adj = true\n"
        '[plugins."io.containerd.cri.v1.images".pinned_images]\n'
        f'  sandbox = "{sandbox}"\n'
        '[plugins."io.containerd.cri.v1.images".registry]\n'
        f'  config_path = "{CERTS_DIR}"\n'
    )


Run = Callable[[str], str]


def install(node: NativeNode, binaries: dict[str, Path], debs: list[Path], sandbox: str, run: Run) -> None:
    """Install everything on the running ``node``; ``run`` runs a shell command on it (over SSH) and returns stdout.

    ``sandbox``: the pause image kubeadm pins (containerd's sandbox image, pulled at its first pod).

    ``debs``: the packages installed with dpkg (Debian's, :func:`debs_for`; and the lab's Kubernetes
    packages where no mirror brings them: the kubelet package's postinst enables its unit).
    """
    root = node.root
    bin_dir = root / "usr/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in PROGRAMS:
        shutil.copy2(binaries[name], bin_dir / name)
    tool = root / TEST_ETCDCTL.lstrip("/")
    tool.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binaries["etcdctl"], tool)
    units = root / "etc/systemd/system"
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for unit, text in (
        ("rackctl-lab-cgroups.service", CGROUPS_UNIT),
        ("containerd.service", CONTAINERD_UNIT),
    ):
        (units / unit).write_text(text)
        link = wants / unit
        if not link.is_symlink():
            link.symlink_to(f"/etc/systemd/system/{unit}")
    (root / "etc/containerd").mkdir(parents=True, exist_ok=True)
    (root / "etc/containerd/config.toml").write_text(containerd_config(sandbox))
    staging = root / "var/cache/rackctl-lab"
    (staging / "debs").mkdir(parents=True, exist_ok=True)
    for deb in debs:
        shutil.copy2(deb, staging / "debs" / deb.name)
    # as a package install on a node would, but no service started by a maintainer script (policy-rc.d)
    run(
        "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && "
        "DEBIAN_FRONTEND=noninteractive dpkg -i /var/cache/rackctl-lab/debs/*.deb "
        ">/var/cache/rackctl-lab/dpkg.log 2>&1; "
        "rc=$?; rm -f /usr/sbin/policy-rc.d; [ $rc = 0 ] || { tail -5 /var/cache/rackctl-lab/dpkg.log; exit 1; }"
    )
    run("systemctl daemon-reload && systemctl start rackctl-lab-cgroups containerd")


def debs_for(tree: Path, folder: Path, packages: tuple[str, ...] = DEBIAN_PACKAGES) -> list[Path]:
    """The .debs ``packages`` need on a node booted from ``tree`` (this machine's apt, the tree's dpkg status)."""
    (folder / "partial").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "apt-get", "-qq", "-y", "--download-only", "--no-install-recommends",
            "-o", f"Dir::State::status={tree / 'var/lib/dpkg/status'}",
            "-o", f"Dir::Cache::archives={folder}",
            "-o", "Debug::NoLocking=1",
            "install", *packages,
        ],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return sorted(folder.glob("*.deb"))


def quoted(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
