"""Day-2 commands: ``rackctl status``, ``apply``, ``redeploy`` and ``driver upgrade`` (``bootstrap.day2``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bootstrap.cli import flags
from bootstrap.cli.common import Notes, console, emit, environment_for, err_console, escape, handle_errors, warn
from bootstrap.cli.rollout_table import show_rollout
from bootstrap.day2.apply import plan_apply, run_apply
from bootstrap.day2.driver import DriverPlan, plan_upgrade, render
from bootstrap.day2.driver_host import DriverNodeOutcome, DriverRolloutReport
from bootstrap.day2.driver_operator import NodeUpgrade, OperatorUpgrade, upgrade_with_operator
from bootstrap.day2.driver_run import driver_route, not_applied_reason, progress_title, upgrade_host
from bootstrap.day2.reconcile import ReconcilePlan
from bootstrap.day2.redeploy import plan_redeploy, run_redeploy
from bootstrap.day2.status import COLUMNS, collect
from bootstrap.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOT_APPLIED, EXIT_OK, InvalidInput, Problem
from bootstrap.inventory import Inventory, load_inventory
from bootstrap.kube import Kubectl, cluster_for
from bootstrap.rollout import max_unavailable_count
from bootstrap.selection import STAGES_OPTION, check_stages, match_nodes, select_nodes, split_csv
from bootstrap.stages.base import STAGE_ORDER, NullProgress, ProgressReporter, RunOptions
from bootstrap.stages.insecure import insecure_warning
from bootstrap.stages.progress import RichProgress
from bootstrap.stages.runner import ensure_writable_state_dir

STYLE = {"ok": "", "unavailable": "dim", "degraded": "bold red"}
#: a cell's status in a narrow column (the reason it refers to is written below the table)
SHORT_STATUS = {"unavailable": "n/a", "degraded": "err"}


# -- status ------------------------------------------------------------------------------------------
#: header words for a terminal too narrow for the full ones (--json and --wide keep the full names)
SHORT_HEADERS = {"lifecycle": "state", "firmware": "fw", "kubernetes": "k8s"}


def _status_table(
    data: dict[str, Any], *, boxed: bool = True, short: bool = False, gap: int = 2, wide: bool = False
) -> tuple[Table, dict[str, int]]:
    """One status table: boxed or bare (columns ``gap`` apart, as kubectl prints), each value whole or in a
    word (``below [5]``, the value written whole below); the reasons its cells refer to, each once.
    ``wide``: the role too, and each reason inside its cell."""
    if boxed:
        table = Table(title="rackctl status")
    else:
        table = Table(title="rackctl status", box=None, pad_edge=False, padding=(0, 1) if gap == 2 else (0, 1, 0, 0))
    for col in ("node", "role", *COLUMNS) if wide else ("node", *COLUMNS):
        table.add_column(SHORT_HEADERS.get(col, col) if short else col, no_wrap=col == "node", overflow="fold")
    reasons: dict[str, int] = {}
    for row in data["nodes"]:
        cells = [row["role"]] if wide else []
        for col in COLUMNS:
            cell = row[col]
            if cell["status"] != "ok" and wide:
                text = escape(f"{cell['status']}: {cell['reason']}")
            elif cell["status"] != "ok":
                ref = reasons.setdefault(cell["reason"], len(reasons) + 1)
                text = f"{SHORT_STATUS[cell['status']]} {escape(f'[{ref}]')}"
            elif short and cell.get("short"):
                text = escape(cell["short"])
                if cell.get("refer", True):  # the word alone would hide something: the value whole below
                    ref = reasons.setdefault(f"{col}: {cell['value']}", len(reasons) + 1)
                    text += " " + escape(f"[{ref}]")
            else:
                text = escape(str(cell["value"]))
            style = STYLE[cell["status"]]
            cells.append(f"[{style}]{text}[/{style}]" if style else text)
        table.add_row(row["node"], *cells)
    return table, reasons


def status_table(data: dict[str, Any], *, wide: bool, width: int) -> tuple[Table, dict[str, int]]:
    """The status table and, unless ``wide``, the reasons its cells refer to (``degraded [2]``), each once.

    Unless ``wide``, a line per node in ``width`` columns where it can be had: boxed when that fits, else
    bare, then values in a word and short headers, then a space apart; only a terminal narrower than all
    that folds cells.
    """
    if wide:
        return _status_table(data, wide=True)
    layouts = ((True, False, 2), (False, False, 2), (False, True, 2), (False, True, 1))
    for boxed, short, gap in layouts:
        table, reasons = _status_table(data, boxed=boxed, short=short, gap=gap)
        if console.measure(table, options=console.options.update_width(10_000)).maximum <= width:
            return table, reasons
    return table, reasons


def show_status(data: dict[str, Any], *, wide: bool = False, out: Console | None = None) -> None:
    """The table, then each reason and each value too long for its cell once, wrapped at the terminal's width."""
    out = out or console
    table, reasons = status_table(data, wide=wide, width=out.width)
    out.print(table)
    for reason, ref in reasons.items():
        out.print(f"{escape(f'[{ref}]')} {escape(reason)}", soft_wrap=False)
    if data["degraded"]:
        out.print(f"[red]degraded data for: {', '.join(data['degraded'])}[/red]")


