"""Rich tables for a sizing result: requirements, which servers fit each model, placement, why not."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bootstrap.sizing.planner import ModelFit, SizingResult


def fit_cell(fit: ModelFit) -> str:
    """One cell of the fit matrix: the chosen TP and instances, or the blocking reason."""
    chosen = fit.chosen
    if chosen and chosen.arithmetic is not None:
        return f"[green]fits[/green] measured: {chosen.servers} server(s), TP={chosen.tp} x{chosen.instances}"
    if chosen:
        return f"[green]fits[/green] TP={chosen.tp} x{chosen.instances} ({chosen.gpus} GPU)"
    last = fit.tried[-1] if fit.tried else None
    reason = last.reasons[0] if last and last.reasons else "no TP fits"
    return f"[red]no[/red] {escape(reason)}"


def _load(req_dict: dict) -> str:
    if "concurrent_users" in req_dict:
        return f"{req_dict['concurrent_users']} users"
    if "peak_requests_per_second" in req_dict:
        return f"peak {req_dict['peak_requests_per_second']:g} req/s"
    if "requests_per_second" in req_dict:
        return f"{req_dict['requests_per_second']:g} req/s @p{req_dict['peak_percentile'] * 100:g}"
    return f"min {req_dict['min_instances']} instance(s)"


def render(result: SizingResult, console: Console) -> None:
    """Print the whole result for a person."""
    req_table = Table(title="Requirements", title_justify="left")
    for col in ("model", "precision", "in/out tokens", "load", "TTFT limit", "answer limit"):
        req_table.add_column(col)
    for req in result.requirements.models:
        data = req.model_dump(mode="json", exclude_none=True)
        req_table.add_row(
            req.model,
            req.precision,
            f"{req.input_tokens}/{req.output_tokens}",
            _load(data),
            f"{req.max_first_token_ms:g} ms" if req.max_first_token_ms else "-",
            f"{req.max_response_ms:g} ms" if req.max_response_ms else "-",
        )
    console.print(req_table)

    fit_table = Table(title="Which servers fit each model", title_justify="left")
    fit_table.add_column("model")
    for option in result.options:
        fit_table.add_column(option.server, overflow="fold")
    for i, req in enumerate(result.requirements.models):
        fit_table.add_row(f"{req.model} {req.precision}", *(fit_cell(o.fits[i]) for o in result.options))
    console.print(fit_table)

    opt_table = Table(title="Server options", title_justify="left")
    for col in ("server", "GPUs/server", "fits", "servers needed", "GPUs used/bought"):
        opt_table.add_column(col)
    for option in result.options:
        placement = option.placement
        mark = "[bold green]recommended[/bold green]" if option is result.recommended else ""
        opt_table.add_row(
            option.server,
            f"{option.spec.gpu_count} x {option.spec.gpu}",
            mark or ("yes" if placement else "[red]no[/red]"),
            str(placement.servers_needed) if placement else "-",
            f"{placement.gpus_used}/{placement.gpus_total}" if placement else "-",
        )
    console.print(opt_table)

    measured = [
        (option.server, fit)
        for option in result.options
        for fit in option.fits
        if fit.chosen is not None and fit.chosen.arithmetic is not None
    ]
    if measured:
        math_table = Table(title="Arithmetic (measured)", title_justify="left")
        for col in ("model", "server", "per server", "peak", "servers", "headroom", "capacity from"):
            math_table.add_column(col, overflow="fold")
        for server, fit in measured:
            chosen = fit.chosen
            assert chosen is not None and chosen.arithmetic is not None
            a = chosen.arithmetic
            spares = f" + {a['redundancy']} spare" if a["redundancy"] else ""
            math_table.add_row(
                f"{fit.requirement.model} {fit.requirement.precision}",
                server,
                f"{a['per_server']:g} {a['unit']}",
                f"{a['peak']:g} ({escape(a['peak_from'])})",
                f"ceil = {a['servers_for_peak']}{spares} -> {chosen.servers}",
                f"{a['headroom']:g}",
                escape(a["capacity_source"]),
            )
        console.print(math_table)
        for server, fit in measured:
            assert fit.chosen is not None and fit.chosen.arithmetic is not None
            req = fit.requirement
            line = f"{req.model} {req.precision} on {server}: {fit.chosen.arithmetic['formula']}"
            console.print(escape(line), highlight=False)

    rec = result.recommended
    if rec and rec.placement:
        place = Table(title=f"Placement on {rec.placement.servers_needed} x {rec.spec.name}", title_justify="left")
        for col in ("node", "GPUs", "instance", "TP"):
            place.add_column(col)
        for node in rec.placement.nodes:
            for inst in node.instances:
                place.add_row(
                    str(node.node),
                    ",".join(map(str, inst.gpus)),
                    f"{inst.model} {inst.precision}",
                    str(inst.tensor_parallel),
                )
        console.print(place)
    else:
        console.print("[bold red]No candidate server configuration fits every model.[/bold red]")

    for option in result.options:
        for line in option.why_not():
            console.print(f"[dim]{escape(option.server)}[/dim]: {escape(line)}")
    for note in result.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")
