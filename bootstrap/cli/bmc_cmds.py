"""Out-of-band commands: ``discover``, ``power``, ``boot``, ``bios plan|apply``, ``bmc status``.

Every command reads the inventory, works on the nodes ``--limit`` selects, talks to all their BMCs at once
(one session and at most two requests in flight per BMC), shows progress per node, reports failures per
node, and prints one JSON document with ``--json``. Mutating commands have ``--plan``; nothing reboots a
node unless ``--reboot`` is given.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, environment_for, err_console, escape, handle_errors, warn
from bootstrap.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from bootstrap.inventory import Inventory, load_inventory
from bootstrap.oob import (
    desired_bios,
    policy_for,
    targets_for,
    write_mac_diff,
)
from bootstrap.selection import select_nodes, split_csv
from bootstrap.stages.base import RunOptions
from bootstrap.stages.insecure import insecure_warning
from bootstrap.stages.oob_reports import as_plain, bios_apply_report, bios_plan_report, discover_report
from bootstrap.stages.options import BiosOptions
from bootstrap.stages.progress import RichProgress
from bootstrap.stages.runner import Runner, RunOutcome, select
from redfish_tools.boot import BOOT_TARGETS, boot_override, set_boot_once
from redfish_tools.connection import BmcConnection
from redfish_tools.fleet import BmcResult, FleetInterrupted, run_fleet
from redfish_tools.power import POWER_ACTIONS, plan_power, power_state, set_power
from redfish_tools.resources import Service
from redfish_tools.status import read_queue, read_status

dry_run_option = flags.plan("Read the BMCs and show what would change; change nothing.", "dry_run")


class FleetProgress:
    """A rich progress bar on stderr with one line per finished node (quiet with ``--json``)."""

    def __init__(self, label: str, total: int, quiet: bool) -> None:
        self.quiet = quiet
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
            disable=quiet,
        )
        self._task = self._progress.add_task(label, total=total)

    def __enter__(self) -> FleetProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def __call__(self, result: BmcResult[Any]) -> None:
        self._progress.advance(self._task)
        if self.quiet:
            return
        if result.ok:
            self._progress.console.print(f"  [green]ok[/green]   {result.name} ({result.seconds:.1f}s)")
        else:  # the error itself: in the command's table, once
            self._progress.console.print(f"  [red]fail[/red] {result.name}")


def _why(err: dict[str, Any]) -> str:
    """A failed node's cell: the error, its kind and Redfish MessageId."""
    kind = f"{err.get('kind')}{', ' + err['message_id'] if err.get('message_id') else ''}"
    return f"[red]{escape(str(err.get('message')))}[/red] ({escape(kind)})"


def _warn_if_insecure(inventory: Inventory, hostnames: list[str], as_json: bool) -> None:
    """Say once (stderr, or the ``--json`` document's ``warnings``) which selected BMCs are not TLS-verified."""
    warning = insecure_warning(inventory, hostnames)
    if warning:
        warn(warning, as_json)


def _fleet(  # noqa: PLR0917
    inventory_path: Path,
    state_dir: Path,
    limit: str | None,
    label: str,
    op: Callable[[BmcConnection], Any],
    as_json: bool,
) -> list[BmcResult[Any]]:
    inventory = load_inventory(inventory_path)
    nodes = select_nodes(inventory, limit)
    _warn_if_insecure(inventory, [n.hostname for n in nodes], as_json)
    targets = targets_for(inventory, nodes)
    try:
        with FleetProgress(label, len(targets), as_json) as progress:
            return run_fleet(targets, op, policy=policy_for(state_dir), progress=progress)
    except FleetInterrupted as stop:
        _interrupted(stop, as_json)


def _interrupted(stop: FleetInterrupted, as_json: bool) -> NoReturn:
    """Ctrl-C during a fleet command: say which nodes finished, which were cut, which never started; exit 130."""
    done = [r.as_dict(as_plain) for r in stop.results if r is not None]
    not_started = stop.not_started
    if as_json:
        emit(
            {
                "ok": False,
                "error": "interrupted (Ctrl-C)",
                "exit_code": EXIT_INTERRUPTED,
                "nodes": done,
                "not_started": not_started,
            },
            True,
            lambda _d: None,
        )
    else:
        err_console.print(
            f"[red]interrupted[/red]: {sum(1 for r in done if r['ok'])} node(s) done, "
            f"{len(not_started)} not started" + (f" ({', '.join(not_started)})" if not_started else "")
        )
    sys.exit(EXIT_INTERRUPTED)


def _finish(ok: bool) -> None:
    if not ok:
        sys.exit(EXIT_FAILED)


