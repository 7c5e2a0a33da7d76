"""The inventory's ``sizing:`` section: what the user needs (requirements) and where it runs (placement).

The same :class:`SizingRequirements` model reads ``rackctl size --requirements FILE``; the planner fills
:class:`SizingPlacement`; ``rackctl size --write`` stores both under the inventory's top-level ``sizing:``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Precision = Literal["fp8", "awq", "fp16", "bf16", "int8"]
PRECISIONS: tuple[str, ...] = Precision.__args__  # type: ignore[attr-defined]

#: The design guide builds every engine with these limits (chapter 6): inputs/outputs beyond them are unsized
#: by the guide's tables (a measurement has no such cap).
GUIDE_MAX_INPUT_TOKENS = 2048
GUIDE_MAX_OUTPUT_TOKENS = 2048
GUIDE_MAX_BATCH_SIZE = 64
#: Sanity bound on token lengths (far beyond any current context window; catches typos, not limits).
MAX_TOKENS = 10_000_000


def normalise_name(name: str) -> str:
    """'Llama 2 13B' / 'llama_2_13b' -> 'llama-2-13b' (the key the sizing tables use)."""
    return "-".join(name.strip().lower().replace("_", " ").replace("-", " ").split())


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Measurement(_Strict):
    """What the operator measured for one model on one server: its capacity at the latency target.

    Give ``requests_per_second`` (one server, at the target), or ``concurrency`` with
    ``output_tokens_per_s`` (requests/s = tokens/s / output_tokens), or ``benchmark``: a GenAI-Perf /
    AIPerf or perf_analyzer JSON export from which the highest load meeting the target is taken.
    """

    server: str = Field(description="Server configuration measured, e.g. 'xe9680' (see `rackctl size`).")
    tensor_parallel: int = Field(1, ge=1, description="TP of each instance in the measurement.")
    pipeline_parallel: int = Field(1, ge=1, description="PP of each instance in the measurement.")
    input_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Default: the model's.")
    output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Default: the model's.")
    requests_per_second: float | None = Field(None, gt=0, description="Requests/s one server sustains.")
    concurrency: int | None = Field(None, ge=1, description="Concurrent requests that meet the target.")
    output_tokens_per_s: float | None = Field(None, gt=0, description="Output tokens/s of one server.")
    first_token_ms: float | None = Field(None, gt=0, description="Measured TTFT at that load.")
    latency_ms: float | None = Field(None, gt=0, description="Measured request latency at that load.")
    benchmark: str | None = Field(None, description="GenAI-Perf/AIPerf/perf_analyzer JSON export.")
    note: str | None = Field(None, description="Where the figure comes from (tool, version, date).")

    @field_validator("server", mode="before")
    @classmethod
    def _normalise_server(cls, value: object) -> object:
        return normalise_name(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_capacity(self) -> Measurement:
        given = [
            name
            for name, present in (
                ("requests_per_second", self.requests_per_second is not None),
                ("output_tokens_per_s", self.output_tokens_per_s is not None),
                ("benchmark", self.benchmark is not None),
            )
            if present
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of requests_per_second, output_tokens_per_s (with concurrency) or "
                f"benchmark (got {', '.join(given) or 'none'})"
            )
        if self.output_tokens_per_s is not None and self.concurrency is None:
            raise ValueError("output_tokens_per_s needs the concurrency it was measured at (got none)")
        return self


class ModelRequirement(_Strict):
    """One model to serve and the load and latency it must sustain."""

    model: str = Field(description="Model name: one of the design guide's, or any with `measured:` figures.")
    precision: Precision = Field(description="Precision the engine is built with (the guide has fp8, awq).")
    input_tokens: int = Field(128, ge=1, le=MAX_TOKENS, description="Prompt length (tokens).")
    output_tokens: int = Field(128, ge=1, le=MAX_TOKENS, description="Answer length (tokens).")
    concurrent_users: int | None = Field(None, ge=1, description="Peak simultaneous requests.")
    requests_per_second: float | None = Field(None, gt=0, description="Average arrival rate (Poisson).")
    peak_requests_per_second: float | None = Field(None, gt=0, description="Peak arrival rate, given.")
    redundancy: int = Field(0, ge=0, description="Spare servers on top of the peak (1 = N+1; measured).")
    measured: list[Measurement] = Field(
        default_factory=list, description="Operator's measurements; they win over the guide's tables."
    )
    peak_percentile: float = Field(
        0.99, ge=0.5, lt=1.0, description="Poisson percentile of the peak derived from requests_per_second."
    )
    max_first_token_ms: float | None = Field(None, gt=0, description="Time-to-first-token limit.")
    max_response_ms: float | None = Field(None, gt=0, description="Whole-answer latency limit (estimate).")
    min_instances: int = Field(1, ge=1, description="Lower bound on instances (redundancy, or a fixed plan).")
    max_batch_size: int = Field(
        GUIDE_MAX_BATCH_SIZE, ge=1, le=GUIDE_MAX_BATCH_SIZE, description="Concurrent requests per instance."
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
            k: v
            for k in ("concurrent_users", "requests_per_second", "peak_requests_per_second")
            if (v := getattr(self, k)) is not None
        }
        if len(given) > 1:
            raise ValueError(
                f"give one of {', '.join(given)}, not several (got {' and '.join(str(v) for v in given.values())})"
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
    source: str = Field(
        default="Dell design guide H19686.2 (Generative AI in the Enterprise - Inferencing), chapter 6, Tables 11-16",
        description="Where the performance figures come from.",
    )

    @model_validator(mode="after")
    def _placement_uses_known_models(self) -> SizingSection:
        if self.placement is not None:
            wanted = {(m.model, m.precision) for m in self.requirements.models}
            for node in self.placement.nodes:
                for inst in node.instances:
                    if (inst.model, inst.precision) not in wanted:
                        raise ValueError(f"placement runs {inst.model} {inst.precision} which requirements do not list")
        return self
