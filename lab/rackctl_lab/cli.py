"""``rackctl lab``: the emulated rack on this machine.

``lab up`` builds it all: the lab's network namespace and bridge, one libvirt VM per installable node
(qemu TCG) and one emulated iDRAC per node on loopback, driving its VM. ``lab down`` removes all of it
by PID and name. ``lab bmc up|down|status`` runs the emulated iDRACs alone (no VMs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, err_console, escape, handle_errors
from bootstrap.errors import EXIT_FAILED
from rackctl_lab import head_cli, paths
from rackctl_lab.components.cli import components_cmd
from rackctl_lab.head_cli import serve_group

lab_dir_option = head_cli.lab_dir_option(
    "--state-dir", f"Where the lab keeps its CA, PIDs and logs (${paths.ENV_VAR})."
)


@click.group("lab")
def lab_group() -> None:
    """The lab: an emulated rack on this machine (emulated iDRACs on loopback)."""


@lab_group.group("bmc")
def bmc_group() -> None:
    """Emulated iDRAC 9 BMCs, one per inventory node (sushy-tools + rackctl's iDRAC behaviour)."""


def _up_options(func: Any) -> Any:
    for option in (
        flags.json,
        lab_dir_option,
        flags.inventory,
        flags.plan("Show what would start and be written; do nothing.", dest="dry_run"),
        click.option("--latency-ms", type=click.IntRange(0, 60000), default=0, help="Added to every request."),
        click.option("--processes", type=click.IntRange(1, 64), default=None, help="Worker processes."),
    ):
        func = option(func)
    return func


@handle_errors()
def _up(
    *,
    inventory_path: Path,
    lab_dir: Path,
    dry_run: bool,
    latency_ms: int,
    processes: int | None,
    as_json: bool,
) -> None:
    from bootstrap.inventory import load_inventory  # noqa: PLC0415 - fast --help
    from rackctl_lab.bmc_lab import lab_up, plan_lab_bmcs  # noqa: PLC0415

    plan = plan_lab_bmcs(load_inventory(inventory_path))
    if dry_run:
        emit({"ok": True, "dry_run": True, **plan.as_dict()}, as_json, _show_plan)
        return
    with err_console.status(f"starting {len(plan.specs)} emulated iDRAC(s)...", spinner="dots"):
        result = lab_up(plan, lab_dir, latency_ms=latency_ms, processes=processes)
    emit(result, as_json, _show_up)


def _show_plan(data: dict[str, Any]) -> None:
    table = Table(title="Emulated iDRACs that would start")
    for col in ("node", "address", "model", "service tag", "GPUs", "NICs"):
        table.add_column(col)
    for b in data["bmcs"]:
        table.add_row(b["name"], b["address"], b["model"], b["service_tag"], b["gpus"], ", ".join(b["nics"]))
    console.print(table)
    for path in data["generate_passwords_in"]:
        console.print(f"would generate BMC passwords into {escape(path)} (mode 0600)")
    for path in data["write_ca_to"]:
        console.print(f"would write the lab CA to {escape(path)}")


def _show_up(data: dict[str, Any]) -> None:
    table = Table(title="Emulated iDRACs")
    for col in ("node", "url", "pid", "certificate SHA-256"):
        table.add_column(col)
    for b in data["bmcs"]:
        table.add_row(b["name"], b["url"], str(b["pid"]), b["fingerprint"][:23] + "...")
    console.print(table)
    console.print(f"lab CA: {escape(str(data['ca_file']))}")
    for path in data["ca_written_to"]:
        console.print(f"lab CA written to {escape(path)}")
    for path in data["passwords_written_to"]:
        console.print(f"BMC passwords generated into {escape(path)} (mode 0600)")
    for warning in data["warnings"]:
        err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}")


@handle_errors()
def _up_all(
    *,
    inventory_path: Path,
    lab_dir: Path,
    dry_run: bool,
    latency_ms: int,
    processes: int | None,
    memory_mib: int,
    as_json: bool,
) -> None:
    from bootstrap.inventory import load_inventory  # noqa: PLC0415 - fast --help
    from rackctl_lab.bmc_lab import plan_lab_bmcs  # noqa: PLC0415
    from rackctl_lab.vm_lab import lab_up_all, plan_lab_vms  # noqa: PLC0415

    inventory = load_inventory(inventory_path)
    plan = plan_lab_bmcs(inventory)
    vm_plan = plan_lab_vms(inventory, lab_dir, plan, memory_mib=memory_mib)
    if dry_run:
        emit({"ok": True, "dry_run": True, **plan.as_dict(), **vm_plan.as_dict()}, as_json, _show_full_plan)
        return
    with err_console.status(
        f"starting the lab network, {len(vm_plan.vms)} VM(s) and {len(plan.specs)} emulated iDRAC(s)...",
        spinner="dots",
    ):
        result = lab_up_all(plan, vm_plan, lab_dir, latency_ms=latency_ms, processes=processes)
    emit(result, as_json, _show_up)