def _node_rows(results: list[BmcResult[Any]], show: Callable[[Any], str]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    table.add_column("node", no_wrap=True)
    table.add_column("result", overflow="fold")
    for r in results:
        if r.ok:
            table.add_row(r.name, show(r.value))
        else:
            table.add_row(r.name, _why(r.error or {}))
    return table


# -- stages run standalone ------------------------------------------------------------------------
def _run_stage(
    inventory: Inventory,
    state_dir: Path,
    stage: str,
    limit: str | None,
    as_json: bool,
    *,
    options: RunOptions | None = None,
    command: str,
) -> RunOutcome:
    """Run one stage of ``up`` on the selected nodes through the runner (journalled, states moved).

    Standalone commands are explicit requests, so the stage runs even where the journal says it completed
    (like ``up --from``); the stage's own steps decide what is really redone.
    """
    selection = select(inventory, stages=[stage], limit=split_csv(limit), force=True)
    # bad input is refused before the journal is touched, with every problem named (exit 2)
    chosen = [n for n in inventory.nodes if n.hostname in selection.nodes]
    targets_for(inventory, chosen)
    if as_json:  # in text, the runner says it on stderr itself, once
        _warn_if_insecure(inventory, selection.nodes, as_json)
    if stage == "bios":
        for node in chosen:
            desired_bios(inventory, node)
    runner_options = dataclasses.replace(options or RunOptions(), environment=environment_for(inventory))
    if as_json:
        return Runner(inventory, state_dir, selection, options=runner_options, command=command).run()
    with RichProgress(err_console) as progress:
        return Runner(inventory, state_dir, selection, options=runner_options, progress=progress, command=command).run()


def _command(name: str, limit: str | None, *extra: str) -> str:
    return " ".join([name, *([f"--limit {limit}"] if limit else []), *extra])


# -- discover ---------------------------------------------------------------------------------------
@click.command("discover")
@flags.nodes
@click.option("--write", is_flag=True, help="Write the discovered MACs into the inventory (atomically).")
@flags.json
@handle_errors()
def discover_cmd(inventory_path: Path, state_dir: Path, limit: str | None, write: bool, as_json: bool) -> None:
    """Read each node's hardware through its iDRAC and check it against the inventory.

    The discover stage of `rackctl up`: facts go to the run journal and a node that matches moves to
    `discovered`; model, GPU count and service tag are compared with the inventory; the discovered MACs are
    offered as an inventory diff (applied with --write, one line per MAC).
    """
    inventory = load_inventory(inventory_path)
    outcome = _run_stage(
        inventory, state_dir, "discover", limit, as_json, command=_command("discover", limit, *(["--write"] * write))
    )
    data = discover_report(inventory, state_dir, outcome)
    data["written"] = write_mac_diff(inventory_path, data["mac_diff"]) if write else 0

    def human(d: dict[str, Any]) -> None:
        table = Table(show_edge=False, header_style="bold")
        for col in ("node", "state", "result"):
            table.add_column(col, no_wrap=col != "result", overflow="fold")
        for n in d["nodes"]:
            f = n["value"]
            text = (
                f"{f.get('short_model') or f['model']} tag {f['service_tag']} gpus {len(f['gpus'])} "
                f"nics {len(f['nics'])} bios {f['bios_version']} idrac {f['idrac_version']} power {f['power_state']}"
                if f
                else ""
            )
            if not n["ok"] or not f:
                text = f"[red]{escape(n['message'])}[/red]" if not n["ok"] else escape(n["message"])
            table.add_row(n["name"], n["state"], text)
        console.print(table)
        for node, items in d["mismatches"].items():
            for item in items:
                console.print(
                    f"[yellow]mismatch[/yellow] {node}: {item['field']} inventory={item['inventory']} "
                    f"discovered={item['discovered']}"
                )
        if d["mac_diff"]:
            console.print("[bold]inventory MAC diff[/bold]" + (" (written)" if write else " (use --write)"))
            for item in d["mac_diff"]:
                console.print(
                    f"  {item['node']} {item['interface']} ({item['fqdd']}): "
                    f"[red]- {item['inventory']}[/red] [green]+ {item['discovered']}[/green]"
                )
        style = "green" if d["ok"] else "red"
        summary = d["message"] if outcome.summary is None else outcome.summary  # each node's error: in the table
        console.print(f"[{style}]{escape(summary)}[/{style}]", soft_wrap=False)

    emit(data, as_json, human)
    _finish_outcome(outcome)


def _finish_outcome(outcome: RunOutcome) -> None:
    if outcome.exit_code != EXIT_OK:
        sys.exit(outcome.exit_code)


# -- power ------------------------------------------------------------------------------------------
@click.command("power")
@click.argument("action", type=click.Choice(POWER_ACTIONS))
@flags.nodes
@dry_run_option
@flags.json
@handle_errors()
def power_cmd(  # noqa: PLR0917 - click passes options as arguments
    action: str, inventory_path: Path, state_dir: Path, limit: str | None, dry_run: bool, as_json: bool
) -> None:
    """Power nodes on, off (forced), graceful-off, cycle or graceful-restart (no-op where already so)."""

    def op(conn: BmcConnection) -> dict[str, Any]:
        if dry_run:
            current = power_state(conn)
            step = plan_power(current, action)
            return {"current": current, "would": step or "nothing"}
        return set_power(conn, action).as_dict()

    results = _fleet(inventory_path, state_dir, limit, f"power {action}", op, as_json)
    data: dict[str, Any] = {
        "ok": all(r.ok for r in results),
        "action": action,
        "dry_run": dry_run,
        "nodes": [r.as_dict(as_plain) for r in results],
    }

    def show(v: dict[str, Any]) -> str:
        if dry_run:
            return _would(v)
        return f"{v['before']} -> {v['after']}" + ("" if v["changed"] else " (no change)")

    emit(data, as_json, lambda d: console.print(_node_rows(results, show)))
    _finish(data["ok"])


def _would(v: dict[str, Any]) -> str:
    """A ``--plan`` result in words: the current value and what would change."""
    return f"{v['current']}: " + ("no change" if v["would"] == "nothing" else f"would {v['would']}")


# -- boot -------------------------------------------------------------------------------------------
@click.command("boot")
@click.argument("target", type=click.Choice(BOOT_TARGETS))
@click.option("--continuous", is_flag=True, help="Keep the override for every boot instead of once.")
@click.option("--reboot", is_flag=True, help="Restart (or power on) the node afterwards to boot it now.")
@flags.nodes
@dry_run_option
@flags.json
@handle_errors()
def boot_cmd(  # noqa: PLR0917 - click passes options as arguments
    target: str,
    continuous: bool,
    reboot: bool,
    inventory_path: Path,
    state_dir: Path,
    limit: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Set a one-time boot override (Pxe, UefiHttp, Hdd…); idempotent; reboots only with --reboot."""
    enabled = "Continuous" if continuous else "Once"

    def op(conn: BmcConnection) -> dict[str, Any]:
        if dry_run:
            boot = boot_override(conn)
            same = boot["target"] == target and boot["enabled"] == enabled
            return {
                "current": f"{boot['target']}/{boot['enabled']}",
                "would": "nothing" if same else f"set {target}/{enabled}" + (" and reboot" if reboot else ""),
            }
        result = set_boot_once(conn, target, enabled=enabled).as_dict()
        if reboot:
            result["power"] = set_power(conn, "cycle").as_dict()
        return result

    results = _fleet(inventory_path, state_dir, limit, f"boot {target}", op, as_json)
    data: dict[str, Any] = {
        "ok": all(r.ok for r in results),
        "target": target,
        "enabled": enabled,
        "dry_run": dry_run,
        "nodes": [r.as_dict() for r in results],
    }

    def show(v: dict[str, Any]) -> str:
        if dry_run:
            return _would(v)
        return f"{v['target']}/{v['enabled']}" + ("" if v["changed"] else " (no change)")

    emit(data, as_json, lambda d: console.print(_node_rows(results, show)))
    _finish(data["ok"])


# -- bios -------------------------------------------------------------------------------------------
@click.group("bios")
def bios_group() -> None:
    """BIOS settings from the inventory's per-role profiles (validated against each BIOS registry)."""


def _bios_plan(inventory_path: Path, state_dir: Path, limit: str | None, as_json: bool) -> None:
    """The bios stage's plan (journal under --state-dir) with each runnable node's attribute changes."""
    inventory = load_inventory(inventory_path)

    def progress(hostnames: list[str]) -> FleetProgress:
        _warn_if_insecure(inventory, hostnames, as_json)
        return FleetProgress("bios plan", len(hostnames), as_json)

    data = bios_plan_report(inventory, state_dir, limit, environment=environment_for(inventory), progress=progress)

    def human(d: dict[str, Any]) -> None:
        table = Table(show_edge=False, header_style="bold")
        table.add_column("node", no_wrap=True)
        table.add_column("plan", overflow="fold")
        for n in d["nodes"]:
            if n["status"] != "run":
                table.add_row(n["name"], f"[dim]{escape(n['skip'])}[/dim]")
            elif not n["ok"]:
                table.add_row(n["name"], _why(n.get("error") or {}))
            else:
                table.add_row(n["name"], _bios_changes(n["value"]))
        console.print(table)

    emit(data, as_json, human)
    _finish(data["ok"])


def _bios_changes(plan_data: dict[str, Any]) -> str:
    changes = ", ".join(f"{c['attribute']}: {c['current']} -> {c['desired']}" for c in plan_data["changes"])
    text = changes or "no change"
    if plan_data.get("problems"):
        text += " [red]problems: " + escape("; ".join(plan_data["problems"])) + "[/red]"
    return text


def _bios_apply(inventory_path: Path, state_dir: Path, limit: str | None, as_json: bool, *, reboot: bool) -> None:
    """The bios stage of ``up`` on the selected nodes (``--reboot``: run the job now and read back)."""
    inventory = load_inventory(inventory_path)
    options = RunOptions(bios=BiosOptions(reboot=reboot))
    command = _command("bios apply", limit, *(["--reboot"] * reboot))
    outcome = _run_stage(inventory, state_dir, "bios", limit, as_json, options=options, command=command)
    data = bios_apply_report(state_dir, outcome)

    def human(d: dict[str, Any]) -> None:
        table = Table(show_edge=False, header_style="bold")
        for col in ("node", "state", "result"):
            table.add_column(col, no_wrap=col != "result", overflow="fold")
        for n in d["nodes"]:
            text = escape(n["message"] or n["status"])
            if n["value"] and n["value"].get("job"):
                text += f" job {n['value']['job']}"
            table.add_row(n["name"], n["state"], text if n["ok"] else f"[red]{text}[/red]")
        console.print(table)
        style = "green" if d["ok"] else "red"
        summary = d["message"] if outcome.summary is None else outcome.summary  # each node's error: in the table
        console.print(f"[{style}]{escape(summary)}[/{style}]", soft_wrap=False)

    emit(data, as_json, human)
    _finish_outcome(outcome)


@bios_group.command("plan")
@flags.nodes
@flags.json
@handle_errors()
def bios_plan_cmd(inventory_path: Path, state_dir: Path, limit: str | None, as_json: bool) -> None:
    """Plan the bios stage: which BIOS attributes each node's profile would change (changes nothing).

    Reads the journal under --state-dir: nodes the stage would not run on (not discovered yet, in
    maintenance, failed) are shown with the reason instead.
    """
    _bios_plan(inventory_path, state_dir, limit, as_json)


@bios_group.command("apply")
@flags.nodes
@click.option("--reboot", is_flag=True, help="Reboot now so the job runs; wait for it and read back.")
@dry_run_option
@flags.json
@handle_errors()
def bios_apply_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path, state_dir: Path, limit: str | None, reboot: bool, dry_run: bool, as_json: bool
) -> None:
    """Run the bios stage: stage each node's profile in an apply-on-reset job (runs at next boot, or now: --reboot).

    Journalled like `rackctl up`; a node that succeeds moves to `configured`. --plan is `bios plan`.
    """
    if dry_run:
        _bios_plan(inventory_path, state_dir, limit, as_json)
        return
    _bios_apply(inventory_path, state_dir, limit, as_json, reboot=reboot)


# -- bmc status -------------------------------------------------------------------------------------
@click.group("bmc")
def bmc_group() -> None:
    """BMC (iDRAC) housekeeping."""


@bmc_group.command("status")
@flags.nodes
@flags.json
@handle_errors()
def bmc_status_cmd(inventory_path: Path, state_dir: Path, limit: str | None, as_json: bool) -> None:
    """Reachability, login, TLS mode, power state, Lifecycle Controller and job queue of each BMC."""

    def op(conn: BmcConnection) -> dict[str, Any]:
        svc = Service(conn)
        status, queue = read_status(conn, svc), read_queue(conn, svc)
        return {
            "auth": conn.auth_mode,
            "tls": conn.target.tls.describe(),
            "power": status.power,
            "model": status.model,
            "service_tag": status.service_tag,
            "idrac_version": status.idrac,
            "lc": queue.lc,
            "pending_jobs": queue.pending_jobs,
        }

    results = _fleet(inventory_path, state_dir, limit, "bmc status", op, as_json)
    data: dict[str, Any] = {"ok": all(r.ok for r in results), "nodes": [r.as_dict() for r in results]}

    def show(v: dict[str, Any]) -> str:
        lc = v["lc"].get("lc_status") or v["lc"].get("error")
        return (
            f"{v['model']} {v['service_tag']} power {v['power']} LC {lc} jobs {len(v['pending_jobs'])} "
            f"({v['auth']}, tls {v['tls']}, iDRAC {v['idrac_version']})"
        )

    emit(data, as_json, lambda d: console.print(_node_rows(results, show)))
    _finish(data["ok"])


def register(cli: click.Group) -> None:
    """Add discover, power, boot, bios and bmc to the root group."""
    for command in (discover_cmd, power_cmd, boot_cmd, bios_group, bmc_group):
        cli.add_command(command)
