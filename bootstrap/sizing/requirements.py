"""Read sizing requirements from YAML or flags; every mistake becomes a Problem naming field, value, fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.loader import format_loc, load_yaml
from bootstrap.inventory.sizing_spec import (
    GUIDE_MAX_BATCH_SIZE,
    MAX_TOKENS,
    PRECISIONS,
    Measurement,
    ModelRequirement,
    SizingRequirements,
)
from bootstrap.sizing.benchmarks import measurement_from_benchmark

#: Largest requirements file read (a few models and measurements are a few KiB).
MAX_REQUIREMENTS_BYTES = 1024 * 1024

#: How to fix a bad value, per field name.
FIXES: dict[str, str] = {
    "model": "name a model of the design guide (e.g. llama-2-13b), or any model with measurements",
    "precision": f"use one of: {', '.join(PRECISIONS)}",
    "input_tokens": f"a whole number of tokens from 1 to {MAX_TOKENS}",
    "output_tokens": f"a whole number of tokens from 1 to {MAX_TOKENS}",
    "concurrent_users": "a whole number >= 1 (or give requests_per_second instead)",
    "requests_per_second": "a number > 0 (average arrival rate; or give concurrent_users instead)",
    "peak_requests_per_second": "a number > 0 (the peak arrival rate to size for)",
    "redundancy": "a whole number of spare servers >= 0 (1 = N+1)",
    "measurements": "a list of measured figures, one per server configuration (see docs/sizing.md)",
    "server": "a server configuration known to rackctl size, e.g. xe9680, r760xa-l40s-4",
    "tensor_parallel": "a whole number >= 1",
    "pipeline_parallel": "a whole number >= 1",
    "concurrency": "a whole number >= 1: concurrent requests on one server at the latency target",
    "output_tokens_per_s": "a number > 0: output tokens/s of one server at the latency target",
    "first_token_ms": "the measured time to first token in ms (> 0)",
    "latency_ms": "the measured whole-request latency in ms (> 0)",
    "benchmark": "the path of a GenAI-Perf / perf_analyzer JSON export (relative to this file)",
    "peak_percentile": "a fraction in [0.5, 1), e.g. 0.99 for the 99th percentile",
    "max_first_token_ms": "a latency in milliseconds > 0, or leave it out",
    "max_response_ms": "a latency in milliseconds > 0, or leave it out",
    "min_instances": "a whole number >= 1",
    "max_batch_size": f"a whole number from 1 to {GUIDE_MAX_BATCH_SIZE} (the guide's engines' maximum batch)",
    "models": "a list with one entry per model to serve",
    "candidate_servers": "a list of server configurations, e.g. [r760xa-l40s-4, xe9680]",
}


#: CLI flag of each single-model field (``rackctl size --model ...``).
FLAG_NAMES: dict[str, str] = {
    "model": "--model",
    "precision": "--precision",
    "input_tokens": "--input-tokens",
    "output_tokens": "--output-tokens",
    "concurrent_users": "--users",
    "requests_per_second": "--rps",
    "peak_percentile": "--percentile",
    "max_first_token_ms": "--max-ttft-ms",
    "max_response_ms": "--max-response-ms",
    "min_instances": "--min-instances",
    "max_batch_size": "--max-batch-size",
    "peak_requests_per_second": "--peak-rps",
    "redundancy": "--redundancy",
}


def problems_from_validation(exc: ValidationError, prefix: str = "") -> list[Problem]:
    """Turn pydantic errors into Problems: ``models[0].input_tokens: ... (got 4096) (fix: ...)``."""
    problems = []
    for err in exc.errors():
        path = format_loc(err["loc"], prefix)
        last = next((str(p) for p in reversed(err["loc"]) if isinstance(p, str)), "")
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(err["loc"])
            fix = f"remove it; allowed keys: {', '.join(allowed)}" if allowed else "remove it"
        elif not err["loc"] or isinstance(err["loc"][-1], int):  # a rule across fields of one entry
            message = message.removeprefix("Value error, ")
            if "measured at" in message:
                fix = "measure at the input/output lengths you size for, or change the requirement's"
            elif "a measurement needs" in message:
                fix = "add requests_per_second, output_tokens_per_s or benchmark to the measurement"
            else:
                fix = "keep only one of concurrent_users, requests_per_second and peak_requests_per_second"
        elif err["type"] == "missing":
            fix = f"add it: {FIXES.get(last, 'see the sizing example files')}"
        else:
            message = f"{message} (got {err['input']!r})"
            fix = FIXES.get(last, "see `rackctl size --example NAME`'s files (docs/sizing.md)")
        problems.append(Problem(path, message, fix))
    return problems


def parse_requirements(data: Any, source: str = "requirements") -> SizingRequirements:
    """Validate parsed YAML; raise InvalidInput listing every problem."""
    if not isinstance(data, dict):
        raise InvalidInput(
            f"{source}: expected a mapping with a 'models' list",
            problems=[Problem("", f"got {type(data).__name__}", "start the file with 'models:'")],
        )
    try:
        return SizingRequirements.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"{source}: invalid sizing requirements", problems=problems_from_validation(exc)) from None


def read_text(path: Path, flag: str, what: str) -> str:
    """A small regular UTF-8 file's text, or InvalidInput naming ``flag`` (never a FIFO: it would block)."""
    problem = None
    try:
        if not path.is_file():
            problem = f"{path}: no such regular file"
        elif path.stat().st_size > MAX_REQUIREMENTS_BYTES:
            problem = f"{path} is {path.stat().st_size} bytes; at most {MAX_REQUIREMENTS_BYTES} are read"
        else:
            return path.read_text(encoding="utf-8")
    except OSError as exc:
        problem = f"{path}: {exc.strerror or type(exc).__name__}"
    except UnicodeDecodeError as exc:
        problem = f"{path}: byte {exc.start} is not UTF-8"
    raise InvalidInput(f"cannot read {what} {path}", problems=[Problem(flag, problem, f"give an existing {what}")])


