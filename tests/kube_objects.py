"""Objects a test makes on the real kube-apiserver, and the kubelet's and controllers' parts played by hand.

The API server of tests/cluster/apiserver.py runs alone: no kubelet, no controller-manager, no scheduler.
What those would do, a test does itself through the API, and says so where it calls these helpers:

- :meth:`KubeObjects.node_status` writes a Node's Ready condition and its capacity/allocatable
  (``nvidia.com/gpu``) as the kubelet (and the NVIDIA device plugin) would report them;
- :meth:`KubeObjects.pod` binds a pod to a node (``spec.nodeName``, as the scheduler would) and marks it
  Running and Ready as the kubelet would;
- :meth:`KubeObjects.budget` writes a PodDisruptionBudget's status as the disruption controller would;
- :class:`PodFinaliser` removes pods the API server deleted gracefully (``deletionTimestamp`` set), as the
  kubelet does once their containers have stopped.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from tests.cluster.apiserver import ApiServer
from tests.cluster.apiserver_apply import apply_crds

MERGE = {"Content-Type": "application/merge-patch+json"}


class KubeObjects:
    """Nodes, namespaces and workloads made by one test; :meth:`cleanup` removes them."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.nodes: set[str] = set()
        self.namespaces: set[str] = set()

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        resp = self.server.request(method, path, json=body, **kwargs)
        if resp.status_code >= 400:
            raise AssertionError(f"{method} {path}: {resp.status_code} {resp.text[-800:]}")
        data: dict[str, Any] = resp.json() if resp.content else {}
        return data

    # -- nodes --------------------------------------------------------------------------------------
    def node(self, name: str, *, ready: bool = True, gpus: int = 0, labels: dict[str, str] | None = None) -> None:
        """A Node object as kubelet registration makes it, then its status (see :meth:`node_status`)."""
        meta = {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}
        self.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": meta})
        self.nodes.add(name)
        self.node_status(name, ready=ready, gpus=gpus)

    def node_status(self, name: str, *, ready: bool, gpus: int = 0) -> None:
        """Stands in for the kubelet: the Ready condition and the GPUs the device plugin advertises."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        resources = {"cpu": "8", "memory": "32Gi", "pods": "110", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        condition = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "set by the test (no kubelet runs here)",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        status = {"conditions": [condition], "capacity": resources, "allocatable": resources}
        self.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, headers=MERGE)

    def get_node(self, name: str) -> dict[str, Any]:
        return self.call("GET", f"/api/v1/nodes/{name}")

    def node_exists(self, name: str) -> bool:
        return self.server.request("GET", f"/api/v1/nodes/{name}").status_code == 200

    # -- workloads ----------------------------------------------------------------------------------
    def namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.namespaces.add(name)
        return name

    def controller(self, namespace: str, kind: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
        """A DaemonSet or ReplicaSet object (no controller runs: it never makes pods itself); its owner ref."""
        plural = {"DaemonSet": "daemonsets", "ReplicaSet": "replicasets"}[kind]
        template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "pause"}]}}
        obj = self.call(
            "POST",
            f"/apis/apps/v1/namespaces/{namespace}/{plural}",
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": labels}, "template": template},
            },
        )
        uid = obj["metadata"]["uid"]
        return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": True}

    def pod(
        self, namespace: str, name: str, node: str, *, labels: dict[str, str], owner: dict[str, Any] | None = None
    ) -> None:
        """A pod bound to ``node`` (as the scheduler would), then Running and Ready (as the kubelet would)."""
        meta: dict[str, Any] = {"name": name, "labels": labels}
        if owner:
            meta["ownerReferences"] = [owner]
        spec = {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]}
        self.call(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec},
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "startTime": now,
        }
        self.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status}, headers=MERGE)

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.call(
            "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"}
        )["items"]
        return items

    def budget(self, namespace: str, name: str, labels: dict[str, str], *, healthy: int, allowed: int) -> None:
        """A PodDisruptionBudget (minAvailable = ``healthy``), and its status as the disruption controller
        would write it: ``allowed`` disruptions, observed at its generation (else evictions get a 429 too)."""
        base = f"/apis/policy/v1beta1/namespaces/{namespace}/poddisruptionbudgets"
        obj = self.call(
            "POST",
            base,
            {
                "apiVersion": "policy/v1beta1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name},
                "spec": {"minAvailable": healthy, "selector": {"matchLabels": labels}},
            },
        )
        status = {
            "observedGeneration": obj["metadata"].get("generation", 1),
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": healthy,
            "expectedPods": healthy,
        }
        self.call("PATCH", f"{base}/{name}/status", {"status": status}, headers=MERGE)

    # -- cleanup ------------------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Delete the test's pods at once (no kubelet to finish a graceful delete) and its nodes.

        Namespaces stay (Terminating needs the namespace controller); their names are unique per test."""
        for namespace in self.namespaces:
            self.server.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", params={"gracePeriodSeconds": "0"})
        for node in self.nodes:
            self.server.request("DELETE", f"/api/v1/nodes/{node}")


