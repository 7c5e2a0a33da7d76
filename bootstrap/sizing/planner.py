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

Measured figures (NVIDIA's method: measure one server at the latency target, size for the peak) replace the
tables for the server they were measured on: capacity per server is the measured requests/s (or concurrency),
the peak is given or a Poisson percentile of the mean rate, and :class:`~bootstrap.sizing.capacity.Arithmetic`
does the exact division. Redundancy (N+k) adds k servers' worth of instances to each model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.sizing_spec import (
    GUIDE_MAX_INPUT_TOKENS,
    GUIDE_MAX_OUTPUT_TOKENS,
    InstancePlacement,
    Measurement,
    ModelRequirement,
    NodePlacement,
    SizingPlacement,
    SizingRequirements,
)
from bootstrap.sizing.capacity import CONCURRENT, REQUESTS_PER_S, Arithmetic, exact
from bootstrap.sizing.poisson import poisson_quantile
from bootstrap.sizing.tables import DesignGuideTables, ServerSpec, figures, load_tables

#: Batch size at which Table 15 was measured.
TABLE_15_BATCH = 64
GUIDE = "design guide Tables 11-15"


@dataclass
class ConfigResult:
    """One model on ``tp`` GPUs of one server type: usable or not, and why."""

    tp: int
    reasons: list[str] = field(default_factory=list)
    first_token_ms: float | None = None
    tokens_per_s: float | None = None
    response_ms: float | None = None
    peak_concurrency: int | None = None
    instances: int | None = None
    pp: int = 1
    source: str = GUIDE
    arithmetic: Arithmetic | None = None

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def width(self) -> int:
        """GPUs of one instance (TP x PP)."""
        return self.tp * self.pp

    @property
    def gpus(self) -> int | None:
        return None if self.instances is None else self.instances * self.width

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"tensor_parallel": self.tp, "fits": self.ok, "figures": self.source}
        if self.pp > 1:
            data["pipeline_parallel"] = self.pp
        if self.ok:
            data.update(
                instances=self.instances,
                gpus=self.gpus,
                first_token_ms=_round(self.first_token_ms),
                instance_tokens_per_s=self.tokens_per_s,
                response_ms=_round(self.response_ms),
                peak_concurrency=self.peak_concurrency,
            )
            if self.arithmetic is not None:
                data["arithmetic"] = self.arithmetic.as_dict()
        else:
            data["why_not"] = self.reasons
        return data


@dataclass
class ModelFit:
    """All tried TPs of one model on one server type, and the chosen one."""

    key: str | None
    requirement: ModelRequirement
    tried: list[ConfigResult]
    guide: ConfigResult | None = None
    """What the guide's tables alone would choose, where a measurement replaced them."""

    @property
    def chosen(self) -> ConfigResult | None:
        return best(self.tried)

    @property
    def measured(self) -> bool:
        chosen = self.chosen
        return chosen is not None and chosen.source != GUIDE

    def overrides(self) -> str | None:
        """Where a measurement and the guide both size this model here: what each says (the measurement wins)."""
        chosen, guide = self.chosen, self.guide
        if not self.measured or guide is None or chosen is None:
            return None
        verdict = "agree" if guide.instances == chosen.instances else "disagree"
        return (
            f"{self.requirement.model} {self.requirement.precision}: the measurement and the guide {verdict} "
            f"(measured: TP={chosen.tp} x{chosen.instances}; guide: TP={guide.tp} x{guide.instances}); "
            "the measurement wins"
        )

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
            "measurement_wins": self.overrides(),
            "guide": self.guide.as_dict() if self.guide else None,
        }


def best(results: list[ConfigResult]) -> ConfigResult | None:
    """The usable configuration needing the fewest GPUs, then the lowest latency, then the smallest TP."""
    usable = [c for c in results if c.ok]
    if not usable:
        return None
    return min(usable, key=lambda c: (c.gpus, math.inf if c.first_token_ms is None else c.first_token_ms, c.tp))


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
    mixed: list[MixedPart] | None = None
    """When no single configuration fits every model: each model on its best one (a mixed fleet)."""

    @property
    def ok(self) -> bool:
        return self.recommended is not None or self.mixed is not None

    @property
    def fleet(self) -> list[SizingPlacement] | None:
        """The mixed fleet's placements, one per server configuration."""
        return [part.placement for part in self.mixed] if self.mixed else None

    def chosen_fits(self) -> list[ModelFit]:
        """The fits the answer uses: the recommended option's, or the mixed fleet's."""
        if self.recommended:
            return self.recommended.fits
        return [f for part in self.mixed or [] for f in part.fits]

    @property
    def source(self) -> str:
        """Where the answer's figures come from: the guide, measurements, or both."""
        guide = load_tables().source
        fits = self.chosen_fits()
        measured = sorted({f.requirement.model for f in fits if f.measured})
        if not measured:
            return guide
        rest = [f.requirement.model for f in fits if not f.measured]
        text = f"operator measurements for {', '.join(measured)}"
        return f"{text}; {guide} for {', '.join(rest)}" if rest else text

    def as_dict(self) -> dict[str, Any]:
        rec = self.recommended
        fleet = self.fleet
        return {
            "ok": self.ok,
            "source": self.source,
            "requirements": self.requirements.model_dump(mode="json", exclude_none=True),
            "recommended": rec.placement.model_dump(mode="json") if rec and rec.placement else None,
            "mixed_fleet": [p.model_dump(mode="json") for p in fleet] if fleet else None,
            "options": [o.as_dict() for o in self.options],
            "notes": self.notes,
        }


