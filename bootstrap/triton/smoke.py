"""Smoke test a serving Triton: the model's readiness (``/v2/models/<model>/ready``: Triton loaded it), then one
generate request and one streaming request, with their latencies; with a load, then a steady stream of generate
requests from several clients at once for a while (what an autoscaler on Triton's queue should answer), with
their count, failures and latency percentiles.

The URL may carry a path prefix (a Service through the Kubernetes API server's service proxy,
``http://127.0.0.1:PORT/api/v1/namespaces/NS/services/NAME:http/proxy``): requests go to
``<url>/v2/models/...``. An error answered by a proxy on the way (a Kubernetes ``Status``) is reported by its
message.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bootstrap.kube.service_proxy import http_error_text, open_direct

DEFAULT_PROMPT = "What is the capital of Texas?"


@dataclass
class SmokeResult:
    """What one smoke run measured; ``ok`` is false when any request failed."""

    url: str
    model: str
    ok: bool = True
    #: Triton answered 200 to ``/v2/models/<model>/ready`` (it loaded the model); no request is sent otherwise
    ready: bool = False
    text: str = ""
    latency_s: float | None = None
    stream_chunks: int = 0
    stream_text: str = ""
    ttft_s: float | None = None
    stream_latency_s: float | None = None
    errors: list[str] = field(default_factory=list)
    #: the load's counts (``--load``), None when no load was asked or the model was not ready
    load: LoadResult | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadResult:
    """What a load measured: ``concurrency`` clients each sending generate requests back to back."""

    seconds: float  #: how long it was asked to run
    concurrency: int
    ran_s: float = 0.0
    requests: int = 0  #: answered and failed
    failed: int = 0
    #: stopped early by the operator (Ctrl-C, SIGINT): the counts are those of the time it ran
    interrupted: bool = False
    p50_s: float | None = None
    p95_s: float | None = None
    #: the first few distinct failures, each with how many times it happened
    errors: list[str] = field(default_factory=list)


#: distinct failures a load keeps (each counted)
LOAD_ERRORS_KEPT = 5


def _percentile(values: list[float], q: int) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def run_load(
    url: str,
    model: str,
    body: dict[str, Any],
    *,
    seconds: float,
    concurrency: int,
    timeout: float,
    progress: Callable[[str], None] = lambda _msg: None,
) -> LoadResult:
    """``concurrency`` clients send ``body`` to ``/v2/models/<model>/generate`` back to back for ``seconds``
    (Ctrl-C ends it early: the result says so); requests in flight then finish. Never raises for a failed
    request: each is counted."""
    result = LoadResult(seconds=seconds, concurrency=concurrency)
    latencies: list[float] = []
    failures: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                _, latency = generate(url, model, body, timeout)
            except Exception as exc:  # counted, never a traceback
                with lock:
                    result.failed += 1
                    why = http_error_text(exc)
                    if why in failures or len(failures) < LOAD_ERRORS_KEPT:
                        failures[why] = failures.get(why, 0) + 1
                continue
            with lock:
                latencies.append(latency)

    clients = [threading.Thread(target=client, name=f"load-{i}", daemon=True) for i in range(concurrency)]
    started = time.monotonic()
    for thread in clients:
        thread.start()
    try:
        while (left := seconds - (time.monotonic() - started)) > 0:
            stop.wait(min(1.0, left))
            with lock:
                done, failed = len(latencies) + result.failed, result.failed
            progress(f"{done} requests, {failed} failed, {time.monotonic() - started:.0f}/{seconds:.0f} s")
    except KeyboardInterrupt:
        result.interrupted = True
    stop.set()
    for thread in clients:
        thread.join()
    result.ran_s = round(time.monotonic() - started, 3)
    result.requests = len(latencies) + result.failed
    result.p50_s, result.p95_s = _percentile(latencies, 50), _percentile(latencies, 95)
    result.errors = [f"{why} (x{count})" for why, count in failures.items()]
    return result


def base_url(url: str) -> str:
    """``host:port[/prefix]`` or ``http(s)://host:port[/prefix][/]`` -> ``http(s)://host:port[/prefix]`` (the
    path prefix is kept)."""
    url = url.rstrip("/")
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


def _request(url: str, body: dict[str, Any]) -> urllib.request.Request:
    data = json.dumps(body).encode()
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url}")
    return urllib.request.Request(  # noqa: S310 - scheme checked above
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )


def model_ready(url: str, model: str, timeout: float) -> None:
    """GET ``/v2/models/<model>/ready``; raises unless Triton answers 200 (it has loaded the model: 400 when
    it has not, or has no such model)."""
    with open_direct(f"{base_url(url)}/v2/models/{model}/ready", timeout) as response:
        response.read()


def load_state(url: str, model: str, timeout: float) -> str:
    """Triton's own word on ``model`` from its repository index (``UNAVAILABLE: <why it did not load>``), or
    that its repository has no such model."""
    with open_direct(_request(f"{base_url(url)}/v2/repository/index", {}), timeout) as response:
        index = json.loads(response.read())
    for entry in index:
        if entry.get("name") == model:
            state = str(entry.get("state") or "not loaded")
            return f"{model} is {state}" + (f": {entry['reason']}" if entry.get("reason") else "")
    names = ", ".join(sorted(str(e.get("name")) for e in index)) or "none"
    return f"no model {model} in its repository (it has {names})"


def _not_ready(url: str, model: str, exc: Exception, timeout: float) -> str:
    """Why ``model`` is not ready: the answer, and Triton's own reason where Triton answered (HTTP 400)."""
    text = f"ready: {http_error_text(exc)}"
    if isinstance(exc, urllib.error.HTTPError) and exc.code == 400:
        try:
            return f"{text}; Triton's repository: {load_state(url, model, timeout)}"
        except Exception as index_exc:  # reported, never a traceback
            return f"{text}; Triton's repository index not read: {http_error_text(index_exc)}"
    return text


