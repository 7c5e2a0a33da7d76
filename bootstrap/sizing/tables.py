"""The design guide's sizing tables (``data/design_guide_tables.yaml``), loaded and checked once."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from bootstrap.inventory.sizing_spec import normalise_name

Cell = float | str
"""A table cell: a figure, or the guide's words for a missing one ("Not supported", ...)."""

DATA_FILE = "design_guide_tables.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSpec(_Strict):
    name: str
    memory_gb: float = Field(gt=0)
    interconnect: str
    table_column: str
    figures_are_proxy: bool = False


class ServerSpec(_Strict):
    name: str
    gpu: str
    gpu_count: int = Field(ge=1)
    max_tp: int = Field(ge=1)


class ModelSpec(_Strict):
    name: str
    aliases: list[str] = []


class ParallelismRow(_Strict):
    gpu: str
    gpu_count: int
    tp: int
    pp: int


class BuildLimits(_Strict):
    max_input_tokens: int
    max_output_tokens: int
    max_batch_size: int


class SizingExample(_Strict):
    server: str
    servers: int
    instances: dict[str, int]


class DesignGuideTables(_Strict):
    """Typed view of the data file; keys of the per-model tables are ``model/precision``."""

    source: str
    build: BuildLimits
    gpus: dict[str, GpuSpec]
    servers: dict[str, ServerSpec]
    models: dict[str, ModelSpec]
    table_11_gpu_memory_gb: dict[str, float]
    table_12_optimal_parallelism: list[ParallelismRow]
    columns: list[tuple[str, int]]
    table_13_first_token_ms_input_128: dict[str, list[Cell]]
    table_14_first_token_ms_input_2048: dict[str, list[Cell]]
    table_15_tokens_per_s: dict[str, list[Cell]]
    table_16_sizing_examples: dict[str, SizingExample]

    @model_validator(mode="after")
    def _consistent(self) -> DesignGuideTables:
        width = len(self.columns)
        for table in (
            self.table_13_first_token_ms_input_128,
            self.table_14_first_token_ms_input_2048,
            self.table_15_tokens_per_s,
        ):
            for key, row in table.items():
                if len(row) != width:
                    raise ValueError(f"row {key} has {len(row)} cells, expected {width}")
                if key not in self.table_11_gpu_memory_gb:
                    raise ValueError(f"row {key} has no GPU memory figure in table 11")
        for key in self.table_11_gpu_memory_gb:
            if key.split("/")[0] not in self.models:
                raise ValueError(f"table 11 names unknown model {key}")
        for name, server in self.servers.items():
            if server.gpu not in self.gpus:
                raise ValueError(f"server {name} uses unknown GPU {server.gpu}")
        return self

    # -- look-ups -------------------------------------------------------------------------------------
    def resolve_model(self, name: str) -> str | None:
        """Canonical model key for a user's spelling, or None."""
        wanted = normalise_name(name)
        for key, spec in self.models.items():
            if wanted == key or wanted in (normalise_name(a) for a in spec.aliases):
                return key
        return None

    def precisions_of(self, model: str) -> list[str]:
        """Precisions the guide measured for a model."""
        return [k.split("/")[1] for k in self.table_11_gpu_memory_gb if k.split("/")[0] == model]

    def cell(self, table: dict[str, list[Cell]], key: str, gpu: str, tp: int) -> Cell | None:
        """Figure of ``key`` on ``tp`` GPUs of the GPU's table column, or None if the guide has no column."""
        column = (self.gpus[gpu].table_column, tp)
        if column not in self.columns:
            return None
        return table[key][self.columns.index(column)]


@dataclass(frozen=True)
class Figures:
    """The guide's three figures for one model/precision on ``tp`` GPUs of one type."""

    ttft_128_ms: Cell | None
    ttft_2048_ms: Cell | None
    tokens_per_s: Cell | None

    def blockers(self) -> list[str]:
        """Why these figures do not allow running the configuration (empty when they do)."""
        cells = (self.ttft_128_ms, self.ttft_2048_ms, self.tokens_per_s)
        if all(isinstance(c, str) for c in cells) and len(set(cells)) == 1:
            return [f"Tables 13-15: {cells[0]}"]
        out = []
        for label, value in (
            ("Table 13 (first token, input 128)", self.ttft_128_ms),
            ("Table 14 (first token, input 2048)", self.ttft_2048_ms),
            ("Table 15 (throughput)", self.tokens_per_s),
        ):
            if value is None:
                out.append(f"{label}: not measured")
            elif isinstance(value, str):
                out.append(f"{label}: {value}")
        return out


def figures(tables: DesignGuideTables, key: str, gpu: str, tp: int) -> Figures:
    """Collect Tables 13-15 for one configuration."""
    return Figures(
        tables.cell(tables.table_13_first_token_ms_input_128, key, gpu, tp),
        tables.cell(tables.table_14_first_token_ms_input_2048, key, gpu, tp),
        tables.cell(tables.table_15_tokens_per_s, key, gpu, tp),
    )


def parse_tables(data: Any) -> DesignGuideTables:
    """Validate a parsed data file."""
    return DesignGuideTables.model_validate(data)


@functools.cache
def load_tables() -> DesignGuideTables:
    """The packaged design-guide tables."""
    text = resources.files("bootstrap.sizing").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    return parse_tables(yaml.safe_load(text))