class PodFinaliser:
    """Stands in for the kubelet: removes pods of ``nodes`` that the API server deleted gracefully (an
    eviction sets ``deletionTimestamp``; the kubelet would stop the containers and delete the pod for good).
    Records the pods it finalised, in order."""

    def __init__(self, kube: KubeObjects, nodes: list[str], *, poll_s: float = 0.2) -> None:
        self.kube, self.nodes, self.poll_s = kube, nodes, poll_s
        self.finalised: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pod-finaliser", daemon=True)

    def __enter__(self) -> PodFinaliser:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for node in self.nodes:
                for pod in self.kube.pods_on(node):
                    meta = pod["metadata"]
                    if meta.get("deletionTimestamp"):
                        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                        resp = self.kube.server.request("DELETE", path, params={"gracePeriodSeconds": "0"})
                        if resp.status_code in (200, 202):
                            self.finalised.append(f"{meta['namespace']}/{meta['name']}")
            self._stop.wait(self.poll_s)


def mark_deployment_ready(kube: KubeObjects, namespace: str, name: str) -> None:
    """Stands in for the Deployment controller and the kubelet: the Deployment's status as they would write it
    once every replica of the current generation runs and passes its readiness probe."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    dep = kube.call("GET", path)
    replicas = int(dep["spec"].get("replicas", 1))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {"status": "True", "lastUpdateTime": now, "lastTransitionTime": now}
    status = {
        "observedGeneration": dep["metadata"]["generation"],
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {"type": "Available", "reason": "MinimumReplicasAvailable", "message": "set by the test", **condition},
            {"type": "Progressing", "reason": "NewReplicaSetAvailable", "message": "set by the test", **condition},
        ],
    }
    kube.call("PATCH", f"{path}/status", {"status": status}, headers=MERGE)


class DeploymentReadier:
    """Stands in for the Deployment controller and the kubelet while a stage runs: marks the Deployments of
    ``names`` in ``namespace`` ready (:func:`mark_deployment_ready`) as soon as they exist. Records them."""

    def __init__(self, kube: KubeObjects, namespace: str, names: list[str], *, poll_s: float = 0.2) -> None:
        self.kube, self.namespace, self.names, self.poll_s = kube, namespace, names, poll_s
        self.readied: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="deployment-readier", daemon=True)

    def __enter__(self) -> DeploymentReadier:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self.readied) < len(self.names):
            for name in self.names:
                path = f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{name}"
                if name not in self.readied and self.kube.server.request("GET", path).status_code == 200:
                    mark_deployment_ready(self.kube, self.namespace, name)
                    self.readied.append(name)
            self._stop.wait(self.poll_s)


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _await_crd_gone(server: ApiServer, name: str, timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while server.request("GET", f"{CRDS}/{name}").status_code != 404:
        if time.monotonic() > end:
            raise AssertionError(f"CRD {name} still there after {timeout_s} s")
        time.sleep(0.2)


@contextlib.contextmanager
def crd_absent(server: ApiServer, name: str) -> Iterator[None]:
    """The session's API server without CRD ``name`` for the block (other tests of the session create it);
    afterwards as it was before (put back and Established, or absent)."""
    resp = server.request("GET", f"{CRDS}/{name}")
    saved = resp.json() if resp.status_code == 200 else None
    if saved is not None:
        server.request("DELETE", f"{CRDS}/{name}")
        _await_crd_gone(server, name)
    try:
        yield
    finally:
        server.request("DELETE", f"{CRDS}/{name}")  # the block may have created it
        _await_crd_gone(server, name)
        if saved is not None:
            meta = {k: saved["metadata"][k] for k in ("name", "labels", "annotations") if k in saved["metadata"]}
            body = {"apiVersion": saved["apiVersion"], "kind": saved["kind"], "metadata": meta, "spec": saved["spec"]}
            apply_crds(server, [body])
