"""The triton stage's smoke: once every model's Deployment is ready, ``rackctl triton smoke`` against each
model's Service through the Kubernetes API server's service proxy.

One ``kubectl proxy`` (:class:`bootstrap.kube.service_proxy.KubectlProxy`, the stage's kubeconfig) serves every
model; each model's HTTP Service (the rendered Service with a port named ``http``) is asked
``/api/v1/namespaces/NS/services/NAME:http/proxy/v2/models/<entry>/ready`` (Triton loaded the model; no
request is sent to one it has not), then ``.../v2/models/<entry>/generate``, and ``generate_stream`` when
the model streams (:func:`bootstrap.triton.smoke.run_smoke`). The entry is ``ensemble`` for the
``inflight_batcher_llm`` layout, ``tensorrt_llm`` for ``llmapi``. Per model the stage keeps ok, TTFT (streaming
models only), the latencies and the errors (:meth:`ModelSmoke.as_fact`: the stage's output and the journal
fact ``smoke``). The times are as seen through ``kubectl proxy`` and the API server: both hops are in them,
and a 1.20 API server delivers streamed events in 200 ms flushes (docs/kubernetes.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.inventory.served_models import ModelSpec
from bootstrap.kube.service_proxy import KubectlProxy, service_path
from bootstrap.triton.smoke import SmokeResult, run_smoke
from redfish_tools.secrets import redact

#: The journal fact (and output key) of the smoke.
FACT = "smoke"
#: The Service port the smoke talks to (the rendered Service names it so).
PORT = "http"
#: Per request; tokens asked for.
TIMEOUT_S = 120.0
MAX_TOKENS = 16
VIA = "kubectl proxy -> the API server's service proxy"


def smoke_entry(spec: ModelSpec) -> str:
    """The Triton model the smoke asks: the ensemble of an ``inflight_batcher_llm`` repository, else the LLM API
    model."""
    return "ensemble" if spec.layout == "inflight_batcher_llm" else "tensorrt_llm"


def http_service(objects: list[dict[str, Any]]) -> tuple[str, str]:
    """``(namespace, name)`` of the Service among a model's rendered ``objects`` that has a port named ``http``."""
    for obj in objects:
        if obj.get("kind") == "Service" and any(p.get("name") == PORT for p in obj["spec"].get("ports", [])):
            return obj["metadata"]["namespace"], obj["metadata"]["name"]
    raise ValueError(f"no Service with a port named {PORT!r} among the rendered objects (a rackctl bug)")


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds is not None else "n/a"


@dataclass
class ModelSmoke:
    """One model's smoke through its Service."""

    model: str
    namespace: str
    service: str
    streaming: bool
    result: SmokeResult

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def where(self) -> str:
        return f"Service {self.namespace}/{self.service} port {PORT}"

    def summary(self) -> str:
        """``model: TTFT …, latency …`` (what the smoke measured)."""
        res = self.result
        if not self.streaming:
            return f"{self.model}: latency {_ms(res.latency_s)} (no TTFT: the model does not stream)"
        return (
            f"{self.model}: TTFT {_ms(res.ttft_s)}, latency {_ms(res.latency_s)} "
            f"(stream {_ms(res.stream_latency_s)}, {res.stream_chunks} events)"
        )

    def failure(self) -> str:
        """Why the smoke of this model failed, naming the model and its Service."""
        return redact(f"{self.model}: smoke failed against {self.where}, via {VIA}: {'; '.join(self.result.errors)}")

    def as_fact(self) -> dict[str, Any]:
        res = self.result
        return {
            "ok": res.ok,
            "service": f"{self.namespace}/{self.service}:{PORT}",
            "path": service_path(self.namespace, self.service, PORT) + "/",
            "via": VIA,
            "triton_model": res.model,
            "model_ready": res.ready,
            "streaming": self.streaming,
            "ttft_s": res.ttft_s,
            "latency_s": res.latency_s,
            "stream_latency_s": res.stream_latency_s,
            "stream_events": res.stream_chunks,
            "errors": [redact(e) for e in res.errors],
        }


def smoke_services(kubeconfig: Path, targets: list[tuple[ModelSpec, str, str]]) -> list[ModelSmoke]:
    """Smoke every ``(spec, namespace, service)`` through one ``kubectl proxy`` of ``kubeconfig``; raises
    :class:`bootstrap.kube.KubeError` only when the proxy cannot start (a failed request is in the result)."""
    out = []
    with KubectlProxy(kubeconfig) as proxy:
        for spec, namespace, service in targets:
            result = run_smoke(
                proxy.service_url(namespace, service, PORT),
                model=smoke_entry(spec),
                max_tokens=MAX_TOKENS,
                stream=spec.streaming,
                timeout=TIMEOUT_S,
            )
            out.append(ModelSmoke(spec.name, namespace, service, spec.streaming, result))
    return out
