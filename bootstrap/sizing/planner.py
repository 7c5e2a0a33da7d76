"""Size a cluster from the design guide's tables: which configurations fit each model, and the placement.

Method (design guide chapter 6 and the stack's sizing notes):

* one instance = one TensorRT-LLM engine with tensor parallelism TP (PP=1, Table 12) on TP GPUs of one server;
  instances per server = GPUs / TP;
* a configuration (model, GPU type, TP) is usable when its weights fit (Table 11 at TP=1, split over TP GPUs)
  and Tables 13-15 give figures for it (not "Not supported", "Not recommended" or "Error");
* first-token latency is interpolated linearly in the input length between Table 13 (128) and Table 14 (2048);
* each instance serves ``max_batch_size`` concurrent requests (64 as built in the guide); one request decodes
  at Table 15's throughput / 64 tokens/s, so an answer takes TTFT + output / that rate (Little's law);
* a rate of requests/s is turned into a peak concurrency: the number of requests in service of an
  M/G/infinity system is Poisson with mean rate x response time; its ``peak_percentile`` quantile is used;
* per model, the TP needing the fewest GPUs wins (then the lowest latency); instances are packed onto servers
  in aligned GPU blocks (keeps TP=2 inside an NVLink-bridged pair on R760xa H100 PCIe).

Where the operator measured a model on a server (``measured:``, NVIDIA's method: one server's requests/s at
the latency target for the lengths that matter), that measurement wins over the tables: the model gets
``ceil(peak requests/s / per-server requests/s)`` whole servers plus ``redundancy`` spares
(see :mod:`bootstrap.sizing.measured`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.sizing_spec import (
    GUIDE_MAX_INPUT_TOKENS,
    GUIDE_MAX_OUTPUT_TOKENS,
    InstancePlacement,
    ModelRequirement,
    NodePlacement,
    SizingPlacement,
    SizingRequirements,
)
from bootstrap.sizing.config_result import ConfigResult
from bootstrap.sizing.measured import evaluate_measured, find_measurement
from bootstrap.sizing.poisson import poisson_quantile
from bootstrap.sizing.tables import DesignGuideTables, ServerSpec, figures, load_tables

#: Batch size at which Table 15 was measured.
TABLE_15_BATCH = 64


@dataclass
class ModelFit:
    """All tried TPs of one model on one server type, and the chosen one."""

    key: str
    requirement: ModelRequirement
    tried: list[ConfigResult]

    @property
    def chosen(self) -> ConfigResult | None:
        usable = [c for c in self.tried if c.ok]
        if not usable:
            return None
        return min(usable, key=lambda c: (c.gpus, c.first_token_ms, c.tp))

    def why_not(self) -> str:
        parts = [f"TP={c.tp}: {'; '.join(c.reasons)}" for c in self.tried]
        return " | ".join(parts) if parts else "no tensor-parallel size fits this server"

    def as_dict(self) -> dict[str, Any]:
        chosen = self.chosen
        return {
            "model": self.requirement.model,
            "precision": self.requirement.precision,
            "fits": chosen is not None,
            "chosen": chosen.as_dict() if chosen else None,
            "tried": [c.as_dict() for c in self.tried],
        }


@dataclass
class ServerOption:
    """Every model on one candidate server configuration, and the resulting placement."""

    server: str
    spec: ServerSpec
    fits: list[ModelFit]
    placement: SizingPlacement | None

    @property
    def feasible(self) -> bool:
        return self.placement is not None

    def why_not(self) -> list[str]:
        return [f"{f.requirement.model} {f.requirement.precision}: {f.why_not()}" for f in self.fits if not f.chosen]

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "server": self.server,
            "name": self.spec.name,
            "gpu": self.spec.gpu,
            "gpus_per_server": self.spec.gpu_count,
            "feasible": self.feasible,
            "models": [f.as_dict() for f in self.fits],
        }
        if self.placement:
            data["servers_needed"] = self.placement.servers_needed
            data["gpus_used"] = self.placement.gpus_used
            data["gpus_total"] = self.placement.gpus_total
        else:
            data["why_not"] = self.why_not()
        return data


@dataclass
class SizingResult:
    """Outcome of :func:`size`: every candidate, and the recommended one (or None)."""

    requirements: SizingRequirements
    options: list[ServerOption]
    recommended: ServerOption | None
    notes: list[str]

    def as_dict(self) -> dict[str, Any]:
        rec = self.recommended
        return {
            "ok": rec is not None,
            "source": load_tables().source,
            "requirements": self.requirements.model_dump(mode="json", exclude_none=True),
            "recommended": rec.placement.model_dump(mode="json") if rec and rec.placement else None,
            "options": [o.as_dict() for o in self.options],
            "notes": self.notes,
        }


def size(requirements: SizingRequirements, tables: DesignGuideTables | None = None) -> SizingResult:
    """Evaluate every candidate server for the requirements and pick the one needing the fewest servers."""
    tables = tables or load_tables()
    keys = resolve_requirements(requirements, tables)
    requirements = requirements.model_copy(
        update={
            "models": [
                m.model_copy(update={"model": key.split("/")[0]})
                for m, key in zip(requirements.models, keys, strict=True)
            ]
        }
    )
    candidates = requirements.candidate_servers or list(tables.servers)
    options = []
    overrides: list[str] = []
    for name in candidates:
        spec = tables.servers[name]
        fits = []
        for key, req in zip(keys, requirements.models, strict=True):
            guide = ModelFit(key, req, _guide_tries(req, key, spec, tables))
            measurement = find_measurement(req, name)
            if measurement is None:
                fits.append(guide)
                continue
            fits.append(ModelFit(key, req, [evaluate_measured(req, measurement, spec)]))
            if key in tables.table_11_gpu_memory_gb:
                overrides.append(_override_note(name, fits[-1], guide))
        placement = None
        if all(f.chosen for f in fits):
            placement = pack(name, spec, fits)
        options.append(ServerOption(name, spec, fits, placement))
    feasible = [(o, o.placement) for o in options if o.placement is not None]
    recommended = (
        min(
            feasible,
            key=lambda pair: (pair[1].servers_needed, pair[1].gpus_total, candidates.index(pair[0].server)),
        )[0]
        if feasible
        else None
    )
    return SizingResult(requirements, options, recommended, notes(requirements, options, tables) + overrides)


def _guide_tries(req: ModelRequirement, key: str, spec: ServerSpec, tables: DesignGuideTables) -> list[ConfigResult]:
    """The guide's figures at every TP; a model or length the guide has no figures for gets the reason."""
    if key not in tables.table_11_gpu_memory_gb:
        return [ConfigResult(1, [f"no measurement for this server and the design guide has no {key}"])]
    if req.input_tokens > GUIDE_MAX_INPUT_TOKENS or req.output_tokens > GUIDE_MAX_OUTPUT_TOKENS:
        return [
            ConfigResult(
                1,
                [
                    f"no measurement for this server and {req.input_tokens}/{req.output_tokens} tokens "
                    f"exceed the guide's engines ({GUIDE_MAX_INPUT_TOKENS}/{GUIDE_MAX_OUTPUT_TOKENS})"
                ],
            )
        ]
    return [evaluate(req, key, spec, tp, tables) for tp in tp_choices(spec)]