@click.command("status")
@flags.limit
@flags.inventory
@flags.state_dir
@click.option("--wide", is_flag=True, help="The role, and each reason inside its cell (default: written below once).")
@flags.json
@handle_errors()
def status_cmd(*, limit: str | None, inventory_path: Path, state_dir: Path, wide: bool, as_json: bool) -> None:
    """Per node: power, health, lifecycle, firmware vs baseline, driver, Kubernetes and GPUs (reads only).

    One line per node; why a value is missing is written once below the table. Exit 1 when some data is
    degraded (a BMC or the Kubernetes API not answering).
    """

    inventory = load_inventory(inventory_path)
    nodes = select_nodes(inventory, limit)
    note = insecure_warning(inventory, [n.hostname for n in nodes])
    if note:
        warn(note, as_json)
    data = collect(inventory, nodes, state_dir, cluster_for(state_dir))

    emit(data, as_json, lambda d: show_status(d, wide=wide))
    if not data["ok"]:
        sys.exit(1)


# -- apply -------------------------------------------------------------------------------------------
def _progress(as_json: bool) -> tuple[ProgressReporter, Any]:
    if as_json:
        return NullProgress(), None
    progress = RichProgress(err_console)
    return progress, progress


@click.command("apply")
@flags.plan("Only show the plan (contacts nothing, writes nothing).")
@click.option(
    "--stages",
    "stages",
    metavar="A,B",
    default=None,
    help="Stages new nodes go through (default: every stage; `up` stops at the first not implemented yet).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before destructive stages or steps.")
@flags.nodes
@flags.json
@handle_errors()
def apply_cmd(
    *,
    plan_only: bool,
    stages: str | None,
    yes: bool,
    inventory_path: Path,
    state_dir: Path,
    limit: str | None,
    as_json: bool,
) -> None:
    """Reconcile the cluster with the edited inventory; the plan is shown first.

    New nodes go through the pipeline alone, removed nodes are drained (when Kubernetes is there) and
    powered off, changed nodes get only the stages their change needs, unchanged nodes are not contacted.
    With --limit only the selected nodes' changes are applied (a removed node by its name); the others stay
    pending for a later apply.
    """

    inventory = load_inventory(inventory_path)
    new_stages = split_csv(stages, STAGES_OPTION) or None
    if new_stages:
        check_stages(new_stages, STAGE_ORDER)
        new_stages = [s for s in STAGE_ORDER if s in new_stages]
    plan = plan_apply(inventory, state_dir)
    if limit is not None:
        plan = limit_plan(plan, inventory, limit)
    data: dict[str, Any] = {"ok": True, "plan": plan.as_dict()}
    if plan_only:
        emit({**data, "applied": False}, as_json, _show_apply)
        return
    if not as_json:
        _show_apply(data)
    ensure_writable_state_dir(state_dir)
    options = RunOptions(yes=yes, environment=environment_for(inventory))
    progress, context = _progress(as_json)
    if context is not None:
        with context:
            result = run_apply(
                inventory,
                state_dir,
                plan,
                cluster=cluster_for(state_dir),
                options=options,
                progress=progress,
                new_stages=new_stages,
            )
    else:
        result = run_apply(
            inventory,
            state_dir,
            plan,
            cluster=cluster_for(state_dir),
            options=options,
            progress=progress,
            new_stages=new_stages,
        )
    data = {**data, **result, "applied": True}
    emit(data, as_json, _show_apply_result)
    if result["exit_code"] != EXIT_OK:
        sys.exit(result["exit_code"])


def limit_plan(plan: ReconcilePlan, inventory: Inventory, limit: str) -> ReconcilePlan:
    """The changes of the nodes ``--limit`` selects: inventory nodes by name, glob or role; a removed or
    forgotten node (no longer in the inventory) by its name or a glob."""
    known = {n.hostname: n for n in inventory.nodes}
    candidates = SimpleNamespace(
        nodes=[known.get(c.node) or SimpleNamespace(hostname=c.node, role="") for c in plan.changes]
    )
    chosen = set(match_nodes(candidates, split_csv(limit)))
    return ReconcilePlan([c for c in plan.changes if c.node in chosen])


