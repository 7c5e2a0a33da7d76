"""``rackctl firmware plan|apply``: the rolling firmware update against the inventory's baseline.

``plan`` reads each selected node's installed firmware through its iDRAC and shows, per node and
component, installed -> target, the order, the reboots needed and the batch the node falls in. ``apply``
rolls it out (:func:`bootstrap.day2.firmware_run.apply_firmware`), journalled under ``--state-dir``: run it again to
resume; ``apply --plan`` shows the plan and changes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, environment_for, err_console, escape, handle_errors, warn
from bootstrap.cli.rollout_table import show_rollout
from bootstrap.day2.firmware_run import apply_firmware
from bootstrap.errors import EXIT_FAILED, EXIT_INTERRUPTED
from bootstrap.firmware.apply import FirmwareNodeOutcome
from bootstrap.firmware.plan import FLASHED, FirmwarePlan, plan_firmware
from bootstrap.firmware.read import read_installed
from bootstrap.inventory import Inventory, load_inventory
from bootstrap.oob import policy_for, targets_for
from bootstrap.rollout.report import RolloutReport
from bootstrap.selection import select_nodes
from bootstrap.stages.insecure import insecure_warning

#: ``apply`` keeps reading a BMC that drops connections this long (an iDRAC reset takes about two minutes).
SETTLE_S = 180.0
REBOOT_WORDS = {"idrac-reset": "iDRAC resets", "host-reboot": "host reboot"}
ACTION_STYLE = {"update": "yellow", "downgrade": "yellow", "above-target": "yellow", "no-source": "red"}


def read_plan(
    inventory: Inventory,
    state_dir: Path,
    limit: str | None,
    as_json: bool,
    *,
    settle_s: float = 0.0,
    allow_downgrade: bool = False,
) -> FirmwarePlan:
    """Read the selected nodes' installed firmware (all BMCs at once) and plan against the baseline.

    ``settle_s``: how long to keep reading BMCs that drop connections (an iDRAC resetting after an update
    a killed run started) before calling them unreadable."""
    nodes = select_nodes(inventory, limit)
    warning = insecure_warning(inventory, [n.hostname for n in nodes])
    if warning:
        warn(warning, as_json)
    targets = targets_for(inventory, nodes)

    with err_console.status("reading installed firmware", spinner="dots") if not as_json else _Quiet():
        installed, errors = read_installed(targets, policy_for(state_dir), settle_s=settle_s)
    return plan_firmware(inventory, nodes, installed, errors=errors, allow_downgrade=allow_downgrade)


class _Quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _plan_table(plan: FirmwarePlan) -> Table:
    """A row per node and component; a node whose firmware could not be read says so, its error below."""
    table = Table(show_edge=False, header_style="bold")
    for col in ("batch", "node", "order", "component", "installed → target", "action", "reboot"):
        table.add_column(col, no_wrap=col == "node", overflow="fold")  # hostnames whole, nothing cut
    for node in sorted(plan.nodes, key=lambda n: (n.batch is None, n.batch or 0, n.node)):
        batch = str(node.batch) if node.batch else ("blocked" if node.blocked else "-")
        if node.error:
            table.add_row(batch, node.node, "", "", "", "[red]not read[/red]", "")
            continue
        if not node.steps:
            table.add_row(batch, node.node, "", "", "", "no baseline for " + escape(node.model), "")
        for step in node.steps:
            style = ACTION_STYLE.get(step.action, "green")
            table.add_row(
                batch,
                node.node,
                str(step.order),
                step.component,
                f"{'/'.join(sorted(set(step.installed))) or '?'} → {step.target}",
                f"[{style}]{step.action}[/{style}]",
                REBOOT_WORDS[step.reboot] if step.action in FLASHED else "",
            )
    return table


def _show_plan(plan: FirmwarePlan, note: str) -> None:
    """The table, then the schedule and each problem once, wrapped at the terminal's width: the nodes whose
    firmware could not be read grouped by their error (the table only says "not read")."""
    console.print(_plan_table(plan))
    sched = plan.schedule
    console.print(
        f"{len(sched.batches)} batch(es); control planes one at a time, workers at most "
        f"{sched.budget} at once (max_unavailable {plan.policy.max_unavailable}); the rollout stops after "
        f"{plan.policy.failure_threshold} failed node(s).",
        soft_wrap=False,
    )
    for name, why in sched.blocked.items():
        console.print(f"[yellow]blocked[/yellow] {escape(name)}: {escape(why)}", soft_wrap=False)
    unread: dict[str, list[str]] = {}
    for node in plan.nodes:
        if node.error:
            unread.setdefault(node.error, []).append(node.node)
    for error, nodes in unread.items():
        console.print(f"[red]not read[/red] {escape(', '.join(nodes))}: {escape(error)}", soft_wrap=False)
    said = {f"{n.node}: {n.error}" for n in plan.nodes if n.error}
    for problem in plan.problems:
        if problem not in said:
            console.print(f"[red]problem[/red] {escape(problem)}", soft_wrap=False)
    _show_refused(plan)
    console.print(f"[dim]{note}[/dim]")


def _show_refused(plan: FirmwarePlan) -> None:
    for refused in plan.refused:
        console.print(f"[yellow]refused[/yellow] {escape(refused)}", soft_wrap=False)


DOWNGRADE = click.option(
    "--allow-downgrade",
    is_flag=True,
    help="Roll back a component installed above its baseline version (refused otherwise).",
)


@click.group("firmware")
def firmware_group() -> None:
    """Firmware against the inventory's baseline: plan, and roll it out."""


