"""``rackctl plan``, ``rackctl up`` and ``rackctl journal``: run the bootstrap stages, resumably."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from bootstrap.cli import flags
from bootstrap.cli.common import (
    Notes,
    console,
    cut_text,
    emit,
    environment_for,
    err_console,
    escape,
    handle_errors,
    stamp,
    warn,
)
from bootstrap.cli.validate_options import validate_given, validate_options
from bootstrap.errors import EXIT_NOT_APPLIED, EXIT_OK, InvalidInput
from bootstrap.inventory import Inventory, load_inventory
from bootstrap.inventory.environment_checks import machine_warnings
from bootstrap.inventory.rules import support_warnings
from bootstrap.journal import JOURNAL_FILE, Journal, NodeState, check_transition
from bootstrap.selection import STAGES_OPTION, split_csv
from bootstrap.stages.base import STAGE_ORDER, NullProgress, RunOptions
from bootstrap.stages.cluster_inputs import checked_inputs
from bootstrap.stages.options import FirmwareOptions, HelmOptions, TritonOptions
from bootstrap.stages.progress import RichProgress
from bootstrap.stages.runner import Runner, RunOutcome, Selection, plan, select

STAGES_HELP = f"Comma-separated stages to run (default: all, in order: {','.join(STAGE_ORDER)})."


def _selection_options(func: Any) -> Any:
    func = click.option("--stages", "stages", metavar="A,B", help=STAGES_HELP)(func)
    func = flags.limit(func)
    func = click.option(
        "--from",
        "from_stage",
        type=click.Choice(STAGE_ORDER),
        help="Start at this stage and re-run it and the later ones even where completed.",
    )(func)
    return click.option(
        "--force", is_flag=True, help="Re-run completed stages and steps; allows reimaging provisioned nodes."
    )(func)


def _cluster_input_options(func: Any) -> Any:
    """``--charts DIR`` and ``--crds DIR``: what the kubernetes and nvidia stages render and check with."""
    func = flags.directory(
        "--crds",
        "crd_dir",
        "CRD YAML (the pinned charts' crds/) to check custom resources against (kubernetes, nvidia stages).",
    )(func)
    return flags.directory(
        "--charts",
        "charts_dir",
        "Pinned chart archives (<chart>-<version>.tgz) to render with our values (kubernetes, nvidia stages).",
    )(func)


def _status_style(status: str) -> str:
    return {
        "completed": "green",
        "skipped": "dim",
        "run": "cyan",
        "failed": "red",
        "blocked": "red",
        "not_implemented": "yellow",
        "rendered": "yellow",
        "not_applied": "yellow",
        "interrupted": "yellow",
    }.get(status, "white")


def _plan_cells(data: dict[str, Any], stage: dict[str, Any], act: dict[str, Any]) -> tuple[str, str]:
    """The action and note cells of one planned action."""
    note = escape(act.get("skip") or "") or ("[red]destructive[/red]" if act.get("destructive") else "")
    if not stage["reached"]:
        note = f"[dim]not reached: `up` stops at {data['stops_at']}[/dim]"
    action = escape(act["action"])
    if act.get("skip") and act["action"] != "skip":  # the stage itself will not do this on the node
        action = f"skip (would {action})"
    elif not act.get("applies", True) and not note:
        note = "[yellow]not applied[/yellow]"
    return action, note


def plan_rows(data: dict[str, Any], *, wide: bool = False) -> list[tuple[str, str, str, str]]:
    """(stage, nodes, action, note) rows: one per node with ``wide``, else one per distinct action of a
    stage, its nodes named (``all N`` when every node of the stage does the same)."""
    rows: list[tuple[str, str, str, str]] = []
    for stage in data["stages"]:
        groups: dict[tuple[str, str], list[str]] = {}
        for act in stage["actions"]:
            action, note = _plan_cells(data, stage, act)
            node = act.get("node") or "(all)"
            if wide:
                rows.append((stage["name"], node, action, note))
            else:
                groups.setdefault((action, note), []).append(node)
        everyone = len(stage["actions"])
        for (action, note), nodes in groups.items():
            who = nodes[0] if len(nodes) == 1 else f"all {everyone}" if len(nodes) == everyone else ", ".join(nodes)
            rows.append((stage["name"], who, action, note))
    return rows


#: the least room an action keeps in its cell (a narrower terminal folds the row rather than cut shorter)
SHORT_ACTION = 24


def _short(text: str, ref: int, limit: int) -> str:
    """The start of ``text`` (escaped markup) within ``limit`` characters, at a word boundary unless that keeps
    too little, with the reference to the whole text below the table."""
    tail = f" … [{ref}]"
    return escape(cut_text(Text.from_markup(text).plain, limit - len(tail))) + escape(tail)


def _cells(texts: Any) -> int:
    """The widest of ``texts`` (rich markup) on a terminal."""
    return max((Text.from_markup(t).cell_len for t in texts), default=0)


def _show_plan(data: dict[str, Any], *, wide: bool = False) -> None:
    """A line per row where the terminal allows: the stage and note whole, nodes listed whole (a long list
    folds at its commas), the action cut to the room left with a reference, written whole below the table."""
    rows = plan_rows(data, wide=wide)
    table = Table(title="rackctl up would", show_lines=False)
    hostnames = [n for _, nodes, _, _ in rows for n in nodes.split(", ")]
    note_width = max(_cells(note for *_, note in rows), 4)
    stage_width = max(_cells(stage for stage, *_ in rows), 5)
    lists = _cells(nodes for _, nodes, _, _ in rows)  # a list of nodes gets a third of the room, hostnames whole
    node_width = max(_cells(hostnames), 4, min(lists, (console.width - stage_width - note_width - 13) // 3))
    table.add_column("stage", no_wrap=True)
    table.add_column("node", overflow="fold", max_width=node_width)
    table.add_column("action", overflow="fold")
    table.add_column("note", overflow="fold")
    limit = max(SHORT_ACTION, console.width - stage_width - node_width - note_width - 13)
    details: dict[str, int] = {}  # long action -> its reference (the same text written once)
    for stage, nodes, action, note in rows:
        shown = action
        if Text.from_markup(action).cell_len > limit:  # wrapped below at the terminal's width, not in a cell
            shown = _short(action, details.setdefault(action, len(details) + 1), limit)
        table.add_row(stage, nodes, shown, note)
    console.print(table)
    for text, ref in details.items():
        console.print(f"{escape(f'[{ref}]')} {text}", soft_wrap=False)
    if data.get("not_applied"):
        names = data["not_applied"]
        partly = [
            s["name"]
            for s in data["stages"]
            if s["name"] in names and any(a.get("applies", True) and not a.get("skip") for a in s["actions"])
        ]
        what = (
            f"; of {', '.join(partly)}, only the actions not marked 'not applied' are applied"
            if partly
            else ": nothing of theirs is applied"
        )
        console.print(
            f"[yellow]`rackctl up` would only render and validate {', '.join(names)}{what}, and the run would end "
            f"with exit {EXIT_NOT_APPLIED}.[/yellow]",
            soft_wrap=False,
        )
    if data.get("stops_at"):
        console.print(f"[yellow]`rackctl up` would stop at stage {data['stops_at']!r} (not implemented yet).[/yellow]")


def _show_outcome(outcome: RunOutcome) -> None:
    """The run's stages a line each, then each failed node's error once (nodes sharing one error together) and
    the run's summary; a stage message too long for its cell is written whole below the table."""
    table = Table(title=f"run {outcome.run_id}: {outcome.status}")
    for col in ("stage", "status", "detail"):
        table.add_column(col, no_wrap=col != "detail", overflow="fold")
    statuses = ["rendered, not applied" if s.status == "rendered" else s.status for s in outcome.stages]
    notes = Notes(_widest((s.name for s in outcome.stages), "stage") + _widest(statuses, "status"), 3)
    failures: dict[tuple[str, str], list[str]] = {}  # (stage, error) -> the nodes that failed with it
    for stage in outcome.stages:
        style = _status_style(stage.status)
        status = "rendered, not applied" if stage.status == "rendered" else stage.status
        failed = [n for n, info in stage.nodes.items() if not info.get("ok", True)]
        for node in failed:
            message = stage.nodes[node].get("message") or "no reason given"
            failures.setdefault((stage.name, message), []).append(node)
        detail = stage.message if stage.summary is None else stage.summary
        if failed and stage.summary is not None:
            detail = "; ".join(d for d in (detail, f"failed on {len(failed)} node(s), below") if d)
        table.add_row(stage.name, f"[{style}]{status}[/{style}]", notes.cell(detail))
    console.print(table)
    notes.show()
    for (name, error), nodes in failures.items():
        console.print(f"[red]{escape(', '.join(nodes))}[/red] ({name}): {escape(error)}", soft_wrap=False)
    states = ", ".join(f"{n}={s}" for n, s in outcome.nodes.items())
    console.print(f"nodes: {escape(states)}", soft_wrap=False)
    style = "green" if outcome.ok else "yellow" if outcome.status == "not_applied" else "red"
    summary = outcome.message if outcome.summary is None else outcome.summary
    console.print(f"[{style}]{escape(summary)}[/{style}]", soft_wrap=False)


