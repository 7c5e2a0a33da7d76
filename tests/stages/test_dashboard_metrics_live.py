"""The Triton dashboard's metric names, read back from a real tritonserver's ``/metrics``.

The server is the session's ``triton_backend`` (nvidia-pytriton's tritonserver serving the stand-in
repository, metrics on); Triton registers each loaded model's counters and its pending-request gauge at load,
so every name shows before any request.
"""

from __future__ import annotations

import re
import urllib.request

from bootstrap.cluster.dashboards import TRITON_METRICS, load_dashboards, metric_names, queries
from bootstrap.triton.server import TritonServer


def test_triton_dashboard_metrics_are_published_by_tritonserver(triton_backend: tuple[str, TritonServer]) -> None:
    address, server = triton_backend
    with urllib.request.urlopen(f"http://{address}:{server.metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    published = set(re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE))
    used = set().union(*(metric_names(q) for q in queries(load_dashboards()["triton.json"]))) & TRITON_METRICS
    assert used  # the replicas panel reads kube-state-metrics (no exporter of it here), the rest Triton's
    assert used <= published, sorted(used - published)
    assert re.search(r'^nv_inference_request_success\{[^}]*model="', text, flags=re.MULTILINE)