def _show_apply(data: dict[str, Any]) -> None:
    """A line per node; a note too long for its cell cut with a reference and written whole below, once."""
    table = Table(title="rackctl apply would")
    rows = []
    for c in data["plan"]["nodes"]:
        note = {
            "new": "every stage, this node alone",
            "removed": "drain + delete from Kubernetes when there, power off",
            "unchanged": "not contacted",
            "adopted": "recorded as applied (no earlier apply); not contacted",
            "forgotten": "not in the inventory and never applied: BMC unknown, not contacted; retire it with "
            f"`rackctl journal mark {c['node']} maintenance --cause ...` and power it off by hand",
        }.get(c["kind"], "")
        if c["deferred"]:
            note = "; ".join(f"{s}: needs `{cmd}`" for s, cmd in c["deferred"].items())
        rows.append((c["node"], c["kind"], ",".join(c["sections"]), ",".join(c["stages"]), note))
    heads = ("node", "change", "sections", "stages")
    notes = Notes(sum(max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(heads)), 5)
    for col in (*heads, "note"):
        table.add_column(col, no_wrap=col in ("node", "change"), overflow="fold")
    for node, kind, sections, stages, note in rows:
        table.add_row(escape(node), kind, escape(sections), escape(stages), notes.cell(note))
    console.print(table)
    notes.show()


def _show_apply_result(data: dict[str, Any]) -> None:
    for node, r in data.get("nodes", {}).items():
        style = "green" if r["ok"] else "red"
        console.print(f"[{style}]{escape(node)}[/{style}]: {escape(r.get('did', ''))} {escape(r.get('error', ''))}")


