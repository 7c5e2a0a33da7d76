"""Measured figures from benchmark exports: NVIDIA GenAI-Perf / AIPerf and Triton perf_analyzer JSON.

Formats read (from the tools' documentation; the test files in ``tests/sizing/data`` are written by hand
in these shapes, not captured from a real run):

* GenAI-Perf ``profile_export_genai_perf.json`` (``genai-perf profile ... --profile-export-file``): one object
  per load point with metric objects ``{"unit": ..., "avg": ..., "p50": ..., "p90": ..., "p99": ...}`` for
  ``request_throughput`` (requests/sec), ``time_to_first_token`` and ``request_latency`` (ms),
  ``output_token_throughput`` (tokens/sec), ``input_sequence_length``/``output_sequence_length`` (tokens),
  and ``input_config`` holding the run's settings (``concurrency`` / ``request_rate``, flat or nested).
  AIPerf's ``profile_export_aiperf.json`` has the same top-level metric objects beside ``aiperf_version``
  and ``input_config.loadgen`` (wrapped under ``records`` or ``metrics`` elsewhere: both read).
  A file may hold one point, or a JSON list of points; ``benchmark:`` may name several files.
* perf_analyzer ``--profile-export-file``: ``{"experiments": [{"experiment": {"mode", "value"},
  "requests": [{"timestamp", "response_timestamps"}], "window_boundaries": [start, end]}]}`` with times in
  ns. Throughput is requests completed in the window / its length; first token = first response - sent;
  latency = last response - sent. The file carries no token counts: lengths are the requirement's.

Of the points whose latency statistic meets the requirement's targets, the highest throughput is taken.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.sizing_spec import Measurement, ModelRequirement

MAX_BENCHMARK_BYTES = 256 * 1024 * 1024
#: Averages of token lengths in a benchmark may differ this much from the requirement's (synthetic prompts vary).
LENGTH_TOLERANCE = 0.10
_MS_PER = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "ns": 1e-6}


@dataclass(frozen=True)
class LoadPoint:
    """One load level of a benchmark: throughput and latency (at the chosen statistic)."""

    tool: str
    load: str
    requests_per_second: float
    first_token_ms: float | None = None
    latency_ms: float | None = None
    output_tokens_per_s: float | None = None
    concurrency: int | None = None
    input_tokens: float | None = None
    output_tokens: float | None = None


class BenchmarkError(ValueError):
    """A benchmark file that cannot be read as any known format."""


def percentile(values: list[float], stat: str) -> float:
    """``avg`` or ``pNN`` of the values (linear interpolation, as numpy's default)."""
    if stat == "avg":
        return math.fsum(values) / len(values)
    ordered = sorted(values)
    rank = (len(ordered) - 1) * float(stat[1:]) / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _find(data: Any, key: str) -> Any:
    """First value of ``key`` anywhere in nested dicts (GenAI-Perf's input_config moved keys between versions)."""
    if isinstance(data, dict):
        if data.get(key) is not None:
            return data[key]
        for value in data.values():
            found = _find(value, key)
            if found is not None:
                return found
    return None


def _metric(metrics: dict[str, Any], name: str, stat: str, to_ms: bool = False) -> float | None:
    entry = metrics.get(name)
    if not isinstance(entry, dict):
        return None
    value = entry.get(stat, entry.get("avg"))
    if not isinstance(value, int | float):
        return None
    if to_ms:
        unit = str(entry.get("unit", "ms")).lower()
        if unit not in _MS_PER:
            raise BenchmarkError(f"{name} has unit {unit!r}; expected one of {', '.join(_MS_PER)}")
        value = value * _MS_PER[unit]
    return float(value)


def genai_perf_point(data: dict[str, Any], stat: str) -> LoadPoint:
    """One GenAI-Perf / AIPerf profile export object."""
    metrics = data.get("records") or data.get("metrics") or data
    rps = _metric(metrics, "request_throughput", "avg")
    if rps is None or rps <= 0:
        raise BenchmarkError("no request_throughput.avg > 0 (not a GenAI-Perf / AIPerf profile export?)")
    config = data.get("input_config", {})
    concurrency = _find(config, "concurrency")
    rate = _find(config, "request_rate")
    load = f"concurrency {concurrency}" if concurrency else f"request rate {rate}" if rate else "one point"
    return LoadPoint(
        tool="AIPerf" if "aiperf_version" in data or "records" in data else "GenAI-Perf",
        load=load,
        requests_per_second=rps,
        first_token_ms=_metric(metrics, "time_to_first_token", stat, to_ms=True),
        latency_ms=_metric(metrics, "request_latency", stat, to_ms=True),
        output_tokens_per_s=_metric(metrics, "output_token_throughput", "avg"),
        concurrency=int(concurrency) if isinstance(concurrency, int | float) else None,
        input_tokens=_metric(metrics, "input_sequence_length", "avg"),
        output_tokens=_metric(metrics, "output_sequence_length", "avg"),
    )


def perf_analyzer_points(data: dict[str, Any], stat: str) -> list[LoadPoint]:
    """Every experiment of a perf_analyzer profile export."""
    points = []
    for i, exp in enumerate(data["experiments"]):
        mode = exp.get("experiment", {}).get("mode", "?")
        value = exp.get("experiment", {}).get("value")
        done = [r for r in exp.get("requests", []) if r.get("response_timestamps")]
        if not done:
            raise BenchmarkError(f"experiments[{i}] has no request with response_timestamps")
        sent = [float(r["timestamp"]) for r in done]
        first = [float(r["response_timestamps"][0]) for r in done]
        last = [float(r["response_timestamps"][-1]) for r in done]
        start, end = exp.get("window_boundaries") or (min(sent), max(last))
        if end <= start:
            raise BenchmarkError(f"experiments[{i}] has an empty time window")
        in_window = sum(1 for t in last if start <= t <= end)
        points.append(
            LoadPoint(
                tool="perf_analyzer",
                load=f"{mode} {value}",
                requests_per_second=in_window / ((end - start) / 1e9),
                first_token_ms=percentile([(f - s) / 1e6 for f, s in zip(first, sent, strict=True)], stat),
                latency_ms=percentile([(e - s) / 1e6 for e, s in zip(last, sent, strict=True)], stat),
                concurrency=int(value) if mode == "concurrency" and isinstance(value, int | float) else None,
            )
        )
    return points


def read_points(data: Any, stat: str) -> list[LoadPoint]:
    """Load points of a parsed export of any supported format."""
    if isinstance(data, dict) and isinstance(data.get("experiments"), list):
        return perf_analyzer_points(data, stat)
    if isinstance(data, dict):
        return [genai_perf_point(data, stat)]
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data):
        return [genai_perf_point(d, stat) for d in data]
    raise BenchmarkError("expected a GenAI-Perf / AIPerf profile export object (or a list) or perf_analyzer's")


