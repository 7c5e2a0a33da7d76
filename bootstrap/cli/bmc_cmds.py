"""Out-of-band commands: ``discover``, ``power``, ``boot``, ``bios plan|apply``, ``bmc status``.

Every command reads the inventory, works on the nodes ``--limit`` selects, talks to all their BMCs at once
(one session and at most two requests in flight per BMC), shows progress per node, reports failures per
node, and prints one JSON document with ``--json``. Mutating commands have ``--dry-run``; nothing reboots a
node unless ``--reboot`` is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bootstrap.cli.common import (
    console,
    emit,
    err_console,
    escape,
    handle_errors,
    inventory_option,
    json_option,
    state_dir_option,
    warn,
)
from bootstrap.errors import EXIT_FAILED
from bootstrap.inventory import Inventory, Node, load_inventory
from bootstrap.stages.insecure import insecure_warning
from bootstrap.stages.oob import (
    run_bios_stage,
    run_discover_stage,
    select_nodes,
    targets_for,
    write_mac_diff,
)
from bootstrap.stages.runner import ensure_writable_state_dir
from redfish_tools.boot import BOOT_TARGETS, set_boot_once
from redfish_tools.connection import BmcConnection
from redfish_tools.fleet import NodeResult, run_fleet
from redfish_tools.jobs import list_jobs
from redfish_tools.lc import lc_status
from redfish_tools.power import POWER_ACTIONS, plan_power, power_state, set_power
from redfish_tools.resources import Service

limit_option = click.option(
    "--limit", "limit", metavar="NODES", default=None, help="Comma-separated hostnames, globs or roles."
)
dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Read the BMCs and show what would change; change nothing."
)


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

    def __call__(self, result: NodeResult[Any]) -> None:
        self._progress.advance(self._task)
        if self.quiet:
            return
        if result.ok:
            self._progress.console.print(f"  [green]ok[/green]   {result.name} ({result.seconds:.1f}s)")
        else:
            err = result.error or {}
            self._progress.console.print(
                f"  [red]fail[/red] {result.name}: {escape(str(err.get('message', '')))}"
                f" [dim]({err.get('kind')}{', ' + err['message_id'] if err.get('message_id') else ''})[/dim]"
            )


def _selected(inventory_path: Path, limit: str | None, as_json: bool) -> tuple[Inventory, list[Node]]:
    """The inventory and the nodes ``--limit`` selects; says once if their BMCs are not TLS-verified."""
    inventory = load_inventory(inventory_path)
    nodes = select_nodes(inventory, limit)
    warning = insecure_warning(inventory, [n.hostname for n in nodes])
    if warning:
        warn(warning, as_json)
    return inventory, nodes


def _fleet(
    inventory_path: Path, limit: str | None, label: str, op: Callable[[BmcConnection], Any], as_json: bool
) -> list[NodeResult[Any]]:
    inventory, nodes = _selected(inventory_path, limit, as_json)
    targets = targets_for(inventory, nodes)
    with FleetProgress(label, len(targets), as_json) as progress:
        return run_fleet(targets, op, progress=progress)


def _finish(ok: bool) -> None:
    if not ok:
        sys.exit(EXIT_FAILED)


def _node_rows(results: list[NodeResult[Any]], show: Callable[[Any], str]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    table.add_column("node")
    table.add_column("result")
    for r in results:
        if r.ok:
            table.add_row(r.name, show(r.value))
        else:
            err = r.error or {}
            table.add_row(r.name, f"[red]{escape(str(err.get('message')))}[/red] ({err.get('kind')})")
    return table


def _as_dict(value: Any) -> Any:
    return value.as_dict() if hasattr(value, "as_dict") else value


# -- discover ---------------------------------------------------------------------------------------
@click.command("discover")
@inventory_option
@state_dir_option
@limit_option
@click.option("--write", is_flag=True, help="Write the discovered MACs into the inventory (atomically).")
@json_option
@handle_errors()
def discover_cmd(inventory_path: Path, state_dir: Path, limit: str | None, write: bool, as_json: bool) -> None:
    """Read each node's hardware through its iDRAC and check it against the inventory.

    Facts go to the run journal; model, GPU count and service tag are compared with the inventory; the
    discovered MACs are offered as an inventory diff (applied with --write).
    """
    ensure_writable_state_dir(state_dir)  # the facts go to the journal: refuse before talking to any BMC
    inventory, nodes = _selected(inventory_path, limit, as_json)
    with FleetProgress("discover", len(nodes), as_json) as progress:
        report = run_discover_stage(inventory, nodes, state_dir, progress)
    written = write_mac_diff(inventory_path, report.mac_diff) if write else 0
    data = report.as_dict() | {"written": written}

    def human(d: dict[str, Any]) -> None:
        console.print(
            _node_rows(
                report.results,
                lambda f: (
                    f"{f.short_model} tag {f.service_tag} gpus {f.gpu_count} nics {len(f.nics)} "
                    f"bios {f.bios_version} idrac {f.idrac_version} power {f.power_state}"
                ),
            )
        )
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

    emit(data, as_json, human)
    _finish(report.ok)


# -- power ------------------------------------------------------------------------------------------
@click.command("power")
@click.argument("action", type=click.Choice(POWER_ACTIONS))
@inventory_option
@limit_option
@dry_run_option
@json_option
@handle_errors()
def power_cmd(action: str, inventory_path: Path, limit: str | None, dry_run: bool, as_json: bool) -> None:
    """Power nodes on, off (forced), graceful-off, cycle or graceful-restart (no-op where already so)."""

    def op(conn: BmcConnection) -> dict[str, Any]:
        if dry_run:
            current = power_state(conn)
            step = plan_power(current, action)
            return {"current": current, "would": step or "nothing"}
        return set_power(conn, action).as_dict()

    results = _fleet(inventory_path, limit, f"power {action}", op, as_json)
    data = {
        "ok": all(r.ok for r in results),
        "action": action,
        "dry_run": dry_run,
        "nodes": [r.as_dict(_as_dict) for r in results],
    }

    def show(v: dict[str, Any]) -> str:
        if dry_run:
            return f"{v['current']}: " + ("no change" if v["would"] == "nothing" else f"would {v['would']}")
        return f"{v['before']} -> {v['after']}" + ("" if v["changed"] else " (no change)")

    emit(data, as_json, lambda d: console.print(_node_rows(results, show)))
    _finish(data["ok"])


# -- boot -------------------------------------------------------------------------------------------
@click.command("boot")
@click.argument("target", type=click.Choice(BOOT_TARGETS))
@click.option("--continuous", is_flag=True, help="Keep the override for every boot instead of once.")
@click.option("--reboot", is_flag=True, help="Restart (or power on) the node afterwards to boot it now.")
@inventory_option
@limit_option
@dry_run_option
@json_option
@handle_errors()
def boot_cmd(  # noqa: PLR0917 - click passes options as arguments
    target: str,
    continuous: bool,
    reboot: bool,
    inventory_path: Path,
    limit: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Set a one-time boot override (Pxe, UefiHttp, Hdd…); idempotent; reboots only with --reboot."""
    enabled = "Continuous" if continuous else "Once"

    def op(conn: BmcConnection) -> dict[str, Any]:
        if dry_run:
            boot = Service(conn).system(fresh=True).get("Boot", {})
            same = boot.get("BootSourceOverrideTarget") == target and boot.get("BootSourceOverrideEnabled") == enabled
            return {
                "current": f"{boot.get('BootSourceOverrideTarget')}/{boot.get('BootSourceOverrideEnabled')}",
                "would": "nothing" if same else f"set {target}/{enabled}" + (" and reboot" if reboot else ""),
            }
        result = set_boot_once(conn, target, enabled=enabled).as_dict()
        if reboot:
            result["power"] = set_power(conn, "cycle").as_dict()
        return result

    results = _fleet(inventory_path, limit, f"boot {target}", op, as_json)
    data = {
        "ok": all(r.ok for r in results),
        "target": target,
        "enabled": enabled,
        "dry_run": dry_run,
        "nodes": [r.as_dict() for r in results],
    }

    def show(v: dict[str, Any]) -> str:
        if dry_run:
            return f"{v['current']}: " + ("no change" if v["would"] == "nothing" else f"would {v['would']}")
        return f"{v['target']}/{v['enabled']}" + ("" if v["changed"] else " (no change)")

    emit(data, as_json, lambda d: console.print(_node_rows(results, show)))
    _finish(data["ok"])


