"""How day-2 commands see and act on Kubernetes: one small seam, two implementations.

:class:`NotDeployed` when the cluster has no Kubernetes yet (no kubeconfig under the state directory: the
``kubernetes`` stage writes ``<state-dir>/kubeconfig`` when it exists), so that ``status`` says "not
deployed" with the reason and ``redeploy``/``apply`` skip drains and say why. :class:`Kubectl` drives a
real cluster with ``kubectl`` and that kubeconfig (drain, delete, labels, etcd member removal through the
etcd static pod of another control plane).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bootstrap.errors import EnvironmentMissing, RackctlError

#: where the kubernetes stage leaves the admin kubeconfig
KUBECONFIG = "kubeconfig"
#: labels Kubernetes itself sets: never recorded for restoring
SYSTEM_LABEL_PREFIXES = ("kubernetes.io/", "node.kubernetes.io/", "beta.kubernetes.io/", "node-role.kubernetes.io/")


class KubeError(RackctlError):
    """A Kubernetes operation failed (the message names it and kubectl's answer)."""


@dataclass(frozen=True)
class KubeNode:
    """What day-2 commands read of a Kubernetes node."""

    name: str
    ready: bool
    allocatable_gpus: int
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False


class Cluster(Protocol):
    """The Kubernetes a day-2 command works with."""

    @property
    def deployed(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    def nodes(self) -> dict[str, KubeNode]: ...

    def drain(self, node: str) -> None: ...

    def delete_node(self, node: str) -> None: ...

    def uncordon(self, node: str) -> None: ...

    def remove_etcd_member(self, node: str, *, via: str) -> None: ...

    def label(self, node: str, labels: dict[str, str]) -> None: ...


class NotDeployed:
    """No Kubernetes on this cluster yet: nothing to read or drain."""

    deployed = False

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def nodes(self) -> dict[str, KubeNode]:
        return {}

    def _refuse(self, what: str) -> None:
        raise KubeError(f"cannot {what}: {self.reason}")

    def drain(self, node: str) -> None:
        self._refuse(f"drain {node}")

    def delete_node(self, node: str) -> None:
        self._refuse(f"delete node {node}")

    def uncordon(self, node: str) -> None:
        self._refuse(f"uncordon {node}")

    def remove_etcd_member(self, node: str, *, via: str) -> None:
        self._refuse(f"remove {node} from etcd")

    def label(self, node: str, labels: dict[str, str]) -> None:
        self._refuse(f"label {node}")


class Kubectl:
    """A real cluster through ``kubectl --kubeconfig``."""

    deployed = True

    def __init__(self, kubeconfig: Path, *, timeout_s: float = 600.0) -> None:
        self.kubeconfig = kubeconfig
        self.timeout_s = timeout_s
        self.reason = f"kubeconfig {kubeconfig}"

    def _run(self, *args: str) -> str:
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise EnvironmentMissing("kubectl is not on PATH; install it (see `rackctl doctor`)")
        cmd = [kubectl, "--kubeconfig", str(self.kubeconfig), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        if done.returncode != 0:
            raise KubeError(f"kubectl {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def nodes(self) -> dict[str, KubeNode]:
        items = json.loads(self._run("get", "nodes", "-o", "json")).get("items", [])
        return {n.name: n for n in (kube_node(item) for item in items)}

    def drain(self, node: str) -> None:
        self._run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={int(self.timeout_s)}s")

    def delete_node(self, node: str) -> None:
        self._run("delete", "node", node, "--ignore-not-found")

    def uncordon(self, node: str) -> None:
        self._run("uncordon", node)

    def remove_etcd_member(self, node: str, *, via: str) -> None:
        etcdctl = [
            "exec",
            "-n",
            "kube-system",
            f"etcd-{via}",
            "--",
            "etcdctl",
            "--endpoints=https://127.0.0.1:2379",
            "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
            "--cert=/etc/kubernetes/pki/etcd/server.crt",
            "--key=/etc/kubernetes/pki/etcd/server.key",
        ]
        members = json.loads(self._run(*etcdctl, "member", "list", "-w", "json")).get("members", [])
        ids = [m["ID"] for m in members if m.get("name") == node]
        for member in ids:
            self._run(*etcdctl, "member", "remove", format(int(member), "x"))

    def label(self, node: str, labels: dict[str, str]) -> None:
        if labels:
            self._run("label", "node", node, "--overwrite", *(f"{k}={v}" for k, v in sorted(labels.items())))


def kube_node(item: dict[str, Any]) -> KubeNode:
    """A ``kubectl get nodes -o json`` item as a :class:`KubeNode`."""
    meta, status = item.get("metadata", {}), item.get("status", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
    gpus = str(status.get("allocatable", {}).get("nvidia.com/gpu", "0"))
    return KubeNode(
        name=meta.get("name", ""),
        ready=ready,
        allocatable_gpus=int(gpus) if gpus.isdigit() else 0,
        labels=dict(meta.get("labels") or {}),
        unschedulable=bool(item.get("spec", {}).get("unschedulable")),
    )


def user_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels worth restoring after a reinstall: those Kubernetes does not set itself."""
    return {k: v for k, v in labels.items() if not k.startswith(SYSTEM_LABEL_PREFIXES)}


def cluster_for(state_dir: Path) -> Cluster:
    """The cluster of this state directory: :class:`Kubectl` with its kubeconfig, else :class:`NotDeployed`."""
    kubeconfig = Path(state_dir) / KUBECONFIG
    if kubeconfig.is_file():
        return Kubectl(kubeconfig)
    return NotDeployed(f"not deployed: the kubernetes stage has not run (no {kubeconfig})")


class ClusterGate:
    """The rollout scheduler's ``NodeGate`` (``bootstrap.rollout.gate``) over a :class:`Cluster`: firmware and
    driver rollouts drain through the same Kubernetes seam as ``apply`` and ``redeploy``."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def cordon(self, node: str) -> str:
        if not self.cluster.deployed:
            return f"no Kubernetes: not drained ({self.cluster.reason})"
        self.cluster.drain(node)
        return "cordoned and drained"

    def uncordon(self, node: str) -> str:
        if not self.cluster.deployed:
            return f"no Kubernetes: not uncordoned ({self.cluster.reason})"
        self.cluster.uncordon(node)
        return "uncordoned"

    def ready(self, node: str) -> bool:
        if not self.cluster.deployed:
            return True
        found = self.cluster.nodes().get(node)
        return bool(found and found.ready)
