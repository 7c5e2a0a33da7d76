"""Reach a Kubernetes Service from the rackctl host through the API server's service proxy.

``/api/v1/namespaces/NS/services/NAME:PORT/proxy/`` needs nothing but the kubeconfig: no port-forward, no
kubelet reachable from here, no route to the pod network. :class:`KubectlProxy` runs ``kubectl proxy
--port=0`` on loopback (kubectl handles whatever credentials the kubeconfig holds: client certificates,
tokens, exec plugins), reads the port from its "Starting to serve on 127.0.0.1:PORT" line and always stops
it. :func:`service_url` is a Service's base URL through it; the path prefix is part of the URL, so HTTP clients
append their own paths to it (``…/proxy/v2/models/ensemble/generate``). :func:`open_direct` opens such a URL
straight (never through ``$http_proxy``); :func:`http_error_text` says an HTTP error in a line, a Kubernetes
``Status`` answered on the way by its message.

What the API server does on the way (1.20.2, measured; docs/kubernetes.md): it picks a ready address of the
Service's Endpoints whose port has the given name and whose ``targetRef`` Pod still has that IP; no Endpoints
object answers 404 ``services "NAME" not found``, one without addresses 503 ``no endpoints available for
service "NAME:PORT"``. Responses stream through, but a 1.20 server (built with Go 1.15) flushes a
``text/event-stream; charset=utf-8`` response (Triton's ``generate_stream``) only every 200 ms.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import re
import select
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem
from bootstrap.kube import KubeError
from redfish_tools.secrets import redact

#: What ``kubectl proxy`` prints once it listens.
SERVING = re.compile(r"Starting to serve on (\S+):(\d+)")
#: How long ``kubectl proxy`` may take to start listening.
START_TIMEOUT_S = 30.0


def service_path(namespace: str, name: str, port: str = "http") -> str:
    """The API server's proxy path of Service ``namespace/name``, port ``port`` (its name), no trailing slash."""
    return f"/api/v1/namespaces/{namespace}/services/{name}:{port}/proxy"


def parse_service(value: str, option: str = "--service") -> tuple[str, str]:
    """``NS/NAME`` -> ``(NS, NAME)``; anything else is bad input naming ``option``."""
    namespace, sep, name = value.partition("/")
    label = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    if not sep or not label.match(namespace) or not label.match(name):
        raise InvalidInput(
            f"bad {option} {value!r}",
            problems=[
                Problem(
                    option,
                    f"got {value!r}",
                    "give the Service as NAMESPACE/NAME (DNS labels), e.g. triton/triton-llama-2-70b-fp8",
                )
            ],
        )
    return namespace, name


def open_direct(request: urllib.request.Request | str, timeout: float) -> Any:
    """``urlopen``, but straight to a loopback host (``kubectl proxy``) whatever ``$http_proxy`` says."""
    url = request.full_url if isinstance(request, urllib.request.Request) else request
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url}")
    host = urlsplit(url).hostname or ""
    with contextlib.suppress(ValueError):
        if host == "localhost" or ipaddress.ip_address(host).is_loopback:
            return urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - http(s) only (checked above)


def http_error_text(exc: Exception) -> str:
    """A failed request in one line: ``HTTP CODE: detail`` (Triton's ``error``, or the message of a Kubernetes
    ``Status`` a proxy on the way answered), else the exception's own words."""
    if isinstance(exc, urllib.error.HTTPError):
        detail = exc.read().decode(errors="replace")
        with contextlib.suppress(ValueError, AttributeError):
            answer = json.loads(detail)
            detail = answer.get("error") or (answer.get("kind") == "Status" and answer.get("message")) or detail
        return f"HTTP {exc.code}: {str(detail).strip()}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc)


class KubectlProxy:
    """``kubectl --kubeconfig K proxy --port=0`` on 127.0.0.1 while the block runs; ``url`` is its base URL."""

    def __init__(self, kubeconfig: Path, *, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.kubeconfig = kubeconfig
        self.start_timeout_s = start_timeout_s
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()

    def service_url(self, namespace: str, name: str, port: str = "http") -> str:
        """Service ``namespace/name`` port ``port`` through this proxy and the API server's service proxy."""
        return self.url + service_path(namespace, name, port)

    def start(self) -> KubectlProxy:
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise EnvironmentMissing("kubectl is not on PATH; install it (see `rackctl doctor`)")
        cmd = [kubectl, "--kubeconfig", str(self.kubeconfig), "proxy", "--port=0", "--address=127.0.0.1"]
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, text=True
        )
        stdout = self._proc.stdout or io.StringIO()  # always a pipe (stdout=PIPE)
        deadline = time.monotonic() + self.start_timeout_s
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([stdout], [], [], left)
            line = stdout.readline() if ready else ""
            if found := SERVING.search(line):
                self.url = f"http://{found.group(1)}:{found.group(2)}"
                return self
            if ready and not line:  # EOF: kubectl exited
                break
        self.stop()
        raise KubeError(redact(f"kubectl proxy did not start (kubeconfig {self.kubeconfig}): {self._said()}"))

    def _said(self) -> str:
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().splitlines() if line.strip()]
        return " | ".join(lines[-3:]) or f"no answer within {self.start_timeout_s:g} s"

    def stop(self) -> None:
        """Stop kubectl proxy (SIGTERM, then SIGKILL)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None

    def __enter__(self) -> KubectlProxy:
        try:
            return self.start()
        except BaseException:
            self.stop()
            self._stderr.close()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self._stderr.close()
