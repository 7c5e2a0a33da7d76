"""Rich tables for a sizing result: requirements, which servers fit each model, placement, why not.

Everything fits the console's width: server names are never cut (their column does not wrap), and the prose
below the tables (the arithmetic's steps, why a server does not fit, the notes) is wrapped to the width
instead of running past it.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from bootstrap.inventory.sizing_spec import SizingPlacement
from bootstrap.sizing.capacity import REQUESTS_PER_S, show
from bootstrap.sizing.planner import ModelFit, SizingResult


def fit_cell(fit: ModelFit) -> str:
    """One cell of the fit matrix: the chosen TP and instances, or the blocking reason."""
    chosen = fit.chosen
    if chosen:
        measured = " [cyan]measured[/cyan]" if fit.measured else ""
        return f"[green]fits[/green] TP={chosen.tp} x{chosen.instances} ({chosen.gpus} GPU){measured}"
    last = fit.tried[-1] if fit.tried else None
    reason = last.reasons[0] if last and last.reasons else "no TP fits"
    return f"[red]no[/red] {escape(reason)}"


def _load(req_dict: dict) -> str:
    if "concurrent_users" in req_dict:
        return f"{req_dict['concurrent_users']} users" + (
            f", N+{req_dict['redundancy']}" if req_dict.get("redundancy") else ""
        )
    if "requests_per_second" in req_dict:
        load = f"{req_dict['requests_per_second']:g} req/s @p{req_dict['peak_percentile'] * 100:g}"
    elif "peak_requests_per_second" in req_dict:
        load = f"peak {req_dict['peak_requests_per_second']:g} req/s"
    else:
        return f"min {req_dict['min_instances']} instance(s)"
    return load + (f", N+{req_dict['redundancy']}" if req_dict.get("redundancy") else "")


def prose(console: Console, text: str) -> None:
    """One line of prose, wrapped to the console's width (the CLI's consoles soft-wrap by default)."""
    console.print(text, highlight=False, soft_wrap=False)


def render_placement(placement: SizingPlacement, name: str, console: Console) -> None:
    """Which instance runs on which GPUs of which node."""
    place = Table(title=f"Placement on {placement.servers_needed} x {name}", title_justify="left")
    for col in ("node", "GPUs", "instance", "TP"):
        place.add_column(col)
    for node in placement.nodes:
        for inst in node.instances:
            tp = str(inst.tensor_parallel) + (f" PP={inst.pipeline_parallel}" if inst.pipeline_parallel else "")
            place.add_row(str(node.node), ",".join(map(str, inst.gpus)), f"{inst.model} {inst.precision}", tp)
    console.print(place)


def render_arithmetic(server: str, fits: list[ModelFit], console: Console) -> None:
    """Per model on one server type: figures used, capacity, peak, instances and headroom."""
    table = Table(title=f"Arithmetic on {server} (check it by hand)", title_justify="left")
    # the figures' source goes under the model (seven columns do not fit 80 without folding every header)
    for col in ("model (figures)", "per server", "peak", "servers", "instances", "headroom"):
        table.add_column(col, overflow="fold", min_width=9 if col == "instances" else None)  # not "instance s"
    for fit in fits:
        chosen = fit.chosen
        calc = chosen.arithmetic if chosen else None
        if chosen is None or calc is None:
            continue
        u = "req/s" if calc.unit == REQUESTS_PER_S else "conc."
        servers = f"ceil({show(calc.peak)}/{show(calc.per_server)}) = {calc.servers_for_peak}"
        if calc.redundancy:
            servers += f" +{calc.redundancy} (N+{calc.redundancy})"
        table.add_row(
            f"{fit.requirement.model} {fit.requirement.precision} TP={chosen.tp}"
            + (f" PP={chosen.pp}" if chosen.pp > 1 else "")
            + f"\n[dim]({escape(chosen.source)})[/dim]",
            f"{show(calc.per_server)} {u}",
            f"{show(calc.peak)} {u}",
            servers,
            str(calc.instances),
            f"{show(calc.headroom)} {u}",
        )
    console.print(table)
    for fit in fits:
        chosen = fit.chosen
        if chosen and chosen.arithmetic:
            for step in chosen.arithmetic.steps():
                prose(console, f"[dim]{escape(fit.requirement.model)}:[/dim] {escape(step)}")


def _fit_table(result: SizingResult, console: Console, *, whole: bool) -> Table:
    """Which server fits each model: a column per server, its name whole (``whole``) or broken after its
    hyphens, never inside a word (a terminal too narrow for every name whole)."""
    table = Table(title="Which servers fit each model", title_justify="left")
    table.add_column("model", overflow="fold")
    for option in result.options:
        if whole:
            table.add_column(option.server, overflow="fold", min_width=len(option.server))
        else:
            table.add_column(option.server.replace("-", "-\n"), overflow="fold")
    for i, req in enumerate(result.requirements.models):
        table.add_row(f"{req.model} {req.precision}", *(fit_cell(o.fits[i]) for o in result.options))
    return table


def render(result: SizingResult, console: Console) -> None:
    """Print the whole result for a person."""
    req_table = Table(title="Requirements", title_justify="left")
    for col in ("model", "precision", "in/out tokens", "load", "TTFT limit", "answer limit"):
        req_table.add_column(col, overflow="fold")  # a model's name is never cut
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

    fit_table = _fit_table(result, console, whole=True)
    with console.capture() as trial:  # rich keeps a column's min_width past the terminal's edge
        console.print(fit_table)
    if max((Text.from_ansi(line).cell_len for line in trial.get().splitlines()), default=0) > console.width:
        fit_table = _fit_table(result, console, whole=False)
    console.print(fit_table)

    opt_table = Table(title="Server options", title_justify="left")
    opt_table.add_column("server", no_wrap=True, min_width=max((len(o.server) for o in result.options), default=6))
    for col in ("GPUs/server", "fits", "servers needed", "GPUs used/bought"):
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

    rec = result.recommended
    if rec and rec.placement:
        render_arithmetic(rec.server, rec.fits, console)
        render_placement(rec.placement, rec.spec.name, console)
    elif result.mixed:
        prose(
            console,
            "[bold yellow]No single server configuration fits every model: a mixed fleet, "
            "each model on the configuration where it needs the fewest servers.[/bold yellow]",
        )
        for part in result.mixed:
            render_arithmetic(part.option.server, part.fits, console)
            render_placement(part.placement, part.option.spec.name, console)
    else:
        prose(console, "[bold red]No candidate server configuration fits every model.[/bold red]")

    for option in result.options:
        for line in option.why_not():
            prose(console, f"[dim]{escape(option.server)}[/dim]: {escape(line)}")
    for note in result.notes:
        prose(console, f"[dim]note: {escape(note)}[/dim]")