def _override_note(server: str, measured: ModelFit, guide: ModelFit) -> str:
    """Say that the measurement replaced the guide's figures, and what the guide alone would have given."""
    req = measured.requirement
    head = f"{req.model} {req.precision} on {server}: the measurement is used, not the design guide's tables"
    chosen, by_guide = measured.chosen, guide.chosen
    if chosen is None:
        return f"{head} (the measurement does not fit: {measured.why_not()})"
    if by_guide is None or by_guide.gpus is None:
        return f"{head} (the guide's figures would not fit: {guide.why_not()})"
    return (
        f"{head}: {chosen.servers} server(s) measured vs {by_guide.instances} instance(s) at TP={by_guide.tp} "
        f"({by_guide.gpus} GPUs) by the guide"
    )


def resolve_requirements(requirements: SizingRequirements, tables: DesignGuideTables) -> list[str]:
    """Map each requirement to its ``model/precision`` table key; all problems at once as InvalidInput."""
    problems: list[Problem] = []
    keys: list[str] = []
    for i, req in enumerate(requirements.models):
        model = tables.resolve_model(req.model)
        for j, m in enumerate(req.measured):
            if m.server not in tables.servers:
                problems.append(
                    Problem(
                        f"models[{i}].measured[{j}].server",
                        f"unknown server configuration {m.server!r}",
                        f"use one of: {', '.join(tables.servers)}",
                    )
                )
        if req.measured:
            keys.append(f"{model or req.model}/{req.precision}")
            continue
        for field_name, limit in (("input_tokens", GUIDE_MAX_INPUT_TOKENS), ("output_tokens", GUIDE_MAX_OUTPUT_TOKENS)):
            value = getattr(req, field_name)
            if value > limit:
                problems.append(
                    Problem(
                        f"models[{i}].{field_name}",
                        f"{value} is beyond the design guide's engines (at most {limit}); "
                        "the guide has no figures for it",
                        f"use at most {limit}, or give your own figures under 'measured:' (see docs/sizing.md)",
                    )
                )
        if model is None:
            problems.append(
                Problem(
                    f"models[{i}].model",
                    f"unknown model {req.model!r}: the design guide has no figures for it",
                    f"use one of: {', '.join(tables.models)}, or give measured figures under 'measured:'",
                )
            )
            continue
        key = f"{model}/{req.precision}"
        if key not in tables.table_11_gpu_memory_gb:
            problems.append(
                Problem(
                    f"models[{i}].precision",
                    f"{req.precision!r} is not measured for {model} in the design guide",
                    f"use one of: {', '.join(tables.precisions_of(model))}, or give measured figures",
                )
            )
        keys.append(key)
    for i, server in enumerate(requirements.candidate_servers or []):
        if server not in tables.servers:
            problems.append(
                Problem(
                    f"candidate_servers[{i}]",
                    f"unknown server configuration {server!r}",
                    f"use one of: {', '.join(tables.servers)}",
                )
            )
    if requirements.candidate_servers is not None and not requirements.candidate_servers:
        problems.append(
            Problem("candidate_servers", "empty list", f"omit it, or list some of: {', '.join(tables.servers)}")
        )
    if problems:
        raise InvalidInput("invalid sizing requirements", problems=problems)
    return keys


