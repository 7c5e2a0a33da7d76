"""Where the models come from (inventory or a models file), and the ``triton`` stage of ``rackctl up``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory import load_inventory
from bootstrap.inventory.autoscaling import Scaling, autoscaled
from bootstrap.inventory.loader import load_yaml, problem_from_pydantic, read_inventory_text
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton.check import check_model_dir
from bootstrap.triton.client import load_check_modules
from bootstrap.triton.manifests import write_manifests
from bootstrap.triton.render import render_all
from bootstrap.triton.weights_version import load_record, served_spec


class ModelsFile(BaseModel):
    """A YAML file holding only a ``models:`` list (the inventory's section of the same name)."""

    model_config = ConfigDict(extra="forbid")
    models: list[ModelSpec] = Field(default_factory=list, description="Models served by Triton.")


def _unique(specs: list[ModelSpec]) -> list[ModelSpec]:
    twice = [name for name, n in Counter(s.name for s in specs).items() if n > 1]
    if twice:
        raise InvalidInput(
            "model names must be unique",
            problems=[Problem(f"models[{n}].name", f"name {n!r} is used twice", "rename one") for n in twice],
        )
    return specs


def specs_from_models_file(path: Path) -> list[ModelSpec]:
    """Validated models of a ``models:`` YAML file; every problem names the field and the fix."""
    data = load_yaml(read_inventory_text(path), str(path))  # the loader's reader: regular UTF-8 files only
    try:
        return _unique(ModelsFile.model_validate(data).models)
    except ValidationError as exc:
        problems = [problem_from_pydantic(e) for e in exc.errors(include_url=False)]
        raise InvalidInput(f"{len(problems)} problem(s) in {path}", problems=problems) from None


def specs_from_inventory(path: Path) -> list[ModelSpec]:
    """The inventory's ``models:`` list."""
    return _unique(list(load_inventory(path).models))


def load_scaling(inventory_path: Path, models_file: Path | None) -> dict[str, Scaling]:
    """The inventory's resolved autoscaling per model; none for a ``--models`` file (no monitoring, no sizing)."""
    return {} if models_file else autoscaled(load_inventory(inventory_path))


def load_specs(inventory_path: Path, models_file: Path | None) -> list[ModelSpec]:
    """Models from ``--models FILE`` when given, else from the inventory; at least one."""
    specs = specs_from_models_file(models_file) if models_file else specs_from_inventory(inventory_path)
    if not specs:
        where = str(models_file or inventory_path)
        raise InvalidInput(
            f"no model declared in {where}",
            problems=[Problem("models", "the list is empty", "declare at least one model under `models:`")],
        )
    return specs


def run_triton_stage(
    inventory: Any, out_dir: Path, *, load_check: bool, state_dir: Path | None = None
) -> dict[str, Any]:
    """Render, write manifests and check every model of ``inventory``; optionally load them in tritonserver.

    Engines usually live on the cluster's volume, not on this machine: the engine check is skipped here
    (``rackctl triton check --path-map`` runs it where the engines are reachable). A delivered model is
    rendered at the version the state dir's record names (``state_dir``, default ``out_dir``'s parent); one
    with ``source_dir`` and no delivered version is a problem of its check (nothing points at missing files).
    """
    record = load_record(state_dir or out_dir.parent)
    served = [served_spec(spec, record) for spec in _unique(list(inventory.models))]
    specs = [spec for spec, _ in served]
    rendered = render_all(specs, out_dir)
    manifests = write_manifests(specs, out_dir, scaling=autoscaled(inventory))
    checks = []
    for spec, (_, unversioned) in zip(specs, served, strict=True):
        result = check_model_dir(out_dir / spec.name, skip_engine=True)
        problems = [*unversioned, *result.problems]
        checks.append({"model": spec.name, "problems": [p.as_dict() for p in problems]})
    ok = not any(c["problems"] for c in checks) and not any(m["problems"] for m in manifests)
    loads = []
    if load_check and ok:
        load_check_modules()  # the `load-check` extra: exit 3 naming it when missing
        from bootstrap.triton.loadcheck import load_check as run_load_check  # noqa: PLC0415 - the extra

        for spec in specs:
            outcome = run_load_check(out_dir / spec.name)
            if outcome["ok"]:
                outcome.pop("triton_log", None)
            loads.append(outcome)
        ok = all(x["ok"] for x in loads)
    return {
        "ok": ok,
        "out_dir": str(out_dir),
        "rendered": rendered,
        "manifests": manifests,
        "checks": checks,
        "load_checks": loads,
    }
