"""Read each GPU node's DCGM exporter metrics from a live cluster, through the API server's pod proxy.

The GPU Operator runs dcgm-exporter as the DaemonSet ``nvidia-dcgm-exporter`` in its release's namespace; its
pods carry ``app=nvidia-dcgm-exporter`` and listen on the container port named ``metrics`` (9400, or what
``dcgmExporter.env`` ``DCGM_EXPORTER_LISTEN`` says). Its Service would reach one pod, picked at random, so
:class:`DcgmReader` asks every node's own pod: one ``GET /api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics``
each, through ``kubectl proxy`` (:class:`bootstrap.kube.service_proxy.KubectlProxy`; the kubeconfig is all it needs).

Per node it says which pod was read and what came back, or why nothing could be read (no exporter pod on the
node, the pod not Running, the proxy's answer); :meth:`DcgmRead.sources` is that for
:func:`bootstrap.validation.checks.validate_cluster`, and :attr:`DcgmRead.text` the texts read, together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from bootstrap.cluster.gpu_operator import gpu_operator
from bootstrap.inventory.models import Inventory
from bootstrap.kube.api import KubeError, PodLister
from bootstrap.kube.service_proxy import KubectlProxy, http_error_text, open_direct
from bootstrap.validation.checks import DcgmSource

#: The label the GPU Operator gives its dcgm-exporter pods.
SELECTOR = "app=nvidia-dcgm-exporter"
#: dcgm-exporter's port when neither the values nor the pod say another.
DEFAULT_PORT = 9400
PORT_NAME = "metrics"
LISTEN_ENV = "DCGM_EXPORTER_LISTEN"
#: How long one GET through the pod proxy may take.
READ_TIMEOUT_S = 30.0
HOW = "through the API server's pod proxy"


@dataclass(frozen=True)
class Exporter:
    """Where the GPU Operator's dcgm-exporter pods are: namespace, label selector, and the port the values set
    (None: the pod's ``metrics`` container port, else 9400)."""

    namespace: str
    selector: str = SELECTOR
    port: int | None = None

    def described(self) -> str:
        port = f"port {self.port}" if self.port else f"its '{PORT_NAME}' port (default {DEFAULT_PORT})"
        return f"each GPU node's pod {self.selector} in namespace {self.namespace}, {port}, {HOW}"


def exporter(inv: Inventory) -> Exporter | None:
    """The dcgm-exporter of this inventory's GPU Operator release; None without one (no GPU nodes, or the
    exporter disabled in the values)."""
    release = gpu_operator(inv).release
    if release is None:
        return None
    values = release.values.get("dcgmExporter") or {}
    if not values.get("enabled", True):
        return None
    return Exporter(release.namespace, port=listen_port(values))


def listen_port(values: dict[str, Any]) -> int | None:
    """The port ``DCGM_EXPORTER_LISTEN`` (``[HOST]:PORT``) of ``dcgmExporter.env`` sets, if it does."""
    for env in values.get("env") or []:
        if env.get("name") == LISTEN_ENV and (found := re.search(r":(\d+)$", str(env.get("value", "")))):
            return int(found.group(1))
    return None


def pod_path(namespace: str, name: str, port: int) -> str:
    """The API server's proxy path to ``/metrics`` of pod ``namespace/name`` on ``port``."""
    return f"/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics"


@dataclass
class NodeRead:
    """One GPU node's exporter: the pod (``NS/NAME``) and path asked, and what came back or why nothing did."""

    node: str
    ok: bool
    message: str
    pod: str | None = None
    path: str | None = None
    text: str = field(default="", repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "ok": self.ok, "pod": self.pod, "path": self.path, "message": self.message}


@dataclass
class DcgmRead:
    """Every GPU node's exporter read once."""

    exporter: Exporter
    nodes: dict[str, NodeRead]

    @property
    def text(self) -> str:
        """The metrics read, one node's after the other."""
        return "\n".join(r.text for r in self.nodes.values() if r.ok)

    def sources(self) -> dict[str, DcgmSource]:
        return {
            n: DcgmSource(r.message, None, r.text) if r.ok else DcgmSource(r.message, r.message)
            for n, r in self.nodes.items()
        }

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.exporter.described(), "nodes": {n: r.as_dict() for n, r in self.nodes.items()}}