def tp_choices(spec: ServerSpec) -> list[int]:
    """Tensor-parallel sizes possible on one server: powers of two up to its GPUs and TP limit."""
    limit = min(spec.gpu_count, spec.max_tp)
    return [2**i for i in range(limit.bit_length()) if 2**i <= limit]


def first_token_ms(ttft_128: float, ttft_2048: float, input_tokens: int) -> float:
    """Linear interpolation of Tables 13/14 in the input length (no extrapolation below 128)."""
    if input_tokens <= 128:
        return ttft_128
    return ttft_128 + (ttft_2048 - ttft_128) * (input_tokens - 128) / (2048 - 128)


def peak_concurrency(req: ModelRequirement, response_s: float) -> int:
    """Peak simultaneous requests: given, or the Poisson percentile of rate x response time."""
    if req.concurrent_users is not None:
        return req.concurrent_users
    if req.requests_per_second is not None:
        return poisson_quantile(req.peak_percentile, req.requests_per_second * response_s)
    return 0


def evaluate(req: ModelRequirement, key: str, spec: ServerSpec, tp: int, tables: DesignGuideTables) -> ConfigResult:
    """Check one model at one TP on one server type against the tables and the requirement."""
    result = ConfigResult(tp)
    gpu = tables.gpus[spec.gpu]
    memory = tables.table_11_gpu_memory_gb[key]
    if memory / tp > gpu.memory_gb:
        result.reasons.append(
            f"Table 11: needs {memory:g} GB of GPU memory, {memory / tp:.2f} GB per GPU at TP={tp} "
            f"> {gpu.memory_gb:g} GB of one {gpu.name}"
        )
    figs = figures(tables, key, spec.gpu, tp)
    result.reasons.extend(figs.blockers())
    if result.reasons:
        return result
    assert isinstance(figs.ttft_128_ms, float | int) and isinstance(figs.ttft_2048_ms, float | int)
    assert isinstance(figs.tokens_per_s, float | int)
    result.first_token_ms = first_token_ms(figs.ttft_128_ms, figs.ttft_2048_ms, req.input_tokens)
    result.tokens_per_s = float(figs.tokens_per_s)
    per_request_rate = result.tokens_per_s / TABLE_15_BATCH
    result.response_ms = result.first_token_ms + 1000.0 * req.output_tokens / per_request_rate
    if req.max_first_token_ms is not None and result.first_token_ms > req.max_first_token_ms:
        result.reasons.append(
            f"first token {result.first_token_ms:.1f} ms (Tables 13/14, input {req.input_tokens}) "
            f"> max_first_token_ms {req.max_first_token_ms:g}"
        )
    if req.max_response_ms is not None and result.response_ms > req.max_response_ms:
        result.reasons.append(
            f"answer of {req.output_tokens} tokens takes ~{result.response_ms:.0f} ms at full batch "
            f"(Table 15: {result.tokens_per_s:g} tokens/s / {TABLE_15_BATCH}) > max_response_ms "
            f"{req.max_response_ms:g}"
        )
    if result.reasons:
        return result
    result.peak_concurrency = peak_concurrency(req, result.response_ms / 1000.0)
    result.instances = max(req.min_instances, math.ceil(result.peak_concurrency / req.max_batch_size))
    return result


