"""A native lab node made ready for rackctl's roles: what a site's installed node has, and the lab's concessions.

What a Kubernetes node has before rackctl's network stage and host side run, for a running
:class:`~rackctl_lab.nspawn.NativeNode`: runc and the tools kubeadm's preflight looks for from Debian's
packages (with dpkg), and etcdctl off PATH (:data:`TEST_ETCDCTL`, for the tests' own reads: a kubeadm node has
none, so rackctl's roles use the etcd pod's). containerd is not installed here: role ``container_runtime``
installs the lab's ``containerd.io`` (the lab's build, packaged in Docker's repository layout:
:func:`rackctl_lab.components.debs.containerd_repository`) from the head node's mirror at exactly
``cluster.versions.containerd``, writes its config and points every upstream registry at the site's registry,
as on a site; the node holds no image until it pulls one from there. kubeadm, kubelet, kubectl, cri-tools
and kubernetes-cni come from the lab's own packages (:mod:`rackctl_lab.components.debs`) through the mirror
and role ``kubernetes_packages``; given to :func:`install`, they are installed with dpkg instead.

Two concessions to the lab machine, both in this module and nowhere in the product: its cgroups are v1
(hybrid), so the node remounts its controller hierarchies read-write before containerd starts (nspawn mounts
them read-only; the node's cgroup namespace keeps it inside its own subtree), and it has no
CAP_SYS_RESOURCE, so containerd clamps the OOM score adjustments it asks runc for
(``restrict_oom_score_adj``; a sandbox's -998 fails in runc otherwise: "can't get final child's PID from
pipe: EOF"). The second is a drop-in (:data:`LAB_DROPIN`) in the directory the product's containerd config
imports, written before the role runs. The cgroupfs driver the lab's kubelets use on cgroup v1 is no
concession: the inventory says it (``kubernetes.kubelet.cgroupDriver``) and the product gives it to the
kubelet and to containerd's runc alike.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from rackctl_lab.nspawn import NativeNode

#: The lab's builds of containerd a node runs, in the lab's containerd.io package (installed by the role).
PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr")
#: etcdctl for the tests' own look at etcd, where no role looks for it (kubeadm installs no etcdctl on a
#: node: rackctl's role ``etcdctl`` then runs the etcd pod's through crictl, as on a site)
TEST_ETCDCTL = "/usr/local/lib/rackctl-lab/etcdctl"
#: What Debian gives the node: the OCI runtime, what kubeadm's preflight looks for, and what the lab's
#: kubelet package depends on (:data:`rackctl_lab.components.debs` shapes it like pkgs.k8s.io's).
DEBIAN_PACKAGES = ("runc", "conntrack", "iptables", "iproute2", "ethtool", "socat", "kmod")
#: The lab's containerd setting, in the drop-in directory role container_runtime's config imports
#: (``container_runtime_dropin_dir``; imported files override the main config): OOM scores clamped.
LAB_DROPIN_PATH = "/etc/containerd/conf.d/rackctl-lab.toml"
LAB_DROPIN = """\
# rackctl lab (rackctl_lab/kubenode.py): a native node's concession, not the product's settings
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
"""

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

Run = Callable[[str], str]


def install(node: NativeNode, binaries: dict[str, Path], debs: list[Path], run: Run) -> None:
    """Install everything on the running ``node``; ``run`` runs a shell command on it (over SSH) and returns stdout.

    ``debs``: the packages installed with dpkg (Debian's, :func:`debs_for`; and the lab's Kubernetes
    packages where no mirror brings them: the kubelet package's postinst enables its unit).
    """
    root = node.root
    tool = root / TEST_ETCDCTL.lstrip("/")
    tool.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binaries["etcdctl"], tool)
    units = root / "etc/systemd/system"
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    unit = "rackctl-lab-cgroups.service"
    (units / unit).write_text(CGROUPS_UNIT)
    if not (wants / unit).is_symlink():
        (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
    dropin = root / LAB_DROPIN_PATH.lstrip("/")
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(LAB_DROPIN)
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
    run("systemctl daemon-reload && systemctl start rackctl-lab-cgroups")


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
