"""The Kubernetes client: ``kubectl`` with the kubeconfig the kubernetes stage leaves, or nothing to talk to.

:class:`NotDeployed` when the cluster has no Kubernetes yet (no kubeconfig under the state directory: the
``kubernetes`` stage writes ``<state-dir>/kubeconfig`` when it exists), so that ``status`` says "not
deployed" with the reason and ``redeploy``/``apply`` skip drains and say why. :class:`Kubectl` drives a
real cluster with ``kubectl`` and that kubeconfig (drain, delete, labels, etcd member removal through the
etcd static pod of another control plane; reading, applying and merge-patching other objects, such as the GPU
Operator's ClusterPolicy). :func:`cluster_for` picks one of the two; :class:`ClusterGate` is the rollout
scheduler's drain gate over either. Callers are written against :mod:`bootstrap.kube.api`'s Protocols.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, NoReturn

from bootstrap.errors import EnvironmentMissing
from bootstrap.kube.api import Cluster, KubeError, KubeNode
from redfish_tools.secrets import redact

#: where the kubernetes stage leaves the admin kubeconfig
KUBECONFIG = "kubeconfig"
#: labels Kubernetes itself sets: never recorded for restoring
SYSTEM_LABEL_PREFIXES = ("kubernetes.io/", "node.kubernetes.io/", "beta.kubernetes.io/", "node-role.kubernetes.io/")


class NotDeployed:
    """No Kubernetes on this cluster yet: nothing to read or drain."""

    deployed = False

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def nodes(self) -> dict[str, KubeNode]:
        return {}

    def _refuse(self, what: str) -> NoReturn:
        raise KubeError(f"cannot {what}: {self.reason}")

    def drain(self, node: str) -> None:
        self._refuse(f"drain {node}")

    def delete_node(self, node: str) -> None:
        self._refuse(f"delete node {node}")

    def uncordon(self, node: str) -> None:
        self._refuse(f"uncordon {node}")

    def remove_etcd_member(self, node: str, *, via: str) -> str:
        self._refuse(f"remove {node} from etcd")

    def label(self, node: str, labels: dict[str, str]) -> None:
        self._refuse(f"label {node}")


#: kubeadm's etcd data directory (``etcd.local.dataDir``), mounted from the host into its etcd pod.
ETCD_DATA_DIR = "/var/lib/etcd"


class Kubectl:
    """A real cluster through ``kubectl --kubeconfig``.

    ``timeout_s`` bounds each request; ``drain_timeout_s`` bounds a drain (kubectl's own ``--timeout``: the
    evictions and the wait for the evicted pods to be gone). A drain that fails or times out leaves the node
    cordoned (kubectl cordons first) and its :class:`KubeError` names the node and what blocked it: the pods
    still there and the PodDisruptionBudgets that allow them no disruption.
    """

    deployed = True

    def __init__(self, kubeconfig: Path, *, timeout_s: float = 60.0, drain_timeout_s: float = 600.0) -> None:
        self.kubeconfig = kubeconfig
        self.timeout_s = timeout_s
        self.drain_timeout_s = drain_timeout_s
        self.reason = f"kubeconfig {kubeconfig}"

    def _run(self, *args: str, timeout_s: float | None = None) -> str:
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise EnvironmentMissing("kubectl is not on PATH; install it (see `rackctl doctor`)")
        cmd = [kubectl, "--kubeconfig", str(self.kubeconfig), f"--request-timeout={_seconds(self.timeout_s)}s", *args]
        limit = timeout_s or self.timeout_s
        what = " ".join(args)
        try:
            # stdin closed: kubectl must never prompt (it asks for a username when the kubeconfig has none)
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=limit, check=False, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise KubeError(f"kubectl {what} did not finish within {limit:.0f} s ({self.reason})") from None
        if done.returncode != 0:
            answer = _last_lines(done.stderr or done.stdout)
            raise KubeError(redact(f"kubectl {what} failed ({self.reason}): {answer}"))
        return done.stdout

    def _json(self, *args: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self._run(*args, "-o", "json"))
        return data

    def nodes(self) -> dict[str, KubeNode]:
        items = self._json("get", "nodes").get("items", [])
        return {n.name: n for n in (kube_node(item) for item in items)}

    def drain(self, node: str) -> None:
        """Cordon ``node`` and evict its pods (DaemonSet pods stay), waiting until they are gone."""
        wait = _seconds(self.drain_timeout_s)
        try:
            self._run(
                "drain",
                node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                f"--timeout={wait}s",
                timeout_s=wait + self.timeout_s,
            )
        except KubeError as exc:
            raise KubeError(
                f"drain {node} failed within {wait} s, {self._after_failed_drain(node)} ({exc.message})"
            ) from None

    def _after_failed_drain(self, node: str) -> str:
        """Where a failed drain left ``node``, in words: cordoned or not, and what blocked it."""
        try:
            found = self.nodes().get(node)
        except KubeError:
            return f"{node}'s state unknown (the API did not answer)"
        if found is None:
            return f"{node} is no Kubernetes node"
        where = f"{node} is left cordoned" if found.unschedulable else f"{node} is not cordoned"
        blocking = self._blocking(node)
        return where + (f"; blocked by {blocking}" if blocking else "")

    def _blocking(self, node: str) -> str:
        """The pods left on ``node`` (not DaemonSet pods) and the disruption budgets that hold them, in words."""
        try:
            pods = self._json("get", "pods", "--all-namespaces", f"--field-selector=spec.nodeName={node}")
            budgets = self._json("get", "poddisruptionbudgets", "--all-namespaces")
        except (KubeError, ValueError):
            return ""
        return "; ".join(blocking_pods(pods.get("items", []), budgets.get("items", [])))

    def delete_node(self, node: str) -> None:
        self._run("delete", "node", node, "--ignore-not-found")

    def uncordon(self, node: str) -> None:
        self._run("uncordon", node)

    def remove_etcd_member(self, node: str, *, via: str) -> str:
        """Remove ``node`` from etcd through the etcd static pod on control plane ``via`` (``kubectl exec``: needs
        a kubelet), after an etcd snapshot there; returns what was done.

        The snapshot is written by the pod's etcdctl into etcd's data directory, which kubeadm's etcd pod mounts
        from ``via``'s host (``/var/lib/etcd/rackctl-etcd-before-remove-<node>-<UTC>.db``). A node that is no
        etcd member is left alone: no snapshot, nothing removed.
        """
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
        ids = [format(int(m["ID"]), "x") for m in members if m.get("name") == node]
        if not ids:
            return f"{node} is no etcd member (listed through etcd-{via}): nothing removed"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        snapshot = f"{ETCD_DATA_DIR}/rackctl-etcd-before-remove-{node}-{stamp}.db"
        self._run(*etcdctl, "snapshot", "save", snapshot, timeout_s=max(self.timeout_s, 300.0))
        for member in ids:
            self._run(*etcdctl, "member", "remove", member)
        return f"etcd snapshot {snapshot} on {via} first, then member {', '.join(ids)} removed"

    def label(self, node: str, labels: dict[str, str]) -> None:
        if labels:
            self._run("label", "node", node, "--overwrite", *(f"{k}={v}" for k, v in sorted(labels.items())))

    # -- live apply (bootstrap.kube.apply, bootstrap.kube.node_labels) ----------------------------
    def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """One object as JSON, or ``None`` when the server has no such object."""
        where = ["-n", namespace] if namespace else []
        text = self._run("get", kind, name, *where, "--ignore-not-found", "-o", "json")
        found: dict[str, Any] | None = json.loads(text) if text.strip() else None
        return found

    def get_manifest(self, manifest: Path) -> list[dict[str, Any]]:
        """The objects of ``manifest`` as the server has them (those it lacks left out)."""
        text = self._run("get", "-f", str(manifest), "--ignore-not-found", "-o", "json")
        data: dict[str, Any] = json.loads(text) if text.strip() else {}
        items: list[dict[str, Any]] = data.get("items", []) if data.get("kind") == "List" else [data] if data else []
        return items

    def objects(self, resource: str) -> list[dict[str, Any]]:
        """Every object of a cluster-scoped ``resource`` (``plural.group``)."""
        items: list[dict[str, Any]] = self._json("get", resource).get("items", [])
        return items

    def merge_patch(self, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None) -> None:
        """A JSON merge patch (``metadata.resourceVersion`` in it makes the server refuse a stale one)."""
        where = ["-n", namespace] if namespace else []
        self._run("patch", kind, name, *where, "--type=merge", "-p", json.dumps(patch))

    def apply_server_side(self, manifest: Path, *, field_manager: str) -> str:
        """``kubectl apply --server-side --field-manager=…`` of ``manifest``; kubectl's output."""
        return self._run("apply", "--server-side", f"--field-manager={field_manager}", "-f", str(manifest))

    def namespaced_objects(self, resource: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The objects of ``resource`` in ``namespace`` that the label ``selector`` selects."""
        items: list[dict[str, Any]] = self._json("get", resource, "-n", namespace, "-l", selector).get("items", [])
        return items

    def delete_object(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete one object, its dependents left to the garbage collector (propagation Background); a missing
        object is no error, and kubectl does not wait for the object to be gone."""
        where = ["-n", namespace] if namespace else []
        self._run("delete", kind, name, *where, "--cascade=background", "--ignore-not-found", "--wait=false")

    def logs(self, ref: str, namespace: str, *, tail: int = 400, wait_s: float = 10.0) -> str:
        """``kubectl logs`` of ``ref`` (``job/NAME`` reads the Job's first pod): its last ``tail`` lines.

        Needs the kubelet of the pod's node (the API server forwards the request to it)."""
        return self._run("logs", ref, "-n", namespace, f"--tail={tail}", f"--pod-running-timeout={_seconds(wait_s)}s")

    def served_kinds(self, api_version: str) -> set[str]:
        """The kinds the server serves under ``api_version`` (``v1``, ``apps/v1``); empty when it serves none."""
        if api_version not in set(self._run("api-versions").split()):
            return set()
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        resources = json.loads(self._run("get", "--raw", path)).get("resources", [])
        return {r["kind"] for r in resources if "/" not in r.get("name", "")}


def _seconds(value: float) -> int:
    """Whole seconds for kubectl, at least 1 (``--timeout=0s`` would mean "wait forever")."""
    return max(1, math.ceil(value))


def _last_lines(text: str, keep: int = 4) -> str:
    """kubectl's answer in short: its error lines (else every line), each once (a retried eviction repeats
    its line), the last ``keep`` of them."""
    lines = list(dict.fromkeys(line.strip() for line in text.strip().splitlines() if line.strip()))
    errors = [line for line in lines if line.lower().startswith("error")]
    return " | ".join((errors or lines)[-keep:]) or "no output"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects ``labels``; an empty one selects all."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


def blocking_pods(pods: list[dict[str, Any]], budgets: list[dict[str, Any]]) -> list[str]:
    """Pods a drain could not evict (not DaemonSet pods, not finished) with the budgets that hold them."""
    out = []
    for pod in pods:
        meta = pod.get("metadata", {})
        owners = meta.get("ownerReferences") or []
        if any(o.get("controller") and o.get("kind") == "DaemonSet" for o in owners):
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        namespace, labels = meta.get("namespace", ""), meta.get("labels") or {}
        held = [
            f"PodDisruptionBudget {namespace}/{b['metadata']['name']} allows "
            f"{b.get('status', {}).get('disruptionsAllowed', 0)} disruption(s)"
            for b in budgets
            if b.get("metadata", {}).get("namespace") == namespace
            and _selects(b.get("spec", {}).get("selector") or {}, labels)
            and int(b.get("status", {}).get("disruptionsAllowed", 0)) < 1
        ]
        out.append(f"pod {namespace}/{meta.get('name', '?')}" + (f" ({', '.join(held)})" if held else ""))
    return out


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
    driver rollouts drain through the same Kubernetes seam as ``apply`` and ``redeploy``.

    A node Kubernetes does not know (not joined, or a head node outside the cluster) is neither drained nor
    judged by Kubernetes: the gate says so, and counts it Ready (the rollout still checks its BMC and OS).
    """

    def __init__(self, cluster: Cluster, *, max_age_s: float = 5.0) -> None:
        self.cluster = cluster
        self.max_age_s = max_age_s
        self._nodes: tuple[float, dict[str, KubeNode]] | None = None

    def _read(self) -> dict[str, KubeNode]:
        """The cluster's nodes, read at most every ``max_age_s`` (a rollout asks about every node at once)."""
        if self._nodes is None or time.monotonic() - self._nodes[0] > self.max_age_s:
            self._nodes = (time.monotonic(), self.cluster.nodes())
        return self._nodes[1]

    def _known(self, node: str) -> bool:
        return node in self._read()

    def cordon(self, node: str) -> str:
        if not self.cluster.deployed:
            return f"no Kubernetes: not drained ({self.cluster.reason})"
        if not self._known(node):
            return "not a Kubernetes node: not drained"
        self.cluster.drain(node)
        return "cordoned and drained"

    def uncordon(self, node: str) -> str:
        if not self.cluster.deployed:
            return f"no Kubernetes: not uncordoned ({self.cluster.reason})"
        if not self._known(node):
            return "not a Kubernetes node: not uncordoned"
        self.cluster.uncordon(node)
        return "uncordoned"

    def ready(self, node: str) -> bool:
        if not self.cluster.deployed:
            return True
        found = self._read().get(node)
        return found is None or found.ready