def _pod_port(pod: dict[str, Any]) -> int | None:
    for container in pod.get("spec", {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME and port.get("containerPort"):
                return int(port["containerPort"])
    return None


def _not_running(pod: dict[str, Any]) -> str | None:
    """Why ``pod`` cannot answer (its phase and the reason the kubelet or scheduler gave), or None: Running."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase == "Running" and status.get("podIP"):
        return None
    reasons = [
        str(s["state"]["waiting"].get("reason", ""))
        for s in status.get("containerStatuses") or []
        if (s.get("state") or {}).get("waiting")
    ]
    reasons += [
        f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    if phase == "Running":
        reasons.append("no pod IP")
    return phase + (f" ({'; '.join(r for r in reasons if r)})" if any(reasons) else "")


def _pick(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """Of a node's exporter pods (two during a rolling update), a Running one not being deleted, if any."""
    return min(pods, key=lambda p: (_not_running(p) is not None, bool(p["metadata"].get("deletionTimestamp"))))


class DcgmReader:
    """Reads the exporters of the cluster behind ``kubeconfig``; ``kubectl proxy`` starts on the first GET and
    serves every later read (a stage polls) until :meth:`close`."""

    def __init__(self, api: PodLister, kubeconfig: Path, where: Exporter, *, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.api, self.kubeconfig, self.exporter, self.timeout_s = api, kubeconfig, where, timeout_s
        self._proxy: KubectlProxy | None = None

    def read(self, nodes: list[str]) -> DcgmRead:
        """One read of each of ``nodes``' exporter pods."""
        where = self.exporter
        try:
            pods = self.api.namespaced_objects("pods", where.namespace, where.selector)
        except KubeError as exc:
            failed = f"the exporter pods could not be listed: {exc.message}"
            return DcgmRead(where, {n: NodeRead(n, False, failed) for n in nodes})
        on: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            on.setdefault(pod.get("spec", {}).get("nodeName") or "", []).append(pod)
        return DcgmRead(where, {n: self._read_node(n, on.get(n)) for n in nodes})

    def _read_node(self, node: str, pods: list[dict[str, Any]] | None) -> NodeRead:
        where = self.exporter
        if not pods:
            why = f"no DCGM exporter pod on {node} (pods {where.selector} in namespace {where.namespace})"
            return NodeRead(node, False, why)
        pod = _pick(pods)
        name = f"{where.namespace}/{pod['metadata']['name']}"
        if (state := _not_running(pod)) is not None:
            return NodeRead(node, False, f"DCGM exporter pod {name} is {state}", pod=name)
        port = where.port or _pod_port(pod) or DEFAULT_PORT
        path = pod_path(where.namespace, pod["metadata"]["name"], port)
        try:
            url = self._proxy_url() + path
            with open_direct(url, self.timeout_s) as response:
                text = response.read().decode(errors="replace")
        except KubeError as exc:
            return NodeRead(node, False, f"pod {name} not read: {exc.message}", pod=name, path=path)
        except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
            failed = f"GET {path} {HOW} failed: {http_error_text(exc)}"
            return NodeRead(node, False, failed, pod=name, path=path)
        read = f"pod {name} port {port} {HOW}, {len(text.encode())} bytes"
        return NodeRead(node, True, read, pod=name, path=path, text=text)

    def _proxy_url(self) -> str:
        if self._proxy is None:
            self._proxy = KubectlProxy(self.kubeconfig).__enter__()  # left in close()
        return self._proxy.url

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.__exit__(None, None, None)
            self._proxy = None

    def __enter__(self) -> DcgmReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
