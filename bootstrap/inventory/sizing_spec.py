"""The inventory's ``sizing:`` section: what the user needs (requirements) and where it runs (placement).

The same :class:`SizingRequirements` model reads ``rackctl size --requirements FILE``; the planner fills
:class:`SizingPlacement`; ``rackctl size --write`` stores both under the inventory's top-level ``sizing:``.
"""

from __future__ import annotations

import typing
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Precision = Literal["fp8", "awq", "fp16", "bf16", "int8", "int4"]
#: The closed choice of precisions (the CLI offers these); the guide measured only fp8 and awq.
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)
Statistic = Literal["avg", "p50", "p90", "p95", "p99"]

#: The design guide builds every engine with these limits (chapter 6): inputs/outputs beyond them are unsized.
GUIDE_MAX_INPUT_TOKENS = 2048
GUIDE_MAX_OUTPUT_TOKENS = 2048
GUIDE_MAX_BATCH_SIZE = 64
#: Sense limit on token lengths given with measurements (longer than any model's context today).
MAX_TOKENS = 1_048_576


def normalise_name(name: str) -> str:
    """'Llama 2 13B' / 'llama_2_13b' -> 'llama-2-13b' (the key the sizing tables use)."""
    return "-".join(name.strip().lower().replace("_", " ").replace("-", " ").split())


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Measurement(_Strict):
    """What the operator measured: one server of a known configuration running one model at the target.

    Capacity is ``requests_per_second`` one server sustains while meeting the latency target, or
    ``output_tokens_per_s`` of one server (requests/s = tokens/s / output tokens) with the ``concurrency``
    at which it was measured. ``benchmark`` names a GenAI-Perf / perf_analyzer export instead; it is read
    when the requirements are loaded and replaced by the figures of the highest load meeting the target.
    """

    server: str = Field(description="Server configuration measured, e.g. xe9680 (rackctl size lists them).")
    tensor_parallel: int = Field(1, ge=1, le=64, description="TP of each instance measured.")
    pipeline_parallel: int = Field(1, ge=1, le=64, description="PP of each instance measured.")
    input_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Prompt length measured.")
    output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Answer length measured.")
    requests_per_second: float | None = Field(None, gt=0, description="Requests/s one server sustains.")
    concurrency: int | None = Field(None, ge=1, description="Concurrent requests on one server at the target.")
    output_tokens_per_s: float | None = Field(None, gt=0, description="Output tokens/s of one server.")
    first_token_ms: float | None = Field(None, gt=0, description="Time to first token measured (ms).")
    latency_ms: float | None = Field(None, gt=0, description="Whole-request latency measured (ms).")
    benchmark: str | list[str] | None = Field(
        None, description="GenAI-Perf / AIPerf / perf_analyzer JSON export(s) to read (relative to the file)."
    )
    statistic: Statistic | None = Field(
        None, description="Latency statistic of a benchmark held to the target (default p99)."
    )
    source: str | None = Field(None, description="Where the figures come from (tool, version, date).")

    @field_validator("server", mode="before")
    @classmethod
    def _normalise_server(cls, value: object) -> object:
        return normalise_name(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _has_a_capacity(self) -> Measurement:
        if self.benchmark is None and self.requests_per_second is None and self.output_tokens_per_s is None:
            raise ValueError(
                "a measurement needs requests_per_second, or output_tokens_per_s (with concurrency), "
                "or a benchmark file"
            )
        return self


class ModelRequirement(_Strict):
    """One model to serve and the load and latency it must sustain."""

    model: str = Field(description="Model name: one of the design guide's, or any with measurements.")
    precision: Precision = Field(description="Quantisation the engine is built with, e.g. fp8 or awq.")
    input_tokens: int = Field(128, ge=1, le=MAX_TOKENS, description="Prompt length (tokens).")
    output_tokens: int = Field(128, ge=1, le=MAX_TOKENS, description="Answer length (tokens).")
    concurrent_users: int | None = Field(None, ge=1, description="Peak simultaneous requests.")
    requests_per_second: float | None = Field(None, gt=0, description="Average arrival rate (Poisson).")
    peak_requests_per_second: float | None = Field(None, gt=0, description="Peak arrival rate, given.")
    peak_percentile: float = Field(
        0.99, ge=0.5, lt=1.0, description="Poisson percentile of the peak derived from requests_per_second."
    )
    max_first_token_ms: float | None = Field(None, gt=0, description="Time-to-first-token limit.")
    max_response_ms: float | None = Field(None, gt=0, description="Whole-answer latency limit (estimate).")
    min_instances: int = Field(1, ge=1, description="Lower bound on instances (redundancy, or a fixed plan).")
    max_batch_size: int = Field(
        GUIDE_MAX_BATCH_SIZE, ge=1, le=GUIDE_MAX_BATCH_SIZE, description="Concurrent requests per instance."
    )
    redundancy: int = Field(0, ge=0, le=100, description="Spare servers' worth of instances (1 = N+1).")
    measurements: list[Measurement] = Field(
        default_factory=list, description="Operator's own figures; they win over the guide's tables."
    )

    @field_validator("model", mode="before")
    @classmethod
    def _normalise_model(cls, value: object) -> object:
        return normalise_name(value) if isinstance(value, str) else value

    @field_validator("precision", mode="before")
    @classmethod
    def _lower_precision(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_load_figure(self) -> ModelRequirement:
        given = {
            name: value
            for name in ("concurrent_users", "requests_per_second", "peak_requests_per_second")
            if (value := getattr(self, name)) is not None
        }
        if len(given) > 1:
            shown = " and ".join(f"{k}={v:g}" for k, v in given.items())
            raise ValueError(
                f"give one of concurrent_users, requests_per_second, peak_requests_per_second, not both (got {shown})"
            )
        for i, m in enumerate(self.measurements):
            for name in ("input_tokens", "output_tokens"):
                measured, wanted = getattr(m, name), getattr(self, name)
                if measured is not None and measured != wanted:
                    raise ValueError(
                        f"measurements[{i}] was measured at {name}={measured} but the requirement is "
                        f"{name}={wanted}: measure at the lengths you size for, or change {name}"
                    )
        return self


class SizingRequirements(_Strict):
    """What to size: the models, and the server configurations that may be bought or used."""

    models: list[ModelRequirement] = Field(min_length=1)
    candidate_servers: list[str] | None = Field(
        None, description="Server configurations to consider (default: all known to the sizing tables)."
    )

    @field_validator("candidate_servers", mode="before")
    @classmethod
    def _normalise_servers(cls, value: object) -> object:
        if isinstance(value, list):
            return [normalise_name(v) if isinstance(v, str) else v for v in value]
        return value


class InstancePlacement(_Strict):
    """One model instance (one Triton/TensorRT-LLM engine) pinned to GPUs of one node."""

    model: str
    precision: Precision
    tensor_parallel: int = Field(ge=1)
    pipeline_parallel: int | None = Field(None, ge=2, description="PP when > 1 (measured configurations).")
    gpus: list[int]


class NodePlacement(_Strict):
    """What runs on one server of the chosen configuration."""

    node: int = Field(ge=0, description="0-based index of the server of this configuration.")
    instances: list[InstancePlacement]
    gpus_free: int = Field(ge=0)


class SizingPlacement(_Strict):
    """The chosen server configuration and what runs where."""

    server: str
    servers_needed: int = Field(ge=0)
    gpus_used: int = Field(ge=0)
    gpus_total: int = Field(ge=0)
    nodes: list[NodePlacement]


class SizingSection(_Strict):
    """Sizing requirements and the placement computed from them (``rackctl size --write``)."""

    requirements: SizingRequirements
    placement: SizingPlacement | None = None
    fleet: list[SizingPlacement] | None = Field(
        None, description="A mixed fleet: one placement per server configuration (no single one fits all)."
    )
    source: str = Field(
        "Dell design guide H19686.2 (Generative AI in the Enterprise - Inferencing), chapter 6, Tables 11-16",
        description="Where the performance figures come from.",
    )

    @model_validator(mode="after")
    def _placement_uses_known_models(self) -> SizingSection:
        wanted = {(m.model, m.precision) for m in self.requirements.models}
        for placement in [self.placement, *(self.fleet or [])]:
            if placement is None:
                continue
            for node in placement.nodes:
                for inst in node.instances:
                    if (inst.model, inst.precision) not in wanted:
                        raise ValueError(f"placement runs {inst.model} {inst.precision} which requirements do not list")
        return self