# -- redeploy ----------------------------------------------------------------------------------------
@click.command("redeploy")
@click.argument("node")
@flags.plan("Only check and show the steps (changes nothing).")
@click.option(
    "--until",
    metavar="STAGE",
    default=None,
    help="Bring the node back through the stages up to STAGE only (default: every stage).",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before reinstalling the node.")
@flags.inventory
@flags.state_dir
@flags.json
@handle_errors()
def redeploy_cmd(
    *,
    node: str,
    plan_only: bool,
    until: str | None,
    yes: bool,
    inventory_path: Path,
    state_dir: Path,
    as_json: bool,
) -> None:
    """Reinstall NODE: drain and remove it from Kubernetes (and etcd) when there, PXE-reinstall, bring it
    back through the stages, restore its labels. Run it again after an interruption: it resumes."""

    inventory = load_inventory(inventory_path)
    options = RunOptions(yes=yes, environment=environment_for(inventory))
    cluster = cluster_for(state_dir)
    plan = plan_redeploy(inventory, state_dir, node, cluster, options, until=until)
    data: dict[str, Any] = {"ok": True, "plan": plan.as_dict()}
    if plan_only:
        emit({**data, "applied": False}, as_json, _show_redeploy)
        return
    if not as_json:
        _show_redeploy(data)
    if not plan.resuming and not yes:
        if not sys.stdin.isatty():
            raise InvalidInput(f"redeploy wipes {node}'s disk; refusing without a terminal: pass --yes to confirm")
        if not click.confirm(f"Reinstall {node} (its disk is wiped)?", default=False):
            emit({"ok": False, "error": "not confirmed", "applied": False}, as_json, lambda d: None)
            sys.exit(1)
    options = RunOptions(yes=True, environment=options.environment)
    progress, context = _progress(as_json)
    if context is not None:
        with context:
            result = run_redeploy(
                inventory, state_dir, plan, cluster=cluster, options=options, progress=progress, until=until
            )
    else:
        result = run_redeploy(
            inventory, state_dir, plan, cluster=cluster, options=options, progress=progress, until=until
        )
    emit({**data, **result, "applied": True}, as_json, lambda d: console.print(escape(d["message"])))
    if result["exit_code"] != EXIT_OK:
        sys.exit(result["exit_code"])


def _show_redeploy(data: dict[str, Any]) -> None:
    plan = data["plan"]
    title = f"rackctl redeploy {plan['node']}" + (" (resuming)" if plan["resuming"] else "")
    table = Table(title=title)
    for col in ("step", "action", "skip"):
        table.add_column(col)
    for s in plan["steps"]:
        table.add_row(s["step"], escape(s["action"]), escape(s["skip"] or ""))
    console.print(table)


# -- driver ------------------------------------------------------------------------------------------
@click.group("driver")
def driver_group() -> None:
    """The NVIDIA GPU driver (day-2)."""


@driver_group.command("upgrade")
@click.option("--version", "version", required=True, metavar="V", help="Target driver version, e.g. 580.95.05.")
@flags.plan("Only check and show the plan (renders nothing).")
@click.option(
    "--max-unavailable",
    default=None,
    metavar="N|P%",
    help="Host path: GPU nodes down at once, a count or a percentage (default: firmware.rollout.max_unavailable).",
)
@flags.seconds(
    "--timeout",
    "timeout_s",
    minimum=1,
    default=7200.0,
    help_text="Operator path: how long to watch the GPU Operator's rollout before giving up (it goes on by itself).",
)
@flags.seconds(
    "--poll",
    "poll_s",
    minimum=0.1,
    default=5.0,
    help_text="Operator path: how often to read the GPU nodes' upgrade states.",
)
@flags.nodes
@flags.json
@handle_errors()
def driver_upgrade_cmd(
    *,
    version: str,
    plan_only: bool,
    max_unavailable: str | None,
    timeout_s: float,
    poll_s: float,
    inventory_path: Path,
    state_dir: Path,
    limit: str | None,
    as_json: bool,
) -> None:
    """Check V against Triton's CUDA and the GPU Operator's matrix, plan the upgrade, then apply it.

    Operator path with <state-dir>/kubeconfig: sets the driver version in the GPU Operator's ClusterPolicy and
    watches its rolling upgrade per node to the end (exit 0 done, 1 failed or timed out); without one it renders
    the plan after its checks and says it was not applied (exit 5). Host path (cluster.gpu_driver: host):
    executes, node by node in batches: cordon + drain (with <state-dir>/kubeconfig), driver (+ Fabric Manager)
    at exactly V, held, REBOOT, verify, uncordon; journalled, run it again to resume; exit 0 when every GPU node
    runs V, 1 on failures. --plan renders nothing and exits 0. --limit: the host path's GPU nodes to upgrade.
    """

    inventory = load_inventory(inventory_path)
    only = match_nodes(inventory, split_csv(limit)) if limit is not None else None
    plan = plan_upgrade(inventory, version, max_unavailable=_count_or_percent(max_unavailable), only=only)
    for message in plan.warnings:
        warn(message, as_json)
    route, cluster = driver_route(plan, state_dir, plan_only=plan_only)
    if route == "operator" and isinstance(cluster, Kubectl):
        sys.exit(_driver_via_operator(plan, cluster, timeout_s=timeout_s, poll_s=poll_s, as_json=as_json))
    if route == "host":
        _driver_on_host(inventory, plan, state_dir, max_unavailable=_count_or_percent(max_unavailable), as_json=as_json)
        return
    status = "planned, not applied"
    exit_code = EXIT_OK
    if route == "render":
        ensure_writable_state_dir(state_dir)
        render(inventory, plan, state_dir, environment_for(inventory))
        status = "planned/rendered, not applied"
        exit_code = EXIT_NOT_APPLIED
    reason = not_applied_reason(plan, cluster)
    data = {
        "ok": plan_only,
        "status": status,
        "applied": False,
        "reason": reason,
        "exit_code": exit_code,
        "plan": plan.as_dict(),
    }

    def human(d: dict[str, Any]) -> None:
        p = d["plan"]
        console.print(f"driver {escape(p['version'])} via the {p['path']} path")
        for check in p["checks"]:
            console.print(f"  [green]ok[/green] {check['check']}: {escape(check['result'])}")
        for index, batch in enumerate(p["batches"], 1):
            console.print(f"batch {index}: {', '.join(batch)}")
        for node, steps in p["steps"].items():
            console.print(f"  {escape(node)}: " + " -> ".join(escape(s) for s in steps))
        for what, path in p["rendered"].items():
            console.print(f"rendered {what}: {escape(path)}")
        console.print(f"[yellow]{escape(d['status'])} (applied: false): {escape(d['reason'])}[/yellow]")
        if d["exit_code"] == EXIT_NOT_APPLIED:
            console.print(f"[yellow]exit {EXIT_NOT_APPLIED}: checked and rendered only, nothing applied[/yellow]")

    emit(data, as_json, human)
    if exit_code != EXIT_OK:
        sys.exit(exit_code)


def _driver_via_operator(plan: DriverPlan, cluster: Kubectl, *, timeout_s: float, poll_s: float, as_json: bool) -> int:
    """The operator path, executed: patch the ClusterPolicy, watch per node (progress on stderr); the exit code."""

    def changed(node: NodeUpgrade, upgrade: OperatorUpgrade) -> None:
        if not as_json:
            done = sum(u.done for u in upgrade.nodes.values())
            err_console.print(f"{escape(node.node)}: {escape(node.shown())} ({done}/{len(upgrade.nodes)} done)")

    if not as_json:
        err_console.print(
            f"driver {escape(plan.version)}: setting it in the GPU Operator's ClusterPolicy ({cluster.reason})"
        )
    result = upgrade_with_operator(
        cluster, list(plan.steps), plan.version, timeout_s=timeout_s, poll_s=poll_s, on_change=changed
    )
    code = EXIT_OK if result.ok else EXIT_FAILED
    status = "applied" if result.ok else f"applied, {result.outcome}"
    data = {"ok": result.ok, "status": status, "applied": True, "exit_code": code, "plan": plan.as_dict()}
    data["operator"] = result.as_dict()

    def human(d: dict[str, Any]) -> None:
        for name, node in d["operator"]["nodes"].items():
            console.print(f"  {escape(name)}: {escape(node['shown'])} (seen: {escape(' -> '.join(node['observed']))})")
        colour = "green" if d["ok"] else "red"
        console.print(f"[{colour}]{escape(d['operator']['message'])}[/{colour}]")

    emit(data, as_json, human)
    return code


def _driver_on_host(
    inventory: Inventory, plan: DriverPlan, state_dir: Path, *, max_unavailable: int | str | None, as_json: bool
) -> None:
    """The host path, executed (progress per node on stderr); exits non-zero unless every GPU node ends at V."""
    progress = None if as_json else RichProgress(err_console)
    title = progress_title(plan)

    def on_event(kind: str, node: str, text: str) -> None:
        if progress is None:
            return
        if kind == "read":
            progress.stage_started(title, list(plan.steps))
        if kind in ("done", "skip", "failed") and node:
            progress.node_done(title, node, kind != "failed", text)
        else:
            progress.log(f"{kind:8}{node + ': ' if node else ''}{text}")

    done = upgrade_host(
        inventory,
        plan,
        state_dir,
        environment_for(inventory),
        max_unavailable=max_unavailable,
        on_event=on_event,
        shown=progress,
        tasks=progress,
    )
    report = done.report
    if report is None:
        message = f"interrupted: run `rackctl driver upgrade --version {plan.version}` again to resume"
        emit({"ok": False, "error": message, "run": done.run_id}, as_json, lambda _d: err_console.print(message))
        sys.exit(EXIT_INTERRUPTED)
    data: dict[str, Any] = {
        "applied": True,
        "status": "applied" if report.ok else "failed",
        "run": done.run_id,
        "exit_code": 0 if report.ok else EXIT_FAILED,
        **report.as_dict(),
        "plan": plan.as_dict(),
    }
    emit(data, as_json, lambda _d: show_report(report))
    if not report.ok:
        sys.exit(EXIT_FAILED)


def show_report(report: DriverRolloutReport) -> None:
    columns: dict[str, Callable[[DriverNodeOutcome], str]] = {
        "before": lambda n: _versions(n.before),
        "after": lambda n: _versions(n.after),
        "cordon": lambda n: n.cordon,
    }
    show_rollout(report, columns, title=f"driver {report.version} (host path)")


def _versions(data: dict[str, Any]) -> str:
    if not data:
        return "-"
    if data.get("error"):
        return f"unknown: {data['error']}"
    pkgs = ", ".join(f"{n} {p['version'] or 'none'} ({p['selection'] or '-'})" for n, p in data["packages"].items())
    return f"{pkgs}; running {'/'.join(data['running']) or 'none'}"


def _count_or_percent(value: str | None) -> int | str | None:
    """``--max-unavailable`` as the scheduler takes it (a count or ``"25%"``); refused with the fix otherwise."""
    if value is None:
        return None
    parsed: int | str = int(value) if value.strip().isdigit() else value.strip()
    try:
        max_unavailable_count(parsed, 1)
    except ValueError as exc:
        raise InvalidInput(
            f"--max-unavailable {value!r} is not usable",
            problems=[Problem("--max-unavailable", str(exc), "give a count >= 1 or a percentage such as 25%")],
        ) from None
    return parsed


def register(cli: click.Group) -> None:
    """Add ``status``, ``apply``, ``redeploy`` and ``driver`` to the root group."""
    cli.add_command(status_cmd)
    cli.add_command(apply_cmd)
    cli.add_command(redeploy_cmd)
    cli.add_command(driver_group)
