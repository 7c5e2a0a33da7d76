"""Native lab nodes: systemd-nspawn machines booted from the lab image's root tree, on the lab's bridge.

A control plane runs Go programs (etcd, the API server) that cost 15-30x under qemu TCG, so the lab gives it
a native node instead of a VM: the same Debian tree the lab image is made from, booted by its own systemd in
a container, with a network namespace of its own and a veth port on the lab bridge, reached over SSH like
any node. What this machine imposes (see docs/lab-kubernetes.md): no host systemd to register with
(``--register=no --keep-unit``), a tmpfs under ``/run/systemd/nspawn``, the namespace handed to nspawn
itself (``ip netns exec`` would remount ``/sys`` and hide the cgroup mounts), and a cgroup subtree per node
(with ``--keep-unit`` the container stays in the cgroups it was started in).

The node's root is an overlay: the shared tree read-only below, the node's own changes above, so ten
nodes cost one tree. Nothing leaves the lab's namespace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rackctl_lab.netns import LabNetwork, NetnsError, _ip

NSPAWN_RUN = Path("/run/systemd/nspawn")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "rackctl-lab"
#: What a kubelet and its containers need of a container node (as kind gives its nodes): the kernel log,
#: every capability the host has, and no seccomp filter of nspawn's under the runtime's own.
KUBELET_NEEDS = ("--bind=/dev/kmsg", "--capability=all", "--system-call-filter=@known")


@dataclass(frozen=True)
class NativeNode:
    """One native node: its name, its address on the lab bridge (CIDR) and where it keeps its state."""

    name: str
    address: str
    state: Path
    #: the node's NIC (the inventory's interface name, so rendered configs naming it hold)
    interface: str = "host0"
    #: more addresses on the same NIC (CIDR), e.g. the management network's beside the PXE one
    extra_addresses: tuple[str, ...] = ()

    @property
    def netns(self) -> str:
        return f"rackctl-node-{self.name}"

    @property
    def port(self) -> str:
        """The veth end on the lab bridge (15 characters at most, as the kernel wants)."""
        return f"vn-{self.name}"[:15]

    @property
    def root(self) -> Path:
        return self.state / "root"

    @property
    def ip(self) -> str:
        return self.address.split("/", 1)[0]


def start(
    node: NativeNode,
    tree: Path,
    network: LabNetwork,
    *,
    authorized_keys: str,
    host_key: Path | None = None,
    timeout_s: float = 120,
) -> int:
    """Boot ``node`` from ``tree`` on ``network``'s bridge; return nspawn's PID once its sshd answers.

    ``host_key``: an ed25519 private key file (``.pub`` beside it) the node's sshd presents, so that clients
    can pin it the way they pin an installed node's.
    """
    _nspawn_run_dir()
    _plumb(node, network)
    _overlay(node, tree, authorized_keys, host_key)
    log = (node.state / "console.log").open("wb")
    cgroups = _cgroups(node)
    (node.state / "containerd").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [
            "systemd-nspawn",
            "--quiet",
            "--boot",
            "--register=no",
            "--keep-unit",
            f"--machine={node.name}",
            f"--directory={node.root}",
            f"--network-namespace-path=/run/netns/{node.netns}",
            "--console=passive",
            "--resolv-conf=off",  # the node's own /etc/resolv.conf (see _overlay), not this machine's
            *KUBELET_NEEDS,
            # containerd's overlayfs snapshots cannot have their upper directories on the node's overlay root
            f"--bind={node.state / 'containerd'}:/var/lib/containerd",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        # /proc/sys writable, as the kubelet sets vm.overcommit_memory and kernel.panic* (host-wide: not
        # namespaced); kind's nodes do the same.
        env={**os.environ, "SYSTEMD_NSPAWN_API_VFS_WRITABLE": "1"},
        preexec_fn=lambda: _join(cgroups),  # noqa: PLW1509 - a write of our own PID before exec
    )
    (node.state / "pid").write_text(str(proc.pid))
    try:
        _wait_for_ssh(node, network, proc, timeout_s)
    except BaseException:
        stop(node)
        raise
    return proc.pid


def stop(node: NativeNode, timeout_s: float = 60) -> bool:
    """Power ``node`` off (nspawn asks its systemd to halt), then remove its overlay, namespace and cgroups."""
    pid_file = node.state / "pid"
    was_running = False
    if pid_file.is_file():
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # nspawn turns it into an orderly halt of the container
            was_running = True
            end = time.monotonic() + timeout_s
            while time.monotonic() < end and _alive(pid):
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        pid_file.unlink()
    subprocess.run(["umount", str(node.root)], capture_output=True, check=False)
    _ip("netns", "delete", node.netns, check=False)
    for hierarchy in _hierarchies():
        with contextlib.suppress(OSError):
            (hierarchy / CGROUP_PARENT / node.name).rmdir()
    return was_running


def remove(node: NativeNode) -> None:
    """Delete a stopped node's state (its overlay's upper layer, containerd's images and snapshots: gigabytes
    once a Kubernetes node has run). Refused while anything is still mounted under it, so that nothing a
    mount shows (the shared tree, this machine's files) is ever deleted through it."""
    if (node.state / "pid").exists():
        raise RuntimeError(f"native node {node.name} is still running: stop it first")
    prefix = f"{node.state.resolve()}/"
    mounted = [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if f"{line.split()[1]}/".startswith(prefix)
    ]
    if mounted:
        raise RuntimeError(f"native node {node.name}: {', '.join(mounted)} still mounted; not removed")
    shutil.rmtree(node.state, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split()[2] != "Z"


def _nspawn_run_dir() -> None:
    """nspawn cleans its propagation directory only on a tmpfs; give it one where ``/run`` is not."""
    NSPAWN_RUN.mkdir(parents=True, exist_ok=True)
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    if not any(line.split()[1] == str(NSPAWN_RUN) for line in mounts):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(NSPAWN_RUN)], check=True)


