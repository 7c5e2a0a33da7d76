"""``rackctl size``: servers and placement for LLM serving requirements, from the design guide's tables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError
from rich.markup import escape

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, err_console, handle_errors
from bootstrap.errors import EXIT_FAILED, InvalidInput, Problem, RackctlError
from bootstrap.inventory.sizing_spec import PRECISIONS, SizingRequirements, SizingSection
from bootstrap.resources import sizing_examples
from bootstrap.sizing.inventory_write import apply_sizing_write, plan_sizing_write
from bootstrap.sizing.planner import size
from bootstrap.sizing.render import render
from bootstrap.sizing.requirements import load_requirements, model_from_flags
from bootstrap.sizing.tables import load_tables

#: Flags that describe one model (``--model`` and friends) -> ModelRequirement field.
MODEL_FLAGS = {
    "model": "model",
    "precision": "precision",
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "users": "concurrent_users",
    "rps": "requests_per_second",
    "percentile": "peak_percentile",
    "max_ttft_ms": "max_first_token_ms",
    "max_response_ms": "max_response_ms",
    "min_instances": "min_instances",
    "max_batch_size": "max_batch_size",
    "peak_rps": "peak_requests_per_second",
    "redundancy": "redundancy",
}


def example_requirements(name: str, requirements_file: Path | None) -> Path:
    """The shipped requirements file ``--example NAME`` names (refused beside ``--requirements``)."""
    if requirements_file is not None:
        raise InvalidInput(
            "--example and --requirements both given",
            problems=[Problem("--example", f"{name!r} beside --requirements {requirements_file}", "give one of them")],
        )
    return sizing_examples()[name]


def gather_requirements(
    requirements_file: Path | None, given: dict[str, Any], servers: tuple[str, ...]
) -> SizingRequirements:
    """Requirements from the file and/or the single-model flags; ``--server`` replaces the candidates."""
    base = load_requirements(requirements_file) if requirements_file else None
    models = list(base.models) if base else []
    model_values = {field: given[flag] for flag, field in MODEL_FLAGS.items()}
    if any(v is not None for v in model_values.values()):
        models.append(model_from_flags(model_values))
    if not models:
        raise InvalidInput(
            "nothing to size",
            problems=[
                Problem(
                    "--requirements/--model",
                    "no model given",
                    "pass --requirements FILE, --example NAME (a shipped file: "
                    + ", ".join(sizing_examples())
                    + ") or --model and --precision",
                )
            ],
        )
    candidates = list(servers) if servers else (base.candidate_servers if base else None)
    try:
        return SizingRequirements.model_validate(
            {"models": [m.model_dump() for m in models], "candidate_servers": candidates}
        )
    except ValidationError as exc:  # only --server values can still be wrong here
        raise InvalidInput(
            "invalid --server",
            problems=[Problem("--server", str(exc).splitlines()[0], f"use one of: {', '.join(load_tables().servers)}")],
        ) from None


@click.command("size")
@click.option(
    "-r",
    "--requirements",
    "requirements_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML file: models (with load and latency limits) and candidate_servers.",
)
@click.option(
    "--example",
    type=click.Choice(sorted(sizing_examples())),
    help="A sample requirements file shipped with rackctl, instead of --requirements.",
)
@click.option("--model", help="One model to size, e.g. llama-2-13b (adds to --requirements).")
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS, case_sensitive=False),
    help="Engine precision (with --model); the guide measured fp8 and awq.",
)
@click.option("--input-tokens", type=int, help="Prompt length in tokens (default 128).")
@click.option("--output-tokens", type=int, help="Answer length in tokens (default 128).")
@click.option("--users", type=int, help="Peak concurrent users.")
@click.option("--rps", type=float, help="Average requests per second (Poisson arrivals).")
@click.option("--peak-rps", type=float, help="Peak requests per second to size for (instead of --rps).")
@click.option("--redundancy", type=int, help="Spare servers' worth of instances per model (1 = N+1).")
@click.option("--percentile", type=float, help="Percentile of the Poisson peak (default 0.99).")
@click.option("--max-ttft-ms", type=float, help="First-token latency limit in ms.")
@click.option("--max-response-ms", type=float, help="Whole-answer latency limit in ms.")
@click.option("--min-instances", type=int, help="At least this many instances (default 1).")
@click.option("--max-batch-size", type=int, help="Concurrent requests per instance (default 64, the guide's).")
@click.option("--server", "servers", multiple=True, help="Candidate server configuration (repeatable).")
@click.option("--write", is_flag=True, help="Store requirements and placement under the inventory's 'sizing:'.")
@flags.plan("With --write: show the inventory diff, change nothing.", "dry_run")
@flags.inventory
@flags.json
@handle_errors()
def size_command(
    *,
    requirements_file: Path | None,
    example: str | None,
    servers: tuple[str, ...],
    write: bool,
    dry_run: bool,
    inventory_path: Path,
    as_json: bool,
    **model_flags: Any,
) -> None:
    """Size servers for LLM serving from your measurements or the Dell design guide's tables.

    Measured figures in the requirements file (requests/s one server sustains at the latency target, or
    a GenAI-Perf / perf_analyzer export) win over the guide's tables (chapter 6, Tables 11-16). Prints
    which server configurations fit each model (and why the others do not), the arithmetic (capacity,
    peak, servers, headroom), the servers needed and the placement; where no single configuration fits
    every model, a mixed fleet (each model on its best one). Exit 1 when some model fits no candidate.
    See docs/sizing.md.
    """
    if dry_run and not write:
        raise InvalidInput(
            "--plan previews --write",
            problems=[Problem("--plan", "given without --write", "add --write")],
        )
    if example is not None:
        requirements_file = example_requirements(example, requirements_file)
    requirements = gather_requirements(requirements_file, model_flags, servers)
    result = size(requirements)
    data = result.as_dict()
    if write:
        if not result.ok:
            raise RackctlError(
                "no candidate server fits every model: nothing written to the inventory",
                problems=[Problem(o.server, line) for o in result.options for line in o.why_not()],
            )
        section = SizingSection(
            requirements=result.requirements,
            placement=result.recommended.placement if result.recommended else None,
            fleet=result.fleet,
            source=result.source,
        )
        plan = plan_sizing_write(inventory_path, section)
        written = False if dry_run else apply_sizing_write(plan)
        data["write"] = {
            "inventory": str(inventory_path),
            "changed": plan.changed,
            "written": written,
            "dry_run": dry_run,
            "diff": plan.diff(),
        }

    def human(_data: dict[str, Any]) -> None:
        render(result, console)
        if write:
            if dry_run:
                console.print(escape(plan.diff()) or "inventory already holds this sizing", highlight=False)
            elif written:
                err_console.print(f"wrote sizing to {escape(str(inventory_path))}")
            else:
                err_console.print(f"{escape(str(inventory_path))} already holds this sizing")

    emit(data, as_json, human)
    if not result.ok:
        sys.exit(EXIT_FAILED)


def register(cli: click.Group) -> None:
    """Add ``rackctl size``."""
    cli.add_command(size_command)
