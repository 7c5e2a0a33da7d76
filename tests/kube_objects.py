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

Whatever must act while the command under test runs is one stand-in per role, each a :class:`BackgroundPoller`:
:class:`PodFinaliser`, :class:`DeploymentReadier`, :class:`WorkloadReadier`, :class:`JobControllerStandIn`,
:class:`DevicePluginStandIn`; :class:`NodeSampler` is the base of the tests' watchers of the Nodes.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, Self

import requests

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
        """A unique namespace, created."""
        name = self.namespace_name(prefix)
        self.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def namespace_name(self, prefix: str) -> str:
        """A unique namespace name that the code under test creates; counted as the test's (:meth:`cleanup`)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
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
        base = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
        obj = self.call(
            "POST",
            base,
            {
                "apiVersion": "policy/v1",
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


class BackgroundPoller:
    """A daemon thread that calls :meth:`poll` every ``poll_s`` seconds while the ``with`` block runs (until
    :meth:`finished`); the base of the controllers' and kubelet's parts that must act while a stage runs."""

    thread_name = "poller"
    #: how long leaving the ``with`` block waits for the thread to end
    join_s = 10.0

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        #: what went wrong in a round (the round is retried at the next poll); tests assert it empty
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.join_s)

    def pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` inside :meth:`poll`; True when the ``with`` block ended meanwhile (return then)."""
        return self._stop.wait(seconds)

    def finished(self) -> bool:
        """Nothing more to do: the thread ends (never, unless a subclass says so)."""
        return False

    def poll(self) -> None:
        """One round of the work."""
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.is_set() and not self.finished():
            try:
                self.poll()
            except Exception as exc:  # a stand-in outlives one failed round (e.g. a loaded API server timing out)
                self.errors.append(f"{type(self).__name__}.poll: {exc!r}")
            self._stop.wait(self.poll_s)


class PodFinaliser(BackgroundPoller):
    """Stands in for the kubelet: removes pods of ``nodes`` that the API server deleted gracefully (an
    eviction sets ``deletionTimestamp``; the kubelet would stop the containers and delete the pod for good).
    Records the pods it finalised, in order."""

    thread_name = "pod-finaliser"

    def __init__(self, kube: KubeObjects, nodes: list[str], *, poll_s: float = 0.2) -> None:
        super().__init__(poll_s)
        self.kube, self.nodes = kube, nodes
        self.finalised: list[str] = []

    def poll(self) -> None:
        for node in self.nodes:
            for pod in self.kube.pods_on(node):
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                    resp = self.kube.server.request("DELETE", path, params={"gracePeriodSeconds": "0"})
                    if resp.status_code in (200, 202):
                        self.finalised.append(f"{meta['namespace']}/{meta['name']}")


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


class DeploymentReadier(BackgroundPoller):
    """Stands in for the Deployment controller and the kubelet while a stage runs: marks the Deployments of
    ``names`` in ``namespace`` ready (:meth:`roll_out`) as soon as they exist. Records them."""

    thread_name = "deployment-readier"

    def __init__(self, kube: KubeObjects, namespace: str, names: list[str], *, poll_s: float = 0.2) -> None:
        super().__init__(poll_s)
        self.kube, self.namespace, self.names = kube, namespace, names
        self.readied: list[str] = []

    def finished(self) -> bool:
        return len(self.readied) >= len(self.names)

    def poll(self) -> None:
        for name in self.names:
            path = f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{name}"
            if name not in self.readied and self.kube.server.request("GET", path).status_code == 200:
                self.roll_out(name)
                self.readied.append(name)

    def roll_out(self, name: str) -> None:
        """What the components stood in for write once Deployment ``name`` exists: its status rolled out."""
        mark_deployment_ready(self.kube, self.namespace, name)


WORKLOAD_PLURALS = {"Deployment": "deployments", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}


def mark_workload_ready(kube: KubeObjects, kind: str, namespace: str, name: str) -> None:
    """Stands in for the workload's controller and the kubelet: the status of a Deployment
    (:func:`mark_deployment_ready`), DaemonSet (two nodes run it) or StatefulSet once every replica/pod is ready."""
    if kind == "Deployment":
        mark_deployment_ready(kube, namespace, name)
        return
    path = f"/apis/apps/v1/namespaces/{namespace}/{WORKLOAD_PLURALS[kind]}/{name}"
    obj = kube.call("GET", path)
    generation = obj["metadata"]["generation"]
    if kind == "DaemonSet":  # two nodes would run it
        status = {
            "observedGeneration": generation,
            "currentNumberScheduled": 2,
            "desiredNumberScheduled": 2,
            "numberMisscheduled": 0,
            "numberReady": 2,
            "updatedNumberScheduled": 2,
            "numberAvailable": 2,
        }
    else:
        replicas = obj["spec"]["replicas"]
        status = {
            "observedGeneration": generation,
            "replicas": replicas,
            "readyReplicas": replicas,
            "currentReplicas": replicas,
            "updatedReplicas": replicas,
            "currentRevision": "r1",
            "updateRevision": "r1",
        }
    kube.call("PATCH", f"{path}/status", {"status": status}, headers=MERGE)