def generate(url: str, model: str, body: dict[str, Any], timeout: float) -> tuple[str, float]:
    """POST ``/v2/models/<model>/generate``; return the text and the total latency."""
    started = time.perf_counter()
    request = _request(f"{base_url(url)}/v2/models/{model}/generate", body)
    with open_direct(request, timeout) as response:
        payload = json.loads(response.read())
    return str(payload.get("text_output", "")), time.perf_counter() - started


def generate_stream(url: str, model: str, body: dict[str, Any], timeout: float) -> tuple[list[str], float, float]:
    """POST ``/v2/models/<model>/generate_stream`` (server-sent events); chunks, TTFT, total latency."""
    started = time.perf_counter()
    first: float | None = None
    chunks: list[str] = []
    request = _request(f"{base_url(url)}/v2/models/{model}/generate_stream", {**body, "stream": True})
    with open_direct(request, timeout) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:") :])
            if "error" in event:
                raise RuntimeError(f"stream error: {event['error']}")
            if first is None:
                first = time.perf_counter() - started
            chunks.append(str(event.get("text_output", "")))
    total = time.perf_counter() - started
    return chunks, (first if first is not None else total), total


def run_smoke(
    url: str,
    *,
    model: str = "ensemble",
    prompt: str = DEFAULT_PROMPT,
    max_tokens: int = 16,
    stream: bool = True,
    timeout: float = 60.0,
    load_s: float | None = None,
    concurrency: int = 4,
    progress: Callable[[str], None] = lambda _msg: None,
) -> SmokeResult:
    """Ask whether Triton loaded ``model``, then send a generate request (and a streaming one when ``stream``),
    then, with ``load_s``, a load of ``concurrency`` clients for that long (:func:`run_load`); never raises for
    a failed request. A model that is not ready gets no request: why is its one error."""
    result = SmokeResult(url=base_url(url), model=model)
    try:
        model_ready(url, model, timeout)
        result.ready = True
    except Exception as exc:  # reported, never a traceback
        result.errors.append(_not_ready(url, model, exc, timeout))
        result.ok = False
        return result
    body = {"text_input": prompt, "max_tokens": max_tokens}
    try:
        result.text, result.latency_s = generate(url, model, {**body, "stream": False}, timeout)
    except Exception as exc:  # reported, never a traceback
        result.errors.append(f"generate: {http_error_text(exc)}")
    if stream:
        try:
            chunks, result.ttft_s, result.stream_latency_s = generate_stream(url, model, body, timeout)
            result.stream_chunks = len(chunks)
            result.stream_text = "".join(chunks)
            if not chunks:
                result.errors.append("generate_stream: no event received")
        except Exception as exc:  # reported, never a traceback
            result.errors.append(f"generate_stream: {http_error_text(exc)}")
    if load_s:
        body = {**body, "stream": False}
        load = run_load(url, model, body, seconds=load_s, concurrency=concurrency, timeout=timeout, progress=progress)
        result.load = load
        if load.failed:
            first = load.errors[0] if load.errors else "no answer"
            result.errors.append(f"load: {load.failed} of {load.requests} requests failed; {first}")
    result.ok = not result.errors
    return result