# -- bios -------------------------------------------------------------------------------------------
@click.group("bios")
def bios_group() -> None:
    """BIOS settings from the inventory's per-role profiles (validated against each BIOS registry)."""


def _bios_run(
    inventory_path: Path, state_dir: Path, limit: str | None, as_json: bool, *, dry_run: bool, reboot: bool
) -> None:
    inventory, nodes = _selected(inventory_path, limit, as_json)
    label = "bios plan" if dry_run else "bios apply"
    with FleetProgress(label, len(nodes), as_json) as progress:
        report = run_bios_stage(inventory, nodes, state_dir, progress, reboot=reboot, dry_run=dry_run)
    data = report.as_dict()

    def show(v: Any) -> str:
        d = v.as_dict()
        plan = d.get("plan", d)
        changes = ", ".join(f"{c['attribute']}: {c['current']} -> {c['desired']}" for c in plan["changes"])
        text = changes or "no change"
        if plan.get("problems"):
            text += " [red]problems: " + escape("; ".join(plan["problems"])) + "[/red]"
        if "state" in d:
            text = f"[bold]{d['state']}[/bold] {text}"
            if d.get("job"):
                text += f" job {d['job']['id']}"
            if d.get("not_applied"):
                text += " [yellow]not applied: " + escape(str(d["not_applied"])) + "[/yellow]"
        return text

    emit(data, as_json, lambda d: console.print(_node_rows(report.results, show)))
    _finish(report.ok)


