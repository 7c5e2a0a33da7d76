"""Read sizing requirements from YAML or flags; every mistake becomes a Problem naming field, value, fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bootstrap.errors import InvalidInput, Problem
from bootstrap.sizing.spec import (
    GUIDE_MAX_BATCH_SIZE,
    GUIDE_MAX_INPUT_TOKENS,
    GUIDE_MAX_OUTPUT_TOKENS,
    ModelRequirement,
    SizingRequirements,
)

#: How to fix a bad value, per field name.
FIXES: dict[str, str] = {
    "model": "name a model of the design guide, e.g. llama-2-13b, llama-2-70b, mistral-7b",
    "precision": "use fp8 or awq",
    "input_tokens": f"an integer from 1 to {GUIDE_MAX_INPUT_TOKENS} (the guide's engines' maximum input)",
    "output_tokens": f"an integer from 1 to {GUIDE_MAX_OUTPUT_TOKENS} (the guide's engines' maximum output)",
    "concurrent_users": "a whole number >= 1 (or give requests_per_second instead)",
    "requests_per_second": "a number > 0 (average arrival rate; or give concurrent_users instead)",
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
}


def problems_from_validation(exc: ValidationError, prefix: str = "") -> list[Problem]:
    """Turn pydantic errors into Problems: ``models[0].input_tokens: ... (got 4096) (fix: ...)``."""
    problems = []
    for err in exc.errors():
        path = _path(prefix, err["loc"])
        last = next((str(p) for p in reversed(err["loc"]) if isinstance(p, str)), "")
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(err["loc"])
            fix = f"remove it; allowed keys: {', '.join(allowed)}" if allowed else "remove it"
        elif not err["loc"] or isinstance(err["loc"][-1], int):  # a rule across fields of one entry
            message = message.removeprefix("Value error, ")
            fix = "keep only one of concurrent_users and requests_per_second"
        elif err["type"] == "missing":
            fix = f"add it: {FIXES.get(last, 'see the sizing example files')}"
        else:
            message = f"{message} (got {err['input']!r})"
            fix = FIXES.get(last, "see inventory/examples/sizing/ for valid files")
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


def load_requirements(path: Path) -> SizingRequirements:
    """Read a requirements YAML file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(
            f"cannot read requirements file {path}",
            problems=[Problem("--requirements", f"{path}: {exc.strerror}", "give an existing YAML file")],
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "?"
        raise InvalidInput(
            f"{path} is not valid YAML",
            problems=[Problem(where, str(getattr(exc, "problem", exc)), "fix the YAML syntax")],
        ) from None
    return parse_requirements(data, str(path))


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


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: Any = SizingRequirements
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if model is SizingRequirements and part == "models":
            model = ModelRequirement
        else:
            return []
    return list(model.model_fields)