def _load(inventory_path: Path, as_json: bool) -> Inventory:
    """The inventory, with its end-of-life warnings said (on stderr, or in the ``--json`` document)."""
    inventory = load_inventory(inventory_path)
    for problem in support_warnings(inventory):
        warn(str(problem), as_json)
    return inventory


@click.command("plan")
@_selection_options
@_cluster_input_options
@flags.inventory
@flags.state_dir
@click.option("--wide", is_flag=True, help="One row per node and action (default: nodes doing the same share a row).")
@flags.json
@handle_errors()
def plan_cmd(
    *,
    wide: bool = False,
    stages: str | None,
    limit: str | None,
    from_stage: str | None,
    force: bool,
    charts_dir: Path | None = None,
    crd_dir: Path | None = None,
    inventory_path: Path,
    state_dir: Path,
    as_json: bool,
) -> None:
    """Show what `rackctl up` would do per stage and node; changes nothing.

    Also warns when what the selected nodes' BMCs need is absent on this machine (a password variable
    not set, a password file or CA bundle missing), as `rackctl validate` does.
    """
    inputs = checked_inputs(charts_dir, crd_dir)
    inventory = _load(inventory_path, as_json)
    selection = select(
        inventory, stages=split_csv(stages, STAGES_OPTION), limit=split_csv(limit), from_stage=from_stage, force=force
    )
    for problem in machine_warnings(inventory, [n for n in inventory.nodes if n.hostname in selection.nodes]):
        warn(str(problem), as_json)  # what `up` would stop at before touching a node (`validate` says the same)
    options = RunOptions(dry_run=True, force=force, environment=environment_for(inventory), cluster=inputs)
    data = plan(inventory, state_dir, selection, options)
    emit(data, as_json, lambda d: _show_plan(d, wide=wide))