@bios_group.command("plan")
@inventory_option
@state_dir_option
@limit_option
@json_option
@handle_errors()
def bios_plan_cmd(inventory_path: Path, state_dir: Path, limit: str | None, as_json: bool) -> None:
    """Show which BIOS attributes each node's profile would change (changes nothing)."""
    _bios_run(inventory_path, state_dir, limit, as_json, dry_run=True, reboot=False)


@bios_group.command("apply")
@inventory_option
@state_dir_option
@limit_option
@click.option("--reboot", is_flag=True, help="Reboot now so the job runs; wait for it and read back.")
@dry_run_option
@json_option
@handle_errors()
def bios_apply_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path, state_dir: Path, limit: str | None, reboot: bool, dry_run: bool, as_json: bool
) -> None:
    """Stage each node's BIOS profile in an apply-on-reset job (runs at next reboot, or now: --reboot)."""
    _bios_run(inventory_path, state_dir, limit, as_json, dry_run=dry_run, reboot=reboot)


# -- bmc status -------------------------------------------------------------------------------------
@click.group("bmc")
def bmc_group() -> None:
    """BMC (iDRAC) housekeeping."""


@bmc_group.command("status")
@inventory_option
@limit_option
@json_option
@handle_errors()
def bmc_status_cmd(inventory_path: Path, limit: str | None, as_json: bool) -> None:
    """Reachability, login, TLS mode, power state, Lifecycle Controller and job queue of each BMC."""

    def op(conn: BmcConnection) -> dict[str, Any]:
        svc = Service(conn)
        system = svc.system()
        manager = svc.manager()
        try:
            lc = lc_status(conn, svc).as_dict()
        except Exception as exc:  # LC status is informative here; report why it is missing
            lc = {"ready": None, "error": getattr(exc, "message", str(exc))}
        jobs = [j.as_dict() for j in list_jobs(conn, svc) if j.pending]
        return {
            "auth": conn.auth_mode,
            "tls": conn.target.tls.describe(),
            "power": system.get("PowerState"),
            "model": system.get("Model"),
            "service_tag": system.get("SKU"),
            "idrac_version": manager.get("FirmwareVersion"),
            "lc": lc,
            "pending_jobs": jobs,
        }

    results = _fleet(inventory_path, limit, "bmc status", op, as_json)
    data = {"ok": all(r.ok for r in results), "nodes": [r.as_dict() for r in results]}

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
