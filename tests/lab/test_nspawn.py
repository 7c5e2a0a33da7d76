"""Native lab nodes (rackctl_lab/nspawn.py): two systemd-nspawn machines booted from the lab image's own
debootstrap tree, each in its own network namespace and cgroups, on a bridge of their own, reached over SSH.

Real parts: systemd-nspawn, the node's systemd and sshd, OpenSSH's client, overlayfs, veth and a bridge.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bootstrap.provision.image import debootstrap_tree
from bootstrap.provision.ramdisk import cache_root
from rackctl_lab import nspawn
from rackctl_lab.netns import LabNetwork

pytestmark = [
    pytest.mark.lab,
    pytest.mark.machine,  # nspawn machines: beside no other test's (tests/installed_lab.py)
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn (systemd-container) missing"),
]

NETWORK = LabNetwork(name="rackctl-nspawn-test", bridge="rknsbr0", address="10.201.0.1/24")


@pytest.fixture(scope="module")
def tree() -> Path:
    """The lab image's debootstrap tree (cached, shared with the image build)."""
    from bootstrap.provision.image import default_mirror

    return debootstrap_tree("bookworm", default_mirror(), cache_root())


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def nodes(tree: Path, key: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[nspawn.NativeNode]]:
    NETWORK.up()
    state = tmp_path_factory.mktemp("nodes")
    started = []
    try:
        for index, name in enumerate(("cp-a", "cp-b"), start=11):
            node = nspawn.NativeNode(name, f"10.201.0.{index}/24", state / name)
            started.append(node)
            nspawn.start(node, tree, NETWORK, authorized_keys=key.with_suffix(".pub").read_text())
        yield started
    finally:
        for node in started:
            nspawn.stop(node)
        NETWORK.down()


def _ssh(node: nspawn.NativeNode, key: Path, command: str) -> str:
    proc = subprocess.run(
        [
            *NETWORK.exec_prefix(),
            "ssh",
            "-i",
            str(key),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            f"root@{node.ip}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_each_native_node_boots_its_own_systemd_and_answers_ssh(nodes: list[nspawn.NativeNode], key: Path) -> None:
    for node in nodes:
        assert _ssh(node, key, "hostname") == node.name
        # its own PID 1 is systemd, not this machine's init
        assert _ssh(node, key, "cat /proc/1/comm") == "systemd"
        assert _ssh(node, key, "systemctl is-active ssh") == "active"
        # its sysctl defaults are not applied to this machine's kernel (/proc/sys is writable for the kubelet)
        assert _ssh(node, key, "systemctl is-enabled systemd-sysctl.service || true") == "masked"


def test_native_nodes_reach_each_other_over_the_bridge(nodes: list[nspawn.NativeNode], key: Path) -> None:
    first, second = nodes
    banner = _ssh(
        first, key, f"python3 -c \"import socket; print(socket.create_connection(('{second.ip}', 22), 5).recv(8))\""
    )
    assert "SSH-2.0" in banner


def test_each_node_runs_in_a_cgroup_of_its_own(nodes: list[nspawn.NativeNode]) -> None:
    for node in nodes:
        pid = (node.state / "pid").read_text()
        cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        assert f"/{nspawn.CGROUP_PARENT}/{node.name}" in cgroups


def test_a_node_writes_into_its_overlay_never_into_the_shared_tree(
    nodes: list[nspawn.NativeNode], key: Path, tree: Path
) -> None:
    first, _ = nodes
    _ssh(first, key, "echo mine > /etc/rackctl-native-test")
    assert (first.state / "upper/etc/rackctl-native-test").read_text() == "mine\n"
    assert not (tree / "etc/rackctl-native-test").exists()
    assert (tree / "etc/hostname").read_text().strip() != first.name


def test_a_node_is_removed_only_once_stopped_and_the_shared_tree_stays(
    nodes: list[nspawn.NativeNode], tree: Path, key: Path, tmp_path: Path
) -> None:
    node = nspawn.NativeNode("cp-gone", "10.201.0.21/24", tmp_path / "cp-gone")  # on the module's bridge
    try:
        nspawn.start(node, tree, NETWORK, authorized_keys=key.with_suffix(".pub").read_text())
        _ssh(node, key, "echo mine > /root/proof")
        with pytest.raises(RuntimeError, match="still running: stop it first"):
            nspawn.remove(node)
        assert (node.state / "upper/root/proof").exists()
    finally:
        nspawn.stop(node)
    (node.state / "pid").write_text("1")  # as if running: refused, nothing deleted
    with pytest.raises(RuntimeError, match="still running"):
        nspawn.remove(node)
    (node.state / "pid").unlink()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(node.root)], check=True)  # something mounted under it
    try:
        with pytest.raises(RuntimeError, match="still mounted; not removed"):
            nspawn.remove(node)
    finally:
        subprocess.run(["umount", str(node.root)], check=True)
    assert (node.state / "upper/root/proof").exists()
    nspawn.remove(node)
    assert not node.state.exists()
    assert (tree / "etc/os-release").exists()