def _plumb(node: NativeNode, network: LabNetwork) -> None:
    """The node's own namespace, its ``host0`` as a veth whose other end is a port of the lab bridge."""
    _ip("netns", "delete", node.netns, check=False)
    _ip("netns", "add", node.netns)
    network.ip_in("link", "delete", node.port, check=False)
    network.ip_in("link", "add", node.port, "type", "veth", "peer", "name", node.interface, "netns", node.netns)
    network.ip_in("link", "set", node.port, "master", network.bridge, "up")
    _ip("-n", node.netns, "link", "set", "lo", "up")
    for address in (node.address, *node.extra_addresses):  # set here: the tree runs no DHCP client
        _ip("-n", node.netns, "addr", "add", address, "dev", node.interface)
    _ip("-n", node.netns, "link", "set", node.interface, "up")
    # the default route the kubelet picks its node address from, via the head node's address on the bridge
    _ip("-n", node.netns, "route", "add", "default", "via", network.ip)


def _overlay(node: NativeNode, tree: Path, authorized_keys: str, host_key: Path | None) -> None:
    """The node's root: ``tree`` read-only below its own upper directory; its name and admin key on top."""
    upper, work = node.state / "upper", node.state / "work"
    for folder in (upper, work, node.root):
        folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["umount", str(node.root)], capture_output=True, check=False)
    options = f"lowerdir={tree},upperdir={upper},workdir={work}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(node.root)], check=True)
    (node.root / "etc/hostname").write_text(node.name + "\n")
    (node.root / "etc/hosts").write_text(f"127.0.0.1 localhost\n{node.ip} {node.name}\n")
    # no name server on the lab's networks until the head node serves one: lookups fail at once (nothing on
    # 127.0.0.1:53) instead of waiting out this machine's resolvers, unreachable from the node's namespace
    resolv = node.root / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    resolv.write_text("# rackctl lab: no name server on this network yet\n")
    machine_id = node.root / "etc/machine-id"
    machine_id.unlink(missing_ok=True)  # systemd makes one at first boot
    # /proc/sys is writable for the kubelet (KUBELET_NEEDS); the node's own sysctl defaults must not be
    # applied to this machine's kernel at every boot
    # and its network is set from outside (no networkd config): "online" must not wait for networkd
    for unit in ("systemd-sysctl.service", "systemd-networkd-wait-online.service"):
        mask = node.root / "etc/systemd/system" / unit
        mask.parent.mkdir(parents=True, exist_ok=True)
        if not mask.is_symlink():
            mask.symlink_to("/dev/null")
    ssh = node.root / "root/.ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh / "authorized_keys").write_text(authorized_keys)
    (ssh / "authorized_keys").chmod(0o600)
    if host_key is not None:  # the node's pinned identity, as provisioning gives an installed node
        for suffix, mode in (("", 0o600), (".pub", 0o644)):
            target = node.root / f"etc/ssh/ssh_host_ed25519_key{suffix}"
            target.write_bytes(Path(f"{host_key}{suffix}").read_bytes())
            target.chmod(mode)


def _hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies (and v2 where mounted alone) a node gets a subtree in."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [p for p in sorted(CGROUP_ROOT.iterdir()) if p.is_dir() and (p / "cgroup.procs").exists()]


def _cgroups(node: NativeNode) -> list[Path]:
    paths = []
    for hierarchy in _hierarchies():
        path = hierarchy / CGROUP_PARENT / node.name
        path.mkdir(parents=True, exist_ok=True)
        if hierarchy.name == "cpuset":  # a new cpuset has no CPUs or memory nodes until given its parent's
            for knob in ("cpuset.cpus", "cpuset.mems"):
                for level in (path.parent, path):
                    (level / knob).write_text((level.parent / knob).read_text())
        paths.append(path)
    return paths


def _join(cgroups: list[Path]) -> None:
    """In the child before exec: move this process into the node's cgroups (nspawn keeps them)."""
    for path in cgroups:
        (path / "cgroup.procs").write_text(str(os.getpid()))


def _wait_for_ssh(node: NativeNode, network: LabNetwork, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until the node's sshd greets from its address on the bridge (an event: its banner), or fail saying why."""
    end = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise NetnsError(f"native node {node.name}: systemd-nspawn exited {proc.returncode}: {_tail(node)}")
        try:
            with network.connect(node.ip, 22, timeout=2) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError as exc:
            last = str(exc)
        time.sleep(0.3)
    raise NetnsError(
        f"native node {node.name}: no sshd on {node.ip}:22 after {timeout_s:.0f} s ({last}): {_tail(node)}"
    )


def _tail(node: NativeNode) -> str:
    log = node.state / "console.log"
    return log.read_text(errors="replace")[-1500:] if log.exists() else "(no console log)"