def best_point(points: list[LoadPoint], req: ModelRequirement) -> LoadPoint | None:
    """The highest throughput whose latencies meet the requirement's targets (any point when none is set)."""

    def meets(p: LoadPoint) -> bool:
        if req.max_first_token_ms is not None and (
            p.first_token_ms is None or p.first_token_ms > req.max_first_token_ms
        ):
            return False
        return not (req.max_response_ms is not None and (p.latency_ms is None or p.latency_ms > req.max_response_ms))

    good = [p for p in points if meets(p)]
    return max(good, key=lambda p: p.requests_per_second) if good else None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BenchmarkError(f"duplicate key {key!r}")
        out[key] = value
    return out


def load_points(path: Path, stat: str) -> list[LoadPoint]:
    """Read one export file (InvalidInput-free: raises BenchmarkError or OSError)."""
    if not path.is_file():
        raise BenchmarkError("no such regular file")
    if path.stat().st_size > MAX_BENCHMARK_BYTES:
        raise BenchmarkError(f"larger than {MAX_BENCHMARK_BYTES} bytes")
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicates)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BenchmarkError(f"not JSON: {exc}") from None
    try:
        return read_points(data, stat)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, BenchmarkError):
            raise
        raise BenchmarkError(f"unexpected shape ({type(exc).__name__}: {exc})") from None


def measurement_from_benchmark(m: Measurement, req: ModelRequirement, base: Path, where: str) -> Measurement:
    """The measurement with its benchmark file(s) replaced by the best point's figures."""
    names = [m.benchmark] if isinstance(m.benchmark, str) else list(m.benchmark or [])
    stat = m.statistic or "p99"
    points: list[LoadPoint] = []
    for name in names:
        path = base / name
        try:
            points += load_points(path, stat)
        except (BenchmarkError, OSError) as exc:
            message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InvalidInput(
                f"cannot use benchmark {path}",
                problems=[
                    Problem(
                        where,
                        f"{path}: {message}",
                        "give a GenAI-Perf / AIPerf or perf_analyzer JSON export (docs/sizing.md)",
                    )
                ],
            ) from None
    point = best_point(points, req)
    if point is None:
        shown = ", ".join(f"{p.load}: TTFT {_ms(p.first_token_ms)}, latency {_ms(p.latency_ms)}" for p in points)
        raise InvalidInput(
            "no benchmark point meets the latency target",
            problems=[
                Problem(
                    where,
                    f"no load point meets max_first_token_ms={req.max_first_token_ms} / max_response_ms="
                    f"{req.max_response_ms} at {stat} ({shown})",
                    "measure at lower load, or relax the target",
                )
            ],
        )
    for name, wanted in (("input_tokens", req.input_tokens), ("output_tokens", req.output_tokens)):
        got = getattr(point, name)
        if got is not None and abs(got - wanted) > LENGTH_TOLERANCE * wanted:
            raise InvalidInput(
                "benchmark measured other token lengths",
                problems=[
                    Problem(
                        where,
                        f"{point.load} averages {name} {got:g}, the requirement is {wanted}",
                        f"benchmark with {name} near {wanted}, or change {name}",
                    )
                ],
            )
    target = (
        "highest load"
        if req.max_first_token_ms is None and req.max_response_ms is None
        else "highest load meeting the target"
    )
    return m.model_copy(
        update={
            "benchmark": None,
            "requests_per_second": point.requests_per_second,
            "output_tokens_per_s": point.output_tokens_per_s,
            "concurrency": point.concurrency,
            "first_token_ms": point.first_token_ms,
            "latency_ms": point.latency_ms,
            "statistic": stat,
            "source": f"{point.tool} {', '.join(names)}: {point.load}, {target} at {stat}"
            + (f"; {m.source}" if m.source else ""),
        }
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"