@click.command("up")
@_selection_options
@_cluster_input_options
@flags.plan("Only show the plan (same as `rackctl plan`).", "dry_run")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before destructive stages or steps.")
@click.option("--insecure", is_flag=True, help="Do not verify BMC TLS certificates (lab only; verified by default).")
@click.option(
    "--apply-firmware",
    is_flag=True,
    help="Let the firmware stage roll the baseline out (as `rackctl firmware apply`); without it, it only compares.",
)
@flags.seconds(
    "--triton-timeout",
    "triton_timeout",
    minimum=1,
    default=None,
    metavar="SECONDS",
    help_text="Where a cluster exists: how long the triton stage waits for each model's Deployment to be ready "
    "(default 600).",
)
@flags.seconds(
    "--helm-timeout",
    "helm_timeout",
    minimum=1,
    default=None,
    metavar="SECONDS",
    help_text="Where a cluster exists: how long Helm's install/upgrade of each release, and then the wait for its "
    "workloads to be ready, may take (kubernetes, nvidia stages; default 600 each).",
)
@validate_options
@flags.inventory
@flags.state_dir
@flags.json
@handle_errors()
def up_cmd(
    *,
    stages: str | None,
    limit: str | None,
    from_stage: str | None,
    force: bool,
    dry_run: bool,
    yes: bool,
    insecure: bool,
    apply_firmware: bool = False,
    triton_timeout: float | None = None,
    helm_timeout: float | None = None,
    skip_validate: bool = False,
    validate_timeout: float | None = None,
    validate_nccl: bool = False,
    charts_dir: Path | None = None,
    crd_dir: Path | None = None,
    inventory_path: Path,
    state_dir: Path,
    as_json: bool,
) -> None:
    """Run the bootstrap stages in order; resumes where the last run stopped.

    Stops at the first stage not implemented yet (exit 4), at a failed stage (exit 1, after the other
    nodes finished it) or on Ctrl-C (exit 130); bad input is exit 2, a missing tool exit 3. A stage that
    could only render and validate (kubernetes, nvidia, triton where no cluster is formed yet) is shown
    "rendered, not applied", moves no node, and the run ends with exit 5 when nothing failed. Run it again
    to resume: completed steps are not repeated, failed nodes are retried from where they failed.
    --charts/--crds are used by the kubernetes and nvidia stages as by `rackctl render cluster`.
    """
    inputs = checked_inputs(charts_dir, crd_dir)
    validation = validate_given(
        skip_validate=skip_validate, validate_timeout=validate_timeout, validate_nccl=validate_nccl
    )
    inventory = _load(inventory_path, as_json)
    selection = select(
        inventory, stages=split_csv(stages, STAGES_OPTION), limit=split_csv(limit), from_stage=from_stage, force=force
    )
    options = RunOptions(
        dry_run=dry_run,
        force=force,
        yes=yes,
        insecure=insecure,
        environment=environment_for(inventory),
        firmware=FirmwareOptions(apply=apply_firmware),
        cluster=inputs,
        triton=TritonOptions(rollout_timeout_s=triton_timeout) if triton_timeout else TritonOptions(),
        helm=HelmOptions(timeout_s=helm_timeout) if helm_timeout else HelmOptions(),
        validate=validation,
    )
    command = "up " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in (("stages", stages), ("limit", limit), ("from", from_stage)) if v
    )
    command += " --force" if force else ""
    command += " --apply-firmware" if apply_firmware else ""
    command += f" --triton-timeout {triton_timeout:g}" if triton_timeout else ""
    command += f" --helm-timeout {helm_timeout:g}" if helm_timeout else ""
    command += validation.flags()
    command += "".join(f" --{key} {path}" for key, path in inputs.given().items())
    run_or_plan(inventory, state_dir, selection, options, command=command, as_json=as_json)