class WorkloadReadier(BackgroundPoller):
    """Stands in for the Deployment, DaemonSet and StatefulSet controllers and the kubelet: marks every such
    workload of ``namespace`` ready (:func:`mark_workload_ready`) whenever its generation is newer than its
    status says (a new one, or one an upgrade changed). Records ``Kind/name`` each time."""

    thread_name = "workload-readier"

    def __init__(self, kube: KubeObjects, namespace: str, *, poll_s: float = 0.2) -> None:
        super().__init__(poll_s)
        self.kube, self.namespace = kube, namespace
        self.readied: list[str] = []

    def poll(self) -> None:
        for kind, plural in WORKLOAD_PLURALS.items():
            items = self.kube.call("GET", f"/apis/apps/v1/namespaces/{self.namespace}/{plural}")["items"]
            for obj in items:
                meta = obj["metadata"]
                if obj.get("status", {}).get("observedGeneration", 0) < meta["generation"]:
                    mark_workload_ready(self.kube, kind, self.namespace, meta["name"])
                    self.readied.append(f"{kind}/{meta['name']}")


class NodeSampler(BackgroundPoller):
    """Reads the Nodes every ``poll_s`` while the ``with`` block runs and hands each sample (node name ->
    Node object) to :meth:`sample`; the base of the tests' watchers of cordons."""

    thread_name = "node-sampler"

    def __init__(self, kube: KubeObjects, *, poll_s: float) -> None:
        super().__init__(poll_s)
        self.kube = kube

    def nodes(self) -> dict[str, dict[str, Any]]:
        """The Nodes the API server has now, by name."""
        return {i["metadata"]["name"]: i for i in self.kube.call("GET", "/api/v1/nodes")["items"]}

    def unschedulable(self) -> dict[str, bool]:
        """Each Node's ``spec.unschedulable`` now, by name."""
        return {name: bool(node["spec"].get("unschedulable")) for name, node in self.nodes().items()}

    def poll(self) -> None:
        self.sample(self.nodes())

    def sample(self, nodes: dict[str, dict[str, Any]]) -> None:
        """One sample of the Nodes."""
        raise NotImplementedError


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