def load_requirements(path: Path) -> SizingRequirements:
    """Read a requirements YAML file through the inventory loader's YAML reader (duplicate keys refused).

    Benchmark exports named by measurements are read relative to the file and replaced by their figures.
    """
    data = load_yaml(read_text(path, "--requirements", "YAML file"), str(path))
    requirements = parse_requirements(data, str(path))
    return resolve_benchmarks(requirements, path.parent)


def resolve_benchmarks(requirements: SizingRequirements, base: Path) -> SizingRequirements:
    """Replace every ``benchmark:`` measurement by the figures of its best point meeting the targets."""
    models = []
    for i, req in enumerate(requirements.models):
        measurements: list[Measurement] = [
            m
            if m.benchmark is None
            else measurement_from_benchmark(m, req, base, f"models[{i}].measurements[{j}].benchmark")
            for j, m in enumerate(req.measurements)
        ]
        models.append(req.model_copy(update={"measurements": measurements}))
    return requirements.model_copy(update={"models": models})


def model_from_flags(values: dict[str, Any]) -> ModelRequirement:
    """Build one requirement from CLI flags (keys are the field names; None means not given)."""
    given = {k: v for k, v in values.items() if v is not None}
    try:
        return ModelRequirement.model_validate(given)
    except ValidationError as exc:
        problems = [
            Problem(FLAG_NAMES.get(p.path, p.path or "flags"), p.message, p.fix) for p in problems_from_validation(exc)
        ]
        raise InvalidInput("invalid sizing flags", problems=problems) from None


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: Any = SizingRequirements
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if model is SizingRequirements and part == "models":
            model = ModelRequirement
        elif model is ModelRequirement and part == "measurements":
            model = Measurement
        else:
            return []
    return list(model.model_fields)