def run_or_plan(
    inventory: Inventory,
    state_dir: Path,
    selection: Selection,
    options: RunOptions,
    *,
    command: str,
    as_json: bool,
) -> None:
    """``--plan``: show the plan. Else run the selection through the :class:`Runner` (rich progress
    unless ``--json``), show the outcome and exit with its code when that is not 0."""
    if options.dry_run:
        emit({**plan(inventory, state_dir, selection, options), "dry_run": True}, as_json, _show_plan)
        return
    if as_json:
        outcome = Runner(
            inventory, state_dir, selection, options=options, progress=NullProgress(), command=command
        ).run()
    else:
        with RichProgress(err_console) as progress:
            outcome = Runner(inventory, state_dir, selection, options=options, progress=progress, command=command).run()
    emit(outcome.as_dict(), as_json, lambda _d: _show_outcome(outcome))
    if outcome.exit_code != EXIT_OK:
        sys.exit(outcome.exit_code)


@click.group("journal")
def journal_group() -> None:
    """Read the run journal (node states, transitions, steps, runs); move a node by hand."""


@journal_group.command("show")
@click.argument("node", required=False)
@flags.state_dir
@flags.json
@handle_errors()
def journal_show(node: str | None, state_dir: Path, as_json: bool) -> None:
    """Every node's state and the latest runs, or one NODE's state, history, steps and facts."""
    if not (state_dir / JOURNAL_FILE).exists():
        raise InvalidInput(f"no journal in {state_dir} yet; `rackctl up` creates it (or pass --state-dir)")
    with Journal(state_dir, readonly=True) as journal:
        if node is None:
            data = {
                "ok": True,
                "nodes": [
                    {**s.as_dict(), "not_applied": [r.stage for r in journal.not_applied(s.node)]}
                    for s in journal.nodes().values()
                ],
                "runs": [r.as_dict() for r in journal.runs()],
            }
            emit(data, as_json, _show_nodes)
            return
        status = journal.status(node)
        data = {
            "ok": True,
            **status.as_dict(),
            "history": [t.as_dict() for t in journal.history(node)],
            "steps": [s.as_dict() for s in journal.steps(node=node)],
            "facts": journal.latest_facts(node),
            "not_applied": [
                {"stage": r.stage, "run": r.run, "at": r.at, **r.detail} for r in journal.not_applied(node)
            ],
        }
    emit(data, as_json, _show_node)