class JobControllerStandIn(BackgroundPoller):
    """Stands in for the Job controller, the scheduler and the kubelet while a command waits on Jobs in
    ``namespace``: for each new Job, ``decide(job)`` says what becomes of it, and the thread writes through
    the API what those components would have written:

    - ``"complete"``: a pod of the Job (labels and owner as the Job controller makes them) bound to a node that
      matches the Job's ``nodeSelector``, Succeeded; the Job's status ``succeeded: 1`` and condition Complete;
    - ``"fail"``: the pod Failed (container terminated, exit code 1); the Job's condition Failed
      (BackoffLimitExceeded);
    - ``"pending"``: the pod left Pending with the scheduler's PodScheduled=False (``Insufficient
      nvidia.com/gpu``); the Job active;
    - ``None``: nothing (as if no controller ran).

    Records every Job as it first saw it (``seen``, by name). A write the API server refuses or does not answer
    (a loaded machine) is retried at the next poll, the same pod again (``retried`` says what went wrong);
    ``errors`` holds what the test's own ``decide`` or node choice raised."""

    thread_name = "job-controller-stand-in"

    def __init__(
        self, kube: KubeObjects, namespace: str, decide: Any, nodes: dict[str, dict[str, str]], *, poll_s: float = 0.1
    ) -> None:
        super().__init__(poll_s)
        self.kube, self.namespace, self.decide, self.nodes = kube, namespace, decide, nodes
        self.seen: dict[str, dict[str, Any]] = {}
        self.done: set[str] = set()
        self.retried: list[str] = []

    def poll(self) -> None:
        try:
            resp = self.kube.server.request("GET", f"/apis/batch/v1/namespaces/{self.namespace}/jobs")
        except requests.RequestException as exc:
            self.retried.append(f"list Jobs: {exc!r}")
            return
        for job in resp.json().get("items", []) if resp.status_code == 200 else []:
            name = job["metadata"]["name"]
            if name in self.done:
                continue
            self.seen.setdefault(name, job)
            try:
                what = self.decide(job)
                node = self._node_for(job) if what not in (None, "pending") else None
            except (AssertionError, StopIteration, KeyError) as exc:  # the test's own logic: the test reads them
                self.errors.append(f"{name}: {exc!r}")
                self.done.add(name)
                continue
            try:
                self._act(job, what, node)
            except (AssertionError, requests.RequestException) as exc:  # the API server's answer: next poll
                self.retried.append(f"{name}: {exc!r}")
                continue
            self.done.add(name)

    def _node_for(self, job: dict[str, Any]) -> str:
        selector = job["spec"]["template"]["spec"].get("nodeSelector", {})
        return next(n for n, labels in self.nodes.items() if all(labels.get(k) == v for k, v in selector.items()))

    def _act(self, job: dict[str, Any], what: str | None, node: str | None) -> None:
        """Write what the controllers would; idempotent (a retry finds the pod it made before)."""
        if what is None:
            return
        meta, template = job["metadata"], job["spec"]["template"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        pod_name = f"{meta['name']}-{meta['uid'][:5]}"  # the same on a retry
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True}
        spec = dict(template["spec"])
        if node is not None:
            spec["nodeName"] = node
        pod_meta = {"name": pod_name, "labels": template["metadata"]["labels"], "ownerReferences": [owner]}
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}
        made = self.kube.server.request("POST", base, json=pod)
        if made.status_code not in (201, 409):  # 409: made by an earlier try of this Job
            raise AssertionError(f"POST {base}: {made.status_code} {made.text[-800:]}")
        container = spec["containers"][0]["name"]
        job_status: dict[str, Any] = {"startTime": now}
        if what == "pending":
            message = "0/5 nodes are available: 1 Insufficient nvidia.com/gpu, 4 node(s) didn't match node selector."
            pod_status: dict[str, Any] = {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                ],
            }
            job_status["active"] = 1
        else:
            code = 0 if what == "complete" else 1
            terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": now}
            terminated |= {"finishedAt": now} | ({} if code == 0 else {"message": "set by the test: exit 1"})
            pod_status = {
                "phase": "Succeeded" if code == 0 else "Failed",
                "startTime": now,
                "containerStatuses": [
                    {
                        "name": container,
                        "image": spec["containers"][0]["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": terminated},
                    }
                ],
            }
            condition = (
                {"type": "Complete", "status": "True"}
                if code == 0
                else {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            )
            # The Job controller first records the terminal target (SuccessCriteriaMet / FailureTarget); a
            # current API server refuses Complete or Failed without it.
            target = {"type": "SuccessCriteriaMet" if code == 0 else "FailureTarget", "status": "True"}
            target |= {k: v for k, v in condition.items() if k in ("reason", "message")}
            job_status |= {
                "succeeded" if code == 0 else "failed": 1,
                "conditions": [{**c, "lastProbeTime": now, "lastTransitionTime": now} for c in (target, condition)],
            }
            if code == 0:
                job_status["completionTime"] = now
        self.kube.call("PATCH", f"{base}/{pod_name}/status", {"status": pod_status}, headers=MERGE)
        path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{meta['name']}/status"
        self.kube.call("PATCH", path, {"status": job_status}, headers=MERGE)


class DevicePluginStandIn(BackgroundPoller):
    """Stands in for the GPU Operator's device plugin and GPU feature discovery on GPU nodes: once the Deployment
    ``operator`` (``namespace/name``) exists, and ``delay_s`` later (a device plugin starts minutes after the
    operator's install), writes each node's ``nvidia.com/gpu`` capacity and allocatable (``gpus``: node -> count)
    through the status subresource and its ``nvidia.com/gpu.product`` label (``products``: node -> label).
    ``written`` holds the monotonic time the writes began, once they are done."""

    thread_name = "device-plugin-stand-in"

    def __init__(
        self,
        kube: KubeObjects,
        gpus: dict[str, int],
        products: dict[str, str],
        *,
        operator: str = "gpu-operator/gpu-operator",
        delay_s: float = 2.0,
        poll_s: float = 0.2,
    ) -> None:
        super().__init__(poll_s)
        self.kube, self.gpus, self.products, self.operator = kube, gpus, products, operator
        self.delay_s = delay_s
        self.written: float | None = None

    def finished(self) -> bool:
        return self.written is not None

    def poll(self) -> None:
        namespace, name = self.operator.split("/")
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
        if self.kube.server.request("GET", path).status_code != 200 or self.pause(self.delay_s):
            return
        began = time.monotonic()  # a watcher may see the first node's GPUs before the last write returns
        for node, count in self.gpus.items():
            gpus = {"nvidia.com/gpu": str(count)}
            self.kube.call(
                "PATCH",
                f"/api/v1/nodes/{node}/status",
                {"status": {"capacity": gpus, "allocatable": gpus}},
                headers=MERGE,
            )
            labels = {"nvidia.com/gpu.product": self.products[node]}
            self.kube.call("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}}, headers=MERGE)
        self.written = began
