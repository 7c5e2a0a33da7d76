"""Size one model on one server from the operator's own measurement (NVIDIA's sizing method).

Capacity C = requests/s one server sustains at the latency target (given, or output tokens/s divided by
the output length, or the best point of a benchmark export). Peak P = the given peak requests/s, or the
Poisson percentile of arrivals in one second for a mean rate. Servers = ceil(P / C) + redundancy, at least
enough for ``min_instances``. The arithmetic is exact (fractions of the decimal figures), so capacity x
servers equal to the peak needs no extra server.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from bootstrap.inventory.sizing_spec import Measurement, ModelRequirement
from bootstrap.sizing.benchmarks import best_point, read_points
from bootstrap.sizing.config_result import ConfigResult
from bootstrap.sizing.poisson import poisson_quantile

if TYPE_CHECKING:
    from bootstrap.sizing.tables import ServerSpec


def find_measurement(req: ModelRequirement, server: str) -> Measurement | None:
    """The requirement's measurement on ``server`` (the first one listed), or None."""
    return next((m for m in req.measured if m.server == server), None)


def exact(value: float | int) -> Fraction:
    """The decimal a person wrote (0.1 stays 1/10), for exact ceil() at the boundaries."""
    return Fraction(str(value))


def evaluate_measured(req: ModelRequirement, m: Measurement, spec: ServerSpec) -> ConfigResult:
    """Servers for ``req`` from measurement ``m`` on one server type, with the arithmetic."""
    gpus_per_instance = m.tensor_parallel * m.pipeline_parallel
    result = ConfigResult(m.tensor_parallel)
    if gpus_per_instance > spec.gpu_count:
        result.reasons.append(
            f"measured at TP={m.tensor_parallel} x PP={m.pipeline_parallel} = {gpus_per_instance} GPUs "
            f"but one {spec.name} has {spec.gpu_count}"
        )
        return result
    inp = m.input_tokens or req.input_tokens
    out = m.output_tokens or req.output_tokens
    if (inp, out) != (req.input_tokens, req.output_tokens):
        result.reasons.append(
            f"measured at {inp}/{out} input/output tokens, required {req.input_tokens}/{req.output_tokens}: "
            "measure at the lengths that matter"
        )
        return result
    capacity, source, ttft, latency = _capacity(req, m, out)
    if capacity is None:
        result.reasons.append(source)
        return result
    for value, limit, what in (
        (ttft, req.max_first_token_ms, "max_first_token_ms"),
        (latency, req.max_response_ms, "max_response_ms"),
    ):
        if value is not None and limit is not None and value > limit:
            result.reasons.append(f"measured {value:g} ms > {what} {limit:g}")
    if result.reasons:
        return result
    if req.concurrent_users is not None and m.concurrency is None:
        result.reasons.append(
            "concurrent_users needs the concurrency the measurement met the target at: add concurrency, "
            "or give peak_requests_per_second instead"
        )
        return result
    instances_per_server = spec.gpu_count // gpus_per_instance
    peak, peak_from = _peak(req, m)
    per_server = exact(m.concurrency or 0) if peak_from == "concurrent_users" else capacity
    for_peak = math.ceil(peak / per_server)
    for_min = math.ceil(req.min_instances / instances_per_server)
    base = max(for_peak, for_min, 1)
    servers = base + req.redundancy
    unit = "concurrent requests" if peak_from == "concurrent_users" else "requests/s"
    result.servers = servers
    result.instances = servers * instances_per_server
    result.first_token_ms = ttft
    result.response_ms = latency
    result.arithmetic = {
        "capacity_source": source,
        "unit": unit,
        "per_server": float(per_server),
        "peak": float(peak),
        "peak_from": peak_from,
        "servers_for_peak": for_peak,
        "servers_for_min_instances": for_min,
        "redundancy": req.redundancy,
        "headroom": float(base * per_server - peak),
        "formula": (
            f"ceil({float(peak):g} / {float(per_server):g} {unit} per server) = {for_peak}"
            + (f", at least {base}" if base != for_peak else "")
            + (f" + {req.redundancy} spare" if req.redundancy else "")
            + f" = {servers} server(s); headroom {float(base * per_server - peak):g} {unit}"
        ),
    }
    return result


def _capacity(
    req: ModelRequirement, m: Measurement, output_tokens: int
) -> tuple[Fraction | None, str, float | None, float | None]:
    """(requests/s per server or None, where it comes from or why not, TTFT ms, latency ms)."""
    if m.requests_per_second is not None:
        return exact(m.requests_per_second), "measured requests/s", m.first_token_ms, m.latency_ms
    if m.output_tokens_per_s is not None:
        rps = exact(m.output_tokens_per_s) / output_tokens
        source = f"{m.output_tokens_per_s:g} tokens/s / {output_tokens} output tokens"
        return rps, source, m.first_token_ms, m.latency_ms
    assert m.benchmark is not None
    points = read_points(Path(m.benchmark), f"measured ({m.server}).benchmark")
    best = best_point(points, req.max_first_token_ms, req.max_response_ms)
    if best is None:
        seen = ", ".join(f"{p.load}: TTFT p99 {p.first_token_ms} ms, latency p99 {p.latency_ms} ms" for p in points)
        return None, f"no load in {m.benchmark} meets the latency target ({seen})", None, None
    return (
        exact(round(best.requests_per_second, 6)),
        f"{Path(m.benchmark).name}, {best.load} (highest load meeting the target, p99)",
        best.first_token_ms,
        best.latency_ms,
    )


def _peak(req: ModelRequirement, m: Measurement) -> tuple[Fraction, str]:
    """Peak load and which requirement field gives it."""
    if req.peak_requests_per_second is not None:
        return exact(req.peak_requests_per_second), "peak_requests_per_second"
    if req.requests_per_second is not None:
        q = poisson_quantile(req.peak_percentile, req.requests_per_second)
        return Fraction(q), f"requests_per_second {req.requests_per_second:g} at p{req.peak_percentile * 100:g}"
    if req.concurrent_users is not None:
        return Fraction(req.concurrent_users), "concurrent_users"
    return Fraction(0), "min_instances"