@journal_group.command("mark")
@click.argument("node")
@click.argument("state", type=click.Choice([s.value for s in NodeState]))
@click.option("--cause", required=True, help="Why (recorded with the transition), e.g. 'DIMM replacement'.")
@click.option("--force", is_flag=True, help="Allow a reimage move (back to provisioning).")
@flags.plan("Only check whether the move is allowed.", "dry_run")
@flags.state_dir
@flags.json
@handle_errors()
def journal_mark(
    *, node: str, state: str, cause: str, force: bool, dry_run: bool, state_dir: Path, as_json: bool
) -> None:
    """Move NODE to STATE by hand (maintenance and back, a retry from an earlier state, a reimage).

    The state machine still applies: a refused move exits 1 naming what is allowed.
    """
    if not (state_dir / JOURNAL_FILE).exists():
        raise InvalidInput(f"no journal in {state_dir} yet; `rackctl up` creates it (or pass --state-dir)")
    target = NodeState(state)
    with Journal(state_dir, readonly=dry_run) as journal:
        status = journal.status(node)
        check_transition(node, status.state, target, left_from=status.left_from(), force=force)
        data: dict[str, Any] = {"ok": True, "node": node, "from": status.state.value, "to": target.value}
        if dry_run:
            data["dry_run"] = True
        else:
            with journal.run_lock():
                journal.transition(node, target, f"by hand: {cause}", force=force)
    verb = "would move" if dry_run else "moved"
    emit(data, as_json, lambda d: console.print(f"{verb} {escape(node)}: {d['from']} -> {d['to']}"))


def _widest(values: Any, header: str) -> int:
    return max([len(header), *(len(v) for v in values)])