def _show_full_plan(data: dict[str, Any]) -> None:
    _show_plan(data)
    console.print(
        f"would create network namespace {data['netns']} with bridge {data['bridge']} ({data['head_address']})"
    )
    for seg in data.get("segments", []):
        head = seg["address"] or "no head-side address: tagged VLAN"
        console.print(f"  and bridge {seg['bridge']} for the {seg['network']} network, MTU {seg['mtu']} ({head})")
    table = Table(title="Lab VMs that would be defined (powered off; their iDRACs power them)")
    for col in ("node", "domain", "PXE MAC", "other NICs", "memory MiB"):
        table.add_column(col)
    for vm in data["vms"]:
        nics = ", ".join(f"{n['mac']}@{n['bridge']}" for n in vm.get("nics", []))
        table.add_row(vm["node"], vm["domain"], vm["mac"], nics, str(vm["memory_mib"]))
    console.print(table)


@handle_errors()
def _down_all(*, lab_dir: Path, as_json: bool, inventory_path: Path | None = None) -> None:
    from rackctl_lab.vm_lab import lab_down_all  # noqa: PLC0415

    emit(lab_down_all(lab_dir), as_json, lambda d: console.print(escape(d["message"])))


@handle_errors()
def _down(*, lab_dir: Path, as_json: bool) -> None:
    from rackctl_lab.bmc_lab import lab_down  # noqa: PLC0415

    emit(lab_down(lab_dir), as_json, lambda d: console.print(escape(d["message"])))


@handle_errors()
def _status(*, lab_dir: Path, as_json: bool) -> None:
    from rackctl_lab.bmc_lab import lab_status  # noqa: PLC0415

    data = lab_status(lab_dir)
    emit(data, as_json, _show_status)
    if data["running"] and not data["ok"]:
        raise SystemExit(EXIT_FAILED)


def _show_status(data: dict[str, Any]) -> None:
    if not data["running"] and not data["bmcs"]:
        console.print("no emulated iDRACs are running")
        return
    table = Table(title="Emulated iDRACs")
    for col in ("node", "url", "pid", "process", "answers"):
        table.add_column(col)
    for b in data["bmcs"]:
        table.add_row(
            b["name"],
            b["url"],
            str(b["pid"]),
            "[green]alive[/green]" if b["alive"] else "[red]gone[/red]",
            "[green]yes[/green]" if b["answers"] else "[red]no[/red]",
        )
    console.print(table)


def _add_commands(group: click.Group, what: str) -> None:
    @group.command("up")
    @_up_options
    def up(**kwargs: Any) -> None:
        """Start one emulated iDRAC per inventory node on its bmc.address (loopback), detached."""
        _up(**kwargs)

    @group.command("down")
    @flags.json
    @lab_dir_option
    def down(**kwargs: Any) -> None:
        """Stop the emulated iDRACs by PID."""
        _down(**kwargs)

    @group.command("status")
    @flags.json
    @lab_dir_option
    def status(**kwargs: Any) -> None:
        """List the emulated iDRACs, their processes and whether they answer (exit 1 if one does not)."""
        _status(**kwargs)

    up.help = f"{up.help} ({what})" if what else up.help


_add_commands(bmc_group, "")


@lab_group.command("up")
@_up_options
@click.option("--memory-mib", type=click.IntRange(256, 16384), default=1024, show_default=True, help="Per VM.")
def lab_up_cmd(**kwargs: Any) -> None:
    """Build the lab: network namespace + bridge, one VM per non-head node, the emulated iDRACs driving them."""
    _up_all(**kwargs)


@lab_group.command("down")
@flags.json
@lab_dir_option
@click.option("-i", "--inventory", "inventory_path", type=click.Path(path_type=Path), default=None, hidden=True)
def lab_down_cmd(**kwargs: Any) -> None:
    """Remove the lab: iDRACs, VMs, libvirt daemons and the namespace, by PID and name; /dev/kvm restored."""
    _down_all(**kwargs)


@lab_group.command("status")
@flags.json
@lab_dir_option
def lab_status_cmd(**kwargs: Any) -> None:
    """List the emulated iDRACs and whether they answer (exit 1 if one does not)."""
    _status(**kwargs)


lab_group.add_command(serve_group)
lab_group.add_command(components_cmd)


def register(cli: click.Group) -> None:
    """Add ``rackctl lab`` to the root group."""
    cli.add_command(lab_group)