@dataclass
class MixedPart:
    """The models of a mixed fleet that run on one server configuration, and their placement."""

    option: ServerOption
    fits: list[ModelFit]
    placement: SizingPlacement


def mixed_fleet(options: list[ServerOption]) -> list[MixedPart] | None:
    """Each model on the configuration where it alone needs the fewest servers (then GPUs); None if one fits none."""
    if not options:
        return None
    parts: dict[str, tuple[ServerOption, list[ModelFit]]] = {}
    for i in range(len(options[0].fits)):
        usable = [(o, o.fits[i], o.fits[i].chosen) for o in options]
        ranked = [
            (c.arithmetic.servers_alone if c.arithmetic else 0, c.gpus or 0, n, o, f)
            for n, (o, f, c) in enumerate(usable)
            if c is not None
        ]
        if not ranked:
            return None
        *_, option, fit = min(ranked, key=lambda r: r[:3])
        parts.setdefault(option.server, (option, []))[1].append(fit)
    return [MixedPart(o, fits, pack(o.server, o.spec, fits)) for o, fits in parts.values()]


def size(requirements: SizingRequirements, tables: DesignGuideTables | None = None) -> SizingResult:
    """Evaluate every candidate server for the requirements and pick the one needing the fewest servers."""
    tables = tables or load_tables()
    keys = resolve_requirements(requirements, tables)
    requirements = requirements.model_copy(
        update={
            "models": [
                m.model_copy(update={"model": key.split("/")[0]}) if key else m
                for m, key in zip(requirements.models, keys, strict=True)
            ]
        }
    )
    candidates = requirements.candidate_servers or list(tables.servers)
    options = []
    for name in candidates:
        spec = tables.servers[name]
        fits = [fit_model(req, key, name, spec, tables) for key, req in zip(keys, requirements.models, strict=True)]
        placement = None
        if all(f.chosen for f in fits):
            placement = pack(name, spec, fits)
        options.append(ServerOption(name, spec, fits, placement))
    feasible = [(o, o.placement) for o in options if o.placement]
    recommended = (
        min(
            feasible,
            key=lambda item: (item[1].servers_needed, item[1].gpus_total, candidates.index(item[0].server)),
        )[0]
        if feasible
        else None
    )
    mixed = None if recommended else mixed_fleet(options)
    return SizingResult(requirements, options, recommended, notes(requirements, options, tables), mixed)


def fit_model(
    req: ModelRequirement, key: str | None, name: str, spec: ServerSpec, tables: DesignGuideTables
) -> ModelFit:
    """Every way to run one model on one server type: its measurements there, else the guide's tables."""
    guide = [evaluate(req, key, spec, tp, tables) for tp in tp_choices(spec)] if key else []
    measured = [evaluate_measured(req, m, spec) for m in req.measurements if m.server == name]
    if measured:
        return ModelFit(key, req, measured, best(guide))
    if not guide:
        reason = f"no measurement on {name}, and the design guide has no figures for {req.model} {req.precision}"
        return ModelFit(key, req, [ConfigResult(tp=1, reasons=[reason], source="measurements")])
    return ModelFit(key, req, guide)


