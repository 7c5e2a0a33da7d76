"""A real kubeadm 1.37 HA control plane on three native lab nodes (rackctl_lab/kubenode.py, nspawn.py).

Real parts, all built here from their Go modules at the pinned release (``rackctl lab components``) or from
Debian: kubeadm, kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, etcd, containerd 2.4.2 and
its shim, the lab's own pause, runc; each node a systemd-nspawn machine with its own systemd, network
namespace and cgroups, on a bridge of its own. The images are assembled from the same binaries
(rackctl_lab/components/images.py) and imported into each node's containerd.

What it shows: ``kubeadm init`` on the first node forms a cluster whose node reports v1.37.2 on containerd
2.4.2; two more control planes join with the uploaded certificates; etcd has three voting members; every
control plane serves the API; with the first node powered off, the other two still serve it (etcd keeps
quorum with two of three). No CNI yet (the nodes stay NotReady), and kubeadm is driven here directly, not
through rackctl's roles: see docs/lab-kubernetes.md for what comes next.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bootstrap.provision.image import debootstrap_tree, default_mirror
from bootstrap.provision.ramdisk import cache_root
from rackctl_lab import kubenode, nspawn
from rackctl_lab.components import build, images
from rackctl_lab.components.pins import RELEASES
from rackctl_lab.netns import LabNetwork
from tests import timing

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn (systemd-container) missing"),
]

NETWORK = LabNetwork(name="rackctl-kubeadm-test", bridge="rkkabr0", address="10.203.0.1/24")
NAMES = ("cp-1", "cp-2", "cp-3")
RELEASE = RELEASES["1.37.2"]
ADMIN = "/etc/kubernetes/admin.conf"


class Cluster:
    """The three nodes and how to reach them."""

    def __init__(self, nodes: list[nspawn.NativeNode], key: Path, kubeconfig: Path) -> None:
        self.nodes = nodes
        self.key = key
        self.kubeconfig = kubeconfig

    def ssh(self, node: nspawn.NativeNode, command: str, *, timeout: float = 120) -> str:
        proc = subprocess.run(
            [
                *NETWORK.exec_prefix(),
                "ssh", "-i", str(self.key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"root@{node.ip}", command,
            ],
            capture_output=True, text=True, timeout=timing.seconds(timeout), check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise AssertionError(f"{node.name}: {command!r} exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc.stdout

    def kubectl(self, *args: str, server: str = "") -> subprocess.CompletedProcess[str]:
        """This machine's kubectl 1.37.2 against the cluster (from the bridge's namespace)."""
        extra = [f"--server=https://{server}:6443"] if server else []
        return subprocess.run(
            [*NETWORK.exec_prefix(), str(_built()["kubectl"]), f"--kubeconfig={self.kubeconfig}", *extra, *args],
            capture_output=True, text=True, timeout=timing.seconds(60), check=False,
        )  # fmt: skip


#: CoreDNS and kube-proxy wait for a CNI (the nodes stay NotReady): their add-ons are disabled, their
#: images not assembled, so CoreDNS's long build is not paid here.
SKIPPED_IMAGES = ("coredns/coredns",)


def _programs() -> list[str]:
    return sorted({*kubenode.PROGRAMS, *images.needed_programs(RELEASE, skip=SKIPPED_IMAGES)})


def _built() -> dict[str, Path]:
    return {b.name: Path(b.path) for b in build.build(build.select(RELEASE, _programs()))}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    built = build.build(build.select(RELEASE, _programs()))
    binaries = {b.name: Path(b.path) for b in built}
    assembled = images.assemble(RELEASE, built, skip=SKIPPED_IMAGES)
    tree = debootstrap_tree("bookworm", default_mirror(), cache_root())
    base = tmp_path_factory.mktemp("kubeadm")
    debs = kubenode.debs_for(tree, cache_root() / "debs" / "kubenode")
    key = base / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    NETWORK.up()
    started: list[nspawn.NativeNode] = []
    try:
        for index, name in enumerate(NAMES, start=11):
            node = nspawn.NativeNode(name, f"10.203.0.{index}/24", base / name)
            started.append(node)
            nspawn.start(node, tree, NETWORK, authorized_keys=key.with_suffix(".pub").read_text())
        cluster = Cluster(started, key, base / "admin.conf")
        for node in started:
            kubenode.install(node, binaries, debs, assembled, lambda cmd, n=node: cluster.ssh(n, cmd))
            # what role `baseline` sets on every node (a per-namespace sysctl)
            cluster.ssh(node, "sysctl -qw net.ipv4.ip_forward=1")
        yield cluster
    finally:
        for node in started:
            nspawn.stop(node)
        NETWORK.down()


def _config(node: nspawn.NativeNode, first: nspawn.NativeNode) -> str:
    """kubeadm's InitConfiguration/ClusterConfiguration plus the lab's kubelet concession (cgroup v1)."""
    return f"""\
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint: {{advertiseAddress: {node.ip}}}
nodeRegistration: {{name: {node.name}, criSocket: unix:///run/containerd/containerd.sock}}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v{RELEASE.version}
controlPlaneEndpoint: {first.ip}:6443
networking: {{podSubnet: 10.244.0.0/16, serviceSubnet: 10.96.0.0/12}}
dns: {{disabled: true}}
proxy: {{disabled: true}}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
"""


#: the lab machine's cgroups are v1 (kubeadm's SystemVerification refuses them from 1.35)
IGNORE = "--ignore-preflight-errors=SystemVerification"


@pytest.fixture(scope="module")
def initialised(cluster: Cluster) -> Cluster:
    first = cluster.nodes[0]
    cluster.ssh(first, f"cat > /root/kubeadm.yaml <<'EOF'\n{_config(first, first)}EOF")
    out = cluster.ssh(
        first, f"kubeadm init --config /root/kubeadm.yaml --upload-certs {IGNORE}",
        timeout=300,
    )  # fmt: skip
    assert "Your Kubernetes control-plane has initialized successfully" in out
    cluster.kubeconfig.write_text(cluster.ssh(first, f"cat {ADMIN}"))
    return cluster


def test_kubeadm_init_forms_a_cluster_of_the_pinned_release_on_containerd(initialised: Cluster) -> None:
    def node_listed() -> dict | None:
        proc = initialised.kubectl("get", "nodes", "-o", "json")
        items = json.loads(proc.stdout)["items"] if proc.returncode == 0 else []
        return items[0] if items else None

    node = timing.wait_for(node_listed, timeout=120, what="the first node registered")
    info = node["status"]["nodeInfo"]
    assert node["metadata"]["name"] == "cp-1"
    assert info["kubeletVersion"] == f"v{RELEASE.version}"
    assert info["containerRuntimeVersion"] == f"containerd://{RELEASE.containerd.removeprefix('v')}"
    version = json.loads(initialised.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == f"v{RELEASE.version}"


def test_two_more_control_planes_join_and_etcd_has_three_members(initialised: Cluster) -> None:
    first = initialised.nodes[0]
    key = initialised.ssh(first, "kubeadm certs certificate-key").strip()
    initialised.ssh(first, f"kubeadm init phase upload-certs --upload-certs --certificate-key {key}")
    join = initialised.ssh(first, "kubeadm token create --print-join-command").strip()
    for node in initialised.nodes[1:]:
        out = initialised.ssh(
            node,
            f"{join} --control-plane --certificate-key {key} --apiserver-advertise-address {node.ip} "
            f"--node-name {node.name} --cri-socket unix:///run/containerd/containerd.sock {IGNORE}",
            timeout=300,
        )
        assert "This node has joined the cluster" in out

    def members() -> list[str]:
        proc = initialised.kubectl(
            "-n", "kube-system", "exec", "etcd-cp-1", "--", "etcdctl", "--endpoints=https://127.0.0.1:2379",
            "--cacert=/etc/kubernetes/pki/etcd/ca.crt", "--cert=/etc/kubernetes/pki/etcd/server.crt",
            "--key=/etc/kubernetes/pki/etcd/server.key", "member", "list", "-w", "json",
        )  # fmt: skip
        if proc.returncode != 0:
            return []
        listed = json.loads(proc.stdout).get("members", [])
        return sorted(m["name"] for m in listed if not m.get("isLearner"))

    assert timing.wait_for(lambda: members() == list(NAMES), timeout=120, what="three etcd voters")

    names = initialised.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    assert sorted(names) == list(NAMES)
    for node in initialised.nodes:
        proc = initialised.kubectl("get", "--raw", "/readyz", server=node.ip)
        assert proc.stdout.strip() == "ok", (node.name, proc.stderr)


def test_with_the_first_control_plane_off_the_other_two_serve_the_api(initialised: Cluster) -> None:
    first, second, _ = initialised.nodes
    nspawn.stop(first)

    def served() -> bool:
        proc = initialised.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}", server=second.ip)
        return proc.returncode == 0 and "cp-1" in proc.stdout

    assert timing.wait_for(served, timeout=120, what="the API on cp-2 with cp-1 off")
    # a write needs etcd's quorum: two of three members
    proc = initialised.kubectl("create", "configmap", "quorum-proof", "--from-literal=k=v", server=second.ip)
    assert proc.returncode == 0, proc.stderr