@firmware_group.command("plan")
@flags.nodes
@DOWNGRADE
@flags.json
@handle_errors()
def firmware_plan_cmd(
    inventory_path: Path, state_dir: Path, limit: str | None, allow_downgrade: bool, as_json: bool
) -> None:
    """Per node and component: installed -> target, order, reboots and batch (reads the BMCs, changes nothing)."""
    inventory = load_inventory(inventory_path)
    plan = read_plan(inventory, state_dir, limit, as_json, allow_downgrade=allow_downgrade)
    data = {"ok": not plan.problems, "applied": False, **plan.as_dict()}
    emit(data, as_json, lambda _d: _show_plan(plan, "plan only: nothing was flashed"))
    if plan.problems:
        sys.exit(EXIT_FAILED)


@firmware_group.command("apply")
@flags.nodes
@flags.plan("Show the plan; flash nothing.", "dry_run")
@click.option("--poll", type=click.FloatRange(0.05, 60), default=5.0, show_default=True, help="Seconds between polls.")
@DOWNGRADE
@flags.json
@handle_errors()
def firmware_apply_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path,
    state_dir: Path,
    limit: str | None,
    dry_run: bool,
    poll: float,
    allow_downgrade: bool,
    as_json: bool,
) -> None:
    """Roll the baseline out: control planes one at a time, workers in batches (max_unavailable).

    Per node: cordon/drain (with <state-dir>/kubeconfig, for Kubernetes nodes), Lifecycle Controller ready,
    the iDRAC first, then host components staged and applied by one reboot, BMC and OS healthy, versions
    read back, uncordon (a node that fails stays cordoned). Stops when failures reach the inventory's
    failure_threshold. Journalled under --state-dir: run it again to resume (Ctrl-C reports each node so
    far); the versions read from the BMCs decide, so a component reading at its target is never flashed
    again and one reading below it (a board swap, a rollback) is, whatever the journal says. A component
    above its target is left there unless --allow-downgrade.
    """
    inventory = load_inventory(inventory_path)
    settle_s = 0.0 if dry_run else SETTLE_S
    plan = read_plan(inventory, state_dir, limit, as_json, settle_s=settle_s, allow_downgrade=allow_downgrade)
    if dry_run:
        data = {"ok": not plan.problems, "applied": False, **plan.as_dict()}
        emit(data, as_json, lambda _d: _show_plan(plan, "dry run (--plan): nothing was flashed"))
        if plan.problems:
            sys.exit(EXIT_FAILED)
        return
    done = apply_firmware(
        inventory,
        plan,
        state_dir,
        environment_for(inventory),
        limit=limit,
        poll_s=poll,
        on_event=None if as_json else _say,
    )
    report = done.report
    if done.interrupted:
        data = {"applied": True, "run": done.run_id, "error": "interrupted (Ctrl-C)", **report.as_dict()}
        emit(data, as_json, lambda _d: _show_report(report))
        sys.exit(EXIT_INTERRUPTED)
    data = {"applied": True, "run": done.run_id, **report.as_dict(), "plan": plan.as_dict()}
    emit(data, as_json, lambda _d: _show_report(report, plan))
    if not report.ok:
        sys.exit(EXIT_FAILED)


def _say(kind: str, node: str, text: str) -> None:
    """A progress line on stderr; a failed node's error is left to the report, which says it once."""
    style = {"done": "green", "failed": "red", "batch": "bold"}.get(kind, "dim")
    said = node if kind == "failed" and node else (f"{node}: " if node else "") + text
    err_console.print(f"[{style}]{kind:7}[/{style}] {escape(said)}")


def _show_report(report: RolloutReport[FirmwareNodeOutcome], plan: FirmwarePlan | None = None) -> None:
    show_rollout(report, {"components": _components})
    if plan is not None:
        _show_refused(plan)


def _components(node: FirmwareNodeOutcome) -> str:
    return ", ".join(f"{c['component']} {c['result']}" for c in node.components) or "-"


def register(cli: click.Group) -> None:
    """Add ``firmware`` to the root group."""
    cli.add_command(firmware_group)