def pack(name: str, spec: ServerSpec, fits: list[ModelFit]) -> SizingPlacement:
    """Place every chosen instance on aligned GPU blocks, largest TP first, opening servers as needed."""
    wanted: list[tuple[ModelRequirement, int]] = []
    dedicated: list[list[InstancePlacement]] = []
    for fit in fits:
        chosen = fit.chosen
        assert chosen is not None and chosen.instances is not None
        if chosen.servers is not None:  # measured: whole servers, filled as measured
            per_server = chosen.instances // max(chosen.servers, 1)
            req = fit.requirement
            for _ in range(chosen.servers):
                dedicated.append(
                    [
                        InstancePlacement(
                            model=req.model,
                            precision=req.precision,
                            tensor_parallel=chosen.tp,
                            gpus=list(range(k * chosen.tp, (k + 1) * chosen.tp)),
                        )
                        for k in range(per_server)
                    ]
                )
            continue
        wanted += [(fit.requirement, chosen.tp)] * chosen.instances
    wanted.sort(key=lambda item: -item[1])  # stable: keeps the requirements' order within one TP
    free: list[list[bool]] = []
    placed: list[list[InstancePlacement]] = []
    for req, tp in wanted:
        slot = _free_slot(free, tp)
        if slot is None:
            free.append([True] * spec.gpu_count)
            placed.append([])
            slot = (len(free) - 1, list(range(tp)))
        node, block = slot
        for g in block:
            free[node][g] = False
        placed[node].append(InstancePlacement(model=req.model, precision=req.precision, tensor_parallel=tp, gpus=block))
    nodes = [NodePlacement(node=i, instances=insts, gpus_free=sum(free[i])) for i, insts in enumerate(placed)]
    for insts in dedicated:
        used_gpus = sum(len(inst.gpus) for inst in insts)
        nodes.append(NodePlacement(node=len(nodes), instances=insts, gpus_free=spec.gpu_count - used_gpus))
    used = sum(spec.gpu_count - n.gpus_free for n in nodes)
    return SizingPlacement(
        server=name,
        servers_needed=len(nodes),
        gpus_used=used,
        gpus_total=len(nodes) * spec.gpu_count,
        nodes=nodes,
    )


def _free_slot(free: list[list[bool]], size: int) -> tuple[int, list[int]] | None:
    """First node with an aligned block of ``size`` free GPUs, and that block."""
    for node, gpus_free in enumerate(free):
        block = _aligned_block(gpus_free, size)
        if block is not None:
            return node, block
    return None


def _aligned_block(free: list[bool], size: int) -> list[int] | None:
    for start in range(0, len(free) - size + 1, size):
        if all(free[start : start + size]):
            return list(range(start, start + size))
    return None


def notes(requirements: SizingRequirements, options: list[ServerOption], tables: DesignGuideTables) -> list[str]:
    """Caveats of the method that apply to this result."""
    out = [
        f"Figures: {tables.source} (TensorRT-LLM 0.7.1, without Triton).",
        "First-token latency is the guide's batch-1 figure; it grows with the batch (the guide says so).",
        "Throughput is Table 15's (batch 64, input and output 128); other lengths scale it only by Little's law.",
    ]
    if any(tables.gpus[o.spec.gpu].figures_are_proxy for o in options):
        out.append(
            "H100 PCIe is not measured in the guide: its figures are the H100 SXM columns (optimistic); "
            "TP is kept at 2 inside an NVLink-bridged pair."
        )
    if any(m.requests_per_second is not None and not m.measured for m in requirements.models):
        out.append("Peak concurrency from requests/s: Poisson percentile of rate x response time (M/G/inf).")
    if any(m.measured for m in requirements.models):
        out.append(
            "Measured: servers = ceil(peak requests/s / one server's requests/s at the target) + redundancy; "
            "a mean rate's peak is the Poisson percentile of arrivals in one second."
        )
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
