"""Read benchmark exports and take the highest load that meets a latency target.

Formats (written from NVIDIA's documentation and the tools' source; see docs/sizing.md for what was
verified against a real export):

* GenAI-Perf ``profile_export_genai_perf.json`` (and AIPerf's ``profile_export_aiperf.json``, same
  shape): one object per load point with per-metric objects ``{"unit": "ms", "avg": .., "p50": ..,
  "p99": ..}`` for ``request_throughput`` (requests/s), ``time_to_first_token``, ``request_latency``,
  ``output_token_throughput``, and ``input_config`` with the concurrency or request rate. A file may
  hold one point or a list of them (one per ``--concurrency`` of a sweep). The load level is read from
  ``input_config.concurrency``/``request_rate`` (GenAI-Perf), ``input_config.perf_analyzer.stimulus``
  (newer GenAI-Perf) or ``input_config.loadgen`` (AIPerf). A latency without ``p99`` is compared by its
  ``max`` (conservative), else its ``avg``.
* perf_analyzer ``--profile-export-file`` JSON: ``experiments[]`` each with ``experiment.{mode, value}``
  and ``requests[].{timestamp, response_timestamps}`` in nanoseconds; throughput and latencies are
  computed from the timestamps (first response = first token, last response = whole answer).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem

#: Statistic of the latency distributions compared with the target.
STATISTIC = "p99"


@dataclass(frozen=True)
class LoadPoint:
    """One measured load level of one server."""

    load: str  # e.g. "concurrency 32" or "request_rate 4"
    requests_per_second: float
    first_token_ms: float | None
    latency_ms: float | None

    def meets(self, max_first_token_ms: float | None, max_latency_ms: float | None) -> bool:
        """Whether this point's p99 latencies are within the targets (a missing figure fails a target)."""
        for value, limit in ((self.first_token_ms, max_first_token_ms), (self.latency_ms, max_latency_ms)):
            if limit is not None and (value is None or value > limit):
                return False
        return True


def read_points(path: Path, where: str) -> list[LoadPoint]:
    """Load points of a GenAI-Perf/AIPerf or perf_analyzer export; InvalidInput naming ``where``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(
            f"cannot read benchmark {path}",
            problems=[Problem(where, f"{path}: {exc}", "give a GenAI-Perf, AIPerf or perf_analyzer JSON export")],
        ) from None
    try:
        if isinstance(data, dict) and "experiments" in data:
            points = [_perf_analyzer_point(e) for e in data["experiments"]]
        else:
            items = data if isinstance(data, list) else [data]
            points = [_genai_perf_point(item) for item in items]
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise InvalidInput(
            f"benchmark {path} is not in a known format",
            problems=[
                Problem(
                    where,
                    f"{path}: missing or bad field {exc}",
                    "export with `genai-perf profile` (profile_export_genai_perf.json) or "
                    "`perf_analyzer --profile-export-file`",
                )
            ],
        ) from None
    if not points:
        raise InvalidInput(
            f"benchmark {path} holds no load points",
            problems=[Problem(where, f"{path}: no experiments", "export a run with at least one load level")],
        )
    return points


def best_point(
    points: list[LoadPoint], max_first_token_ms: float | None, max_latency_ms: float | None
) -> LoadPoint | None:
    """The point with the highest requests/s whose p99 latencies meet the targets, or None."""
    meeting = [p for p in points if p.meets(max_first_token_ms, max_latency_ms)]
    return max(meeting, key=lambda p: p.requests_per_second) if meeting else None


def _metric(item: dict[str, Any], name: str, stat: str) -> float | None:
    metric = item.get(name)
    if not isinstance(metric, dict):
        return None
    value = next((metric[k] for k in (stat, "max", "avg") if metric.get(k) is not None), None)
    if value is None:
        return None
    scale = {"ms": 1.0, "s": 1000.0, "us": 0.001, "ns": 1e-6}.get(str(metric.get("unit", "ms")), 1.0)
    return float(value) * scale if name != "request_throughput" else float(value)


def _genai_perf_point(item: dict[str, Any]) -> LoadPoint:
    rps = _metric(item, "request_throughput", "avg")
    if rps is None or not rps > 0:
        raise KeyError("request_throughput.avg")
    config = item.get("input_config")
    config = config if isinstance(config, dict) else {}
    places = [config, config.get("loadgen"), (config.get("perf_analyzer") or {}).get("stimulus")]
    load = "load ?"
    for place in places:
        if not isinstance(place, dict):
            continue
        key = next((k for k in ("concurrency", "request_rate") if place.get(k) is not None), None)
        if key is not None:
            load = f"{key} {place[key]}"
            break
    return LoadPoint(
        load=load,
        requests_per_second=rps,
        first_token_ms=_metric(item, "time_to_first_token", STATISTIC),
        latency_ms=_metric(item, "request_latency", STATISTIC),
    )


def _perf_analyzer_point(experiment: dict[str, Any]) -> LoadPoint:
    spec = experiment["experiment"]
    requests = experiment["requests"]
    done = [r for r in requests if r.get("response_timestamps")]
    if not done:
        raise ValueError("requests[].response_timestamps (no request finished)")
    start = min(int(r["timestamp"]) for r in done)
    end = max(int(r["response_timestamps"][-1]) for r in done)
    first = [(int(r["response_timestamps"][0]) - int(r["timestamp"])) / 1e6 for r in done]
    whole = [(int(r["response_timestamps"][-1]) - int(r["timestamp"])) / 1e6 for r in done]
    return LoadPoint(
        load=f"{spec['mode']} {spec['value']}",
        requests_per_second=len(done) / ((end - start) / 1e9),
        first_token_ms=percentile(first, 0.99),
        latency_ms=percentile(whole, 0.99),
    )


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (the value at rank ceil(q x n)), as perf_analyzer reports."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