def resolve_requirements(requirements: SizingRequirements, tables: DesignGuideTables) -> list[str | None]:
    """Map each requirement to its ``model/precision`` table key (None: measured only); problems at once."""
    problems: list[Problem] = []
    keys: list[str | None] = []
    add = "; or add measurements of your own (docs/sizing.md)"
    for i, req in enumerate(requirements.models):
        for j, m in enumerate(req.measurements):
            if m.server not in tables.servers:
                problems.append(
                    Problem(
                        f"models[{i}].measurements[{j}].server",
                        f"unknown server configuration {m.server!r}",
                        f"use one of: {', '.join(tables.servers)}",
                    )
                )
        model = tables.resolve_model(req.model)
        key = f"{model}/{req.precision}" if model else None
        if key not in tables.table_11_gpu_memory_gb:
            key = None
        if key is None and not req.measurements:
            if model is None:
                problems.append(
                    Problem(
                        f"models[{i}].model",
                        f"unknown model {req.model!r}: the design guide has no figures for it",
                        f"use one of: {', '.join(tables.models)}{add}",
                    )
                )
            else:
                problems.append(
                    Problem(
                        f"models[{i}].precision",
                        f"{req.precision!r} is not measured for {model} in the design guide",
                        f"use one of: {', '.join(tables.precisions_of(model))}{add}",
                    )
                )
            continue
        if not req.measurements:
            for name, limit in (("input_tokens", GUIDE_MAX_INPUT_TOKENS), ("output_tokens", GUIDE_MAX_OUTPUT_TOKENS)):
                if getattr(req, name) > limit:
                    problems.append(
                        Problem(
                            f"models[{i}].{name}",
                            f"{getattr(req, name)} is beyond the design guide's measured range (at most {limit})",
                            f"give at most {limit}{add}",
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
    """Peak simultaneous requests: given, the Poisson percentile of rate x response time, or peak x time."""
    if req.concurrent_users is not None:
        return req.concurrent_users
    if req.requests_per_second is not None:
        return poisson_quantile(req.peak_percentile, req.requests_per_second * response_s)
    if req.peak_requests_per_second is not None:
        return math.ceil(exact(req.peak_requests_per_second) * exact(response_s))
    return 0


def peak_concurrency_from(req: ModelRequirement) -> str:
    """How :func:`peak_concurrency` got its number."""
    if req.concurrent_users is not None:
        return "concurrent_users, given"
    if req.requests_per_second is not None:
        return f"Poisson p{req.peak_percentile * 100:g} of {req.requests_per_second:g} req/s x response time"
    if req.peak_requests_per_second is not None:
        return f"peak {req.peak_requests_per_second:g} req/s x response time (Little's law)"
    return "no load given: min_instances"


def peak_rate(req: ModelRequirement) -> tuple[Fraction, str]:
    """Peak requests/s: given, or the Poisson percentile of the arrivals in one second at the mean rate."""
    if req.peak_requests_per_second is not None:
        return exact(req.peak_requests_per_second), "peak_requests_per_second, given"
    if req.requests_per_second is not None:
        peak = poisson_quantile(req.peak_percentile, req.requests_per_second)
        return Fraction(peak), (
            f"Poisson p{req.peak_percentile * 100:g} of the arrivals in 1 s at {req.requests_per_second:g} req/s"
        )
    return Fraction(0), "no load given: min_instances"


def evaluate_measured(req: ModelRequirement, m: Measurement, spec: ServerSpec) -> ConfigResult:
    """One measured configuration: the operator's figures against the requirement's targets and load."""
    label = m.source or "measurement"
    result = ConfigResult(m.tensor_parallel, pp=m.pipeline_parallel, source=f"measured ({label})")
    if result.width > spec.gpu_count:
        result.reasons.append(
            f"measured TP x PP = {result.width} GPUs per instance > {spec.gpu_count} GPUs of one {spec.name}"
        )
        return result
    per_server = (
        exact(m.requests_per_second) if m.requests_per_second else exact(m.output_tokens_per_s or 0) / req.output_tokens
    )
    if per_server == 0:  # a benchmark: not read (parse_requirements without load_requirements)
        result.reasons.append(f"benchmark {m.benchmark} not read: load the requirements with load_requirements")
        return result
    result.first_token_ms, result.response_ms = m.first_token_ms, m.latency_ms
    result.tokens_per_s = float(m.output_tokens_per_s or per_server * req.output_tokens)
    if (
        req.max_first_token_ms is not None
        and m.first_token_ms is not None
        and m.first_token_ms > req.max_first_token_ms
    ):
        result.reasons.append(
            f"measured first token {m.first_token_ms:g} ms > max_first_token_ms {req.max_first_token_ms:g}"
        )
    if req.max_response_ms is not None and m.latency_ms is not None and m.latency_ms > req.max_response_ms:
        result.reasons.append(f"measured latency {m.latency_ms:g} ms > max_response_ms {req.max_response_ms:g}")
    per_server_unit, unit = per_server, REQUESTS_PER_S
    if req.concurrent_users is not None:
        unit = CONCURRENT
        if m.concurrency is not None:
            per_server_unit = Fraction(m.concurrency)
        elif m.latency_ms is not None:  # Little's law: in service = rate x time
            per_server_unit = per_server * exact(m.latency_ms) / 1000
        else:
            result.reasons.append(
                "the requirement gives concurrent_users but the measurement no concurrency or latency_ms: "
                "add one, or give the load as requests_per_second"
            )
        peak, peak_from = Fraction(req.concurrent_users), "concurrent_users, given"
    else:
        peak, peak_from = peak_rate(req)
    if result.reasons:
        return result
    instances_per_server = spec.gpu_count // result.width
    result.arithmetic = Arithmetic(
        unit=unit,
        per_instance=per_server_unit / instances_per_server,
        instances_per_server=instances_per_server,
        peak=peak,
        peak_from=peak_from,
        min_instances=req.min_instances,
        redundancy=req.redundancy,
    )
    result.instances = result.arithmetic.instances
    return result


def evaluate(req: ModelRequirement, key: str, spec: ServerSpec, tp: int, tables: DesignGuideTables) -> ConfigResult:
    """Check one model at one TP on one server type against the tables and the requirement."""
    result = ConfigResult(tp)
    for name, limit in (("input_tokens", GUIDE_MAX_INPUT_TOKENS), ("output_tokens", GUIDE_MAX_OUTPUT_TOKENS)):
        if getattr(req, name) > limit:
            result.reasons.append(
                f"{name} {getattr(req, name)} is beyond the guide's measured range ({limit}): add a measurement"
            )
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
    result.arithmetic = Arithmetic(
        unit=CONCURRENT,
        per_instance=Fraction(req.max_batch_size),
        instances_per_server=spec.gpu_count // tp,
        peak=Fraction(result.peak_concurrency),
        peak_from=peak_concurrency_from(req),
        min_instances=req.min_instances,
        redundancy=req.redundancy,
    )
    result.instances = result.arithmetic.instances
    return result


def pack(name: str, spec: ServerSpec, fits: list[ModelFit]) -> SizingPlacement:
    """Place every chosen instance on aligned GPU blocks, largest TP first, opening servers as needed."""
    wanted: list[tuple[ModelRequirement, ConfigResult]] = []
    for fit in fits:
        chosen = fit.chosen
        assert chosen is not None and chosen.instances is not None
        wanted += [(fit.requirement, chosen)] * chosen.instances
    wanted.sort(key=lambda item: -item[1].width)  # stable: keeps the requirements' order within one width
    free: list[list[bool]] = []
    placed: list[list[InstancePlacement]] = []
    for req, config in wanted:
        slot = _free_slot(free, config.width)
        if slot is None:
            free.append([True] * spec.gpu_count)
            placed.append([])
            slot = (len(free) - 1, list(range(config.width)))
        node, block = slot
        for g in block:
            free[node][g] = False
        placed[node].append(
            InstancePlacement(
                model=req.model,
                precision=req.precision,
                tensor_parallel=config.tp,
                pipeline_parallel=config.pp if config.pp > 1 else None,
                gpus=block,
            )
        )
    nodes = [NodePlacement(node=i, instances=insts, gpus_free=sum(free[i])) for i, insts in enumerate(placed)]
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
    uses_guide = any(c.source == GUIDE for o in options for f in o.fits for c in f.tried)
    out = (
        [
            f"Figures: {tables.source} (TensorRT-LLM 0.7.1, without Triton).",
            "First-token latency is the guide's batch-1 figure; it grows with the batch (the guide says so).",
            "Throughput is Table 15's (batch 64, input and output 128); other lengths scale it only by Little's law.",
        ]
        if uses_guide
        else []
    )
    if uses_guide and any(tables.gpus[o.spec.gpu].figures_are_proxy for o in options):
        out.append(
            "H100 PCIe is not measured in the guide: its figures are the H100 SXM columns (optimistic); "
            "TP is kept at 2 inside an NVLink-bridged pair."
        )
    if any(m.requests_per_second is not None for m in requirements.models):
        out.append(
            "Peak from requests/s: with the guide's figures, the Poisson percentile of rate x response time "
            "(M/G/inf, concurrent requests); with measured requests/s, the Poisson percentile of the arrivals "
            "in one second."
        )
    for option in options:
        for fit in option.fits:
            line = fit.overrides()
            if line:
                out.append(f"{option.server}: {line}.")
    for i, req in enumerate(requirements.models):
        for m in req.measurements:
            unchecked = [
                limit
                for limit, target, figure in (
                    ("max_first_token_ms", req.max_first_token_ms, m.first_token_ms),
                    ("max_response_ms", req.max_response_ms, m.latency_ms),
                )
                if target is not None and figure is None
            ]
            if unchecked:
                out.append(
                    f"models[{i}] on {m.server}: the measurement gives no figure for {', '.join(unchecked)}; "
                    "it is taken as measured at that target."
                )
            out.append(
                f"models[{i}] {req.model} {req.precision} on {m.server} (TP={m.tensor_parallel}, "
                f"PP={m.pipeline_parallel}): measured figures ({m.source or 'no source given'}) replace the guide's."
            )
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
