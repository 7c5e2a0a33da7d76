"""Benchmark: the Triton smoke through the Kubernetes API server's service proxy, against the same smoke direct.

Run: .venv/bin/python bench/bench_triton_smoke_proxy.py [--rounds 10] [--tokens 16,1000]

Real parts: kube-apiserver + etcd of the lab's newest pinned release (tests/cluster/apiserver.py; built from
their Go modules by ``rackctl lab components``, cached), ``kubectl proxy``, tritonserver from the
nvidia-pytriton wheel with the stand-in streaming repository on this host's own address
(tests/triton_serving.py: a Pod with that IP and the Service's Endpoints, written as the kubelet and the
endpoints controller would). Timed: ``run_smoke`` (generate + generate_stream) through
``kubectl proxy`` -> ``/api/v1/namespaces/NS/services/NAME:http/proxy/``; the peer measured in the same run is
the same smoke straight to tritonserver (the lower bound). Prints medians of TTFT, generate latency and
stream latency per token count, and the ratios proxied / direct.

Then a paced stream: a small server-sent-events server on the same address sends one event every 50 ms (as a
model generating 20 tokens/s would), once with Triton's Content-Type ``text/event-stream; charset=utf-8`` and
once with the bare ``text/event-stream``; printed: when each event arrived, direct and through the proxy. A
1.20 server (built with Go 1.15; measured before the move to 1.37) passed the bare type through at once and
held the other until its 200 ms flush (or until its write buffer filled): TTFT through it up to 200 ms late.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bootstrap.kube.service_proxy import KubectlProxy
from bootstrap.triton.smoke import SmokeResult, run_smoke
from rackctl_lab.components import build
from rackctl_lab.components.pins import RELEASES
from tests.cluster import apiserver
from tests.kube_objects import KubeObjects
from tests.triton_serving import host_address, serve, serving_triton


def _median(values: list[float | None]) -> float:
    return statistics.median(v for v in values if v is not None) * 1000


def _row(label: str, runs: list[SmokeResult]) -> tuple[float, float, float]:
    ttft = _median([r.ttft_s for r in runs])
    gen = _median([r.latency_s for r in runs])
    stream = _median([r.stream_latency_s for r in runs])
    events = statistics.median(r.stream_chunks for r in runs)
    print(f"  {label:<8} TTFT {ttft:8.1f} ms   generate {gen:8.1f} ms   stream {stream:8.1f} ms   {events:.0f} events")
    return ttft, gen, stream


class PacedEvents(BaseHTTPRequestHandler):
    """``GET /charset`` or ``/bare``: 6 server-sent events, 50 ms apart, chunked, with that Content-Type."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        kind = "text/event-stream" if self.path.endswith("bare") else "text/event-stream; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(6):
            data = f'data: {{"text_output": "t{i}"}}\n\n'.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            time.sleep(0.05)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        """Quiet."""


def _arrivals(url: str) -> list[int]:
    started, out = time.perf_counter(), []
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=30) as response:
        for line in response:
            if line.startswith(b"data:"):
                out.append(round((time.perf_counter() - started) * 1000))
    return out


def paced(kube: KubeObjects, namespace: str, address: str, proxy: KubectlProxy) -> None:
    """The paced stream, direct and through the service proxy, for both Content-Types."""
    httpd = ThreadingHTTPServer((address, 0), PacedEvents)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = int(httpd.server_address[1])
        spec = {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
        body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "paced"}, "spec": spec}
        kube.call("POST", f"/api/v1/namespaces/{namespace}/services", body)
        serve(kube, namespace, "paced", address, port)
        print("paced stream, an event every 50 ms: arrival of each (ms)")
        for kind in ("charset", "bare"):
            print(f"  {kind:<8} direct  {_arrivals(f'http://{address}:{port}/{kind}')}")
            print(f"  {kind:<8} proxied {_arrivals(proxy.service_url(namespace, 'paced') + '/' + kind)}")
    finally:
        httpd.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tokens", default="16,1000", help="max_tokens values, comma-separated")
    args = parser.parse_args()
    address = host_address()
    if address is None:
        sys.exit("needs a global IPv4 address")
    release = RELEASES[next(iter(RELEASES))]
    selected = build.select(release, ("kube-apiserver", "etcd", "kubectl"))
    binaries = {b.name: Path(b.path) for b in build.build(selected)}
    os.environ["PATH"] = f"{binaries['kubectl'].parent}{os.pathsep}{os.environ['PATH']}"  # kubectl proxy
    with tempfile.TemporaryDirectory(prefix="bench-smoke-proxy-") as tmp, serving_triton(address) as triton:
        server = apiserver.start(binaries["kube-apiserver"], binaries["etcd"], Path(tmp) / "api")
        try:
            kube = KubeObjects(server)
            namespace = kube.namespace("bench")
            spec = {"ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]}
            body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "triton"}, "spec": spec}
            kube.call("POST", f"/api/v1/namespaces/{namespace}/services", body)
            serve(kube, namespace, "triton", address, triton.http_port)
            kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
            with KubectlProxy(kubeconfig) as proxy:
                proxied_url = proxy.service_url(namespace, "triton")
                for tokens in (int(t) for t in args.tokens.split(",")):
                    direct, proxied = [], []
                    for _ in range(args.rounds):
                        direct.append(run_smoke(triton.url, max_tokens=tokens))
                        proxied.append(run_smoke(proxied_url, max_tokens=tokens))
                    failed = [e for r in direct + proxied for e in r.errors]
                    if failed:
                        sys.exit(f"smoke failed: {failed[0]}")
                    print(f"max_tokens {tokens}, {args.rounds} rounds (medians):")
                    low = _row("direct", direct)
                    high = _row("proxied", proxied)
                    names = ("TTFT", "generate", "stream")
                    ratios = ", ".join(f"{n} x{h / lo:.1f}" for n, h, lo in zip(names, high, low, strict=True))
                    print(f"  proxied / direct: {ratios}")
                paced(kube, namespace, address, proxy)
            kube.cleanup()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