def _show_nodes(data: dict[str, Any]) -> None:
    """One line per node and per run: hostnames, states and timestamps (UTC, to the second) never cut; the
    stages rendered but not applied listed below the nodes (nodes sharing them together), a command too long
    for its cell and each run's message written once below the runs table."""
    table = Table(title="nodes")
    for col in ("node", "state", "since (UTC)", "left from"):
        table.add_column(col, no_wrap=True)
    pending: dict[str, list[str]] = {}  # the stages rendered, not applied -> the nodes
    for n in data["nodes"]:
        table.add_row(escape(n["node"]), n["state"], stamp(n["since"]), n["left_from"] or "")
        if n["not_applied"]:
            pending.setdefault(", ".join(n["not_applied"]), []).append(n["node"])
    console.print(table)
    for stages, nodes in pending.items():
        console.print(f"rendered, not applied: {escape(stages)} on {escape(', '.join(nodes))}", soft_wrap=False)
    runs = Table(title="latest runs")
    status_width = _widest((r["status"] for r in data["runs"]), "status")
    id_width = _widest((str(r["id"]) for r in data["runs"]), "run")
    notes = Notes(id_width + len("2026-01-01T00:00:00Z") + status_width, 4)
    for col in ("run", "started (UTC)", "status", "command"):
        runs.add_column(col, no_wrap=True)
    for r in data["runs"]:
        runs.add_row(str(r["id"]), stamp(r["started"]), r["status"], notes.cell(r["command"]))
    console.print(runs)
    notes.show()
    for r in data["runs"]:
        if r["message"] or r["finished"]:
            ended = f"finished {stamp(r['finished'])}" if r["finished"] else "not finished"
            text = f"run {r['id']}, {ended}" + (f": {escape(r['message'])}" if r["message"] else "")
            console.print(text, soft_wrap=False)


def _show_node(data: dict[str, Any]) -> None:
    """One node's history and steps a line each, timestamps (UTC, to the second) never cut; a cause or step too
    long for its cell written whole below its table."""
    left = f" (left {data['left_from']})" if data["left_from"] else ""
    since = stamp(data["since"])
    console.print(f"[bold]{escape(data['node'])}[/bold]: {data['state']}{left} since {since}", soft_wrap=False)
    table = Table(title="transitions")
    moves = [f"{t['from']} → {t['to']}" if t["from"] else t["to"] for t in data["history"]]
    runs = [str(t["run"] or "") for t in data["history"]]
    notes = Notes(len("2026-01-01T00:00:00Z") + _widest(runs, "run") + _widest(moves, "move"), 4)
    for col in ("at (UTC)", "run", "move", "cause"):
        table.add_column(col, no_wrap=True)
    for t, move, run in zip(data["history"], moves, runs, strict=True):
        table.add_row(stamp(t["at"]), run, move, notes.cell(t["cause"]))
    console.print(table)
    notes.show()
    steps = Table(title="steps")
    rows = [
        (
            stamp(s["at"]),
            str(s["run"] or ""),
            s["stage"],
            s["status"],
            s["step"] + (" (destructive)" * s["destructive"]),
        )
        for s in data["steps"]
    ]
    room = sum(_widest((row[i] for row in rows), head) for i, head in enumerate(("at (UTC)", "run", "stage", "status")))
    notes = Notes(room, 5)
    for col in ("at (UTC)", "run", "stage", "status", "step"):
        steps.add_column(col, no_wrap=True)
    for at, run, stage, status, step in rows:
        steps.add_row(at, run, stage, status, notes.cell(step))
    console.print(steps)
    notes.show()
    for item in data["not_applied"]:
        console.print(
            f"[yellow]{escape(item['stage'])}: rendered + validated, not applied (run {item['run']}): "
            f"{escape(item.get('why', ''))}; artefacts: {escape(item.get('artefacts', '?'))}[/yellow]",
            soft_wrap=False,
        )
    if data["facts"]:
        console.print(f"facts from: {', '.join(sorted(data['facts']))} (use --json to see them)", soft_wrap=False)


def register(cli: click.Group) -> None:
    """Add ``plan``, ``up`` and ``journal`` to the root group."""
    cli.add_command(plan_cmd)
    cli.add_command(up_cmd)
    cli.add_command(journal_group)
