"""DCGM exporters for the tests: real HTTP servers serving the recorded metrics, behind stand-in exporter pods
on the real kube-apiserver 1.37.2.

Each GPU node's exporter is a :class:`MetricsServer` (``http.server`` in a thread) on a non-loopback address of
this host (the API server's pod proxy refuses a pod IP in 127.0.0.0/8), serving that node's slice of
``tests/nvidia/fixtures/dcgm-metrics.txt`` at ``/metrics`` as dcgm-exporter serves it on :9400.

No kubelet, scheduler or DaemonSet controller runs here. What the GPU Operator's ``nvidia-dcgm-exporter``
DaemonSet and they would make, :func:`exporter_pod` writes through the API and says so: a pod labelled
``app=nvidia-dcgm-exporter``, bound to the node, its container port ``metrics`` the server's port, Running with
this host's address as its IP. :class:`DcgmExporterStandIn` does it while a stage runs, once the device plugin
(its stand-in) advertised the node's GPUs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from tests.kube_objects import MERGE, BackgroundPoller, KubeObjects

FIXTURE = Path(__file__).resolve().parent / "nvidia" / "fixtures" / "dcgm-metrics.txt"
LABELS = {"app": "nvidia-dcgm-exporter"}


def node_slice(node: str, *, drop_gpus: Iterable[str] = ()) -> str:
    """What ``node``'s own exporter serves of the recorded metrics: the comments and that node's samples
    (``drop_gpus``: GPU indices left out, as if those GPUs had fallen off the bus)."""
    dropped = {f'gpu="{g}"' for g in drop_gpus}
    lines = [
        line
        for line in FIXTURE.read_text().splitlines()
        if line.startswith("#") or (f'Hostname="{node}"' in line and not any(d in line for d in dropped))
    ]
    return "\n".join(lines) + "\n"


class MetricsServer:
    """``GET /metrics`` answered with ``text`` on ``address`` (an ephemeral port) while the block runs; counts
    the GETs it answered."""

    def __init__(self, address: str, text: str) -> None:
        self.text, self.gets = text, 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                owner.gets += 1
                body = owner.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._httpd = ThreadingHTTPServer((address, 0), Handler)
        self.address, self.port = address, int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="dcgm-exporter", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


def exporter_pod(
    kube: KubeObjects, namespace: str, node: str, address: str, port: int, *, phase: str = "Running"
) -> str:
    """Stands in for the DaemonSet controller, the scheduler and the kubelet: exporter pod
    ``nvidia-dcgm-exporter-<node>`` bound to ``node``, its ``metrics`` port ``port``, then its status: Running
    with IP ``address``, or (``phase="Pending"``) its container waiting in ContainerCreating. Idempotent: an
    existing pod only gets its status written again. Returns the pod's name."""
    name = f"nvidia-dcgm-exporter-{node}"
    container = {
        "name": "nvidia-dcgm-exporter",
        "image": "dcgm-exporter",
        "ports": [{"name": "metrics", "containerPort": port}],
    }
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {"nodeName": node, "containers": [container]},
    }
    resp = kube.server.request("POST", f"/api/v1/namespaces/{namespace}/pods", json=body)
    if resp.status_code not in (201, 409):
        raise AssertionError(f"exporter pod {name}: {resp.status_code} {resp.text[-400:]}")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if phase == "Running":
        status: dict[str, Any] = {
            "phase": "Running",
            "podIP": address,
            "podIPs": [{"ip": address}],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        }
    else:
        waiting = {"waiting": {"reason": "ContainerCreating"}}
        status = {
            "phase": phase,
            "containerStatuses": [
                {
                    "name": "nvidia-dcgm-exporter",
                    "image": "dcgm-exporter",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": waiting,
                }
            ],
        }
    kube.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status}, headers=MERGE)
    return name


def ensure_namespace(kube: KubeObjects, namespace: str) -> None:
    """``namespace`` exists (other tests of the session may have made it); its pods are removed after the test."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    resp = kube.server.request("POST", "/api/v1/namespaces", json=body)
    if resp.status_code not in (201, 409):
        raise AssertionError(f"namespace {namespace}: {resp.status_code} {resp.text[-400:]}")
    kube.namespaces.add(namespace)


class DcgmExporterStandIn(BackgroundPoller):
    """Stands in for the GPU Operator's dcgm-exporter DaemonSet (and the scheduler and kubelet) while a stage
    runs: once a node of ``servers`` (node -> its :class:`MetricsServer`) advertises ``nvidia.com/gpu`` (the
    device plugin ran), and ``delay_s`` later (dcgm-exporter starts after the device plugin), its exporter pod
    (:func:`exporter_pod`). ``written``: node -> monotonic time of the write."""

    thread_name = "dcgm-exporter-stand-in"

    def __init__(
        self,
        kube: KubeObjects,
        namespace: str,
        servers: dict[str, MetricsServer],
        *,
        delay_s: float = 2.0,
        poll_s: float = 0.2,
    ) -> None:
        super().__init__(poll_s)
        self.kube, self.namespace, self.servers, self.delay_s = kube, namespace, servers, delay_s
        self.written: dict[str, float] = {}

    def finished(self) -> bool:
        return set(self.written) >= set(self.servers)

    def poll(self) -> None:
        waiting = [
            node
            for node in self.servers
            if node not in self.written
            and self.kube.get_node(node).get("status", {}).get("allocatable", {}).get("nvidia.com/gpu")
        ]
        if not waiting or self.pause(self.delay_s):
            return
        for node in waiting:
            server = self.servers[node]
            exporter_pod(self.kube, self.namespace, node, server.address, server.port)
            self.written[node] = time.monotonic()
