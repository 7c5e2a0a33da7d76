"""``rackctl lab serve up|down|status``: the lab head node's mirror, registry and time (chronyd), detached, on
the lab bridge."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, escape, handle_errors
from rackctl_lab import paths


def lab_dir_option(flag: str, help_text: str) -> Callable[[Any], Any]:
    """``FLAG`` for the lab's directory (``lab_dir``): :data:`paths.DEFAULT`, or the :data:`paths.ENV_VAR` variable."""
    return click.option(
        flag,
        "lab_dir",
        type=click.Path(path_type=Path, file_okay=False),
        envvar=paths.ENV_VAR,
        default=paths.DEFAULT,
        show_default=True,
        help=help_text,
    )


_lab_dir_option = lab_dir_option("--lab-dir", f"The lab's directory (${paths.ENV_VAR}).")


@click.group("serve")
def serve_group() -> None:
    """The head node's site services in the lab: nginx serving `rackctl mirror build`'s repository, and
    docker-registry (TLS from the lab CA), on the head address of the lab bridge."""


@serve_group.command("up")
@flags.inventory
@flags.state_dir
@_lab_dir_option
@click.option("--no-registry", is_flag=True, help="Serve the mirror only.")
@flags.json
@handle_errors()
def serve_up(inventory_path: Path, state_dir: Path, lab_dir: Path, no_registry: bool, as_json: bool) -> None:
    """Start the mirror and the registry detached (after `rackctl lab up`); stop them with `serve down`."""
    from bootstrap.inventory import load_inventory  # noqa: PLC0415
    from rackctl_lab.environment import LabEnvironment  # noqa: PLC0415
    from rackctl_lab.head_services import LabHeadServices, recorded_pids, stop_recorded  # noqa: PLC0415

    inventory = load_inventory(inventory_path)
    network = LabEnvironment(lab_dir).network
    if recorded_pids(lab_dir):
        stop_recorded(lab_dir)
    services = LabHeadServices(inventory, state_dir, lab_dir, network, registry=not no_registry, detach=True)
    services.start()
    from rackctl_lab.head_time import LabTimeServer, recorded_time_pid, stop_recorded_time  # noqa: PLC0415

    stop_recorded_time(lab_dir)
    try:
        LabTimeServer(network, lab_dir, detach=True).start()
    except BaseException:
        stop_recorded(lab_dir)
        raise
    data = {
        "ok": True,
        "mirror": services.mirror_uri,
        "registry": None if no_registry else services.registry_address,
        "time": network.ip,
        "pids": {**recorded_pids(lab_dir), "chronyd": recorded_time_pid(lab_dir)},
    }
    emit(
        data,
        as_json,
        lambda d: console.print(
            f"mirror {escape(d['mirror'])}, registry {d['registry']}, time {d['time']} (pids {d['pids']})"
        ),
    )


@serve_group.command("down")
@_lab_dir_option
@flags.json
@handle_errors()
def serve_down(lab_dir: Path, as_json: bool) -> None:
    """Stop the lab's head services by their recorded PIDs."""
    from rackctl_lab.head_services import stop_recorded  # noqa: PLC0415
    from rackctl_lab.head_time import stop_recorded_time  # noqa: PLC0415

    stopped = stop_recorded(lab_dir)
    if (chronyd := stop_recorded_time(lab_dir)) is not None:
        stopped["chronyd"] = chronyd
    emit({"ok": True, "stopped": stopped}, as_json, lambda d: console.print(f"stopped {d['stopped'] or 'nothing'}"))


@serve_group.command("status")
@_lab_dir_option
@flags.json
@handle_errors()
def serve_status(lab_dir: Path, as_json: bool) -> None:
    """Which head services run (by recorded PID)."""
    from rackctl_lab.head_services import SERVICE_BINARIES, recorded_pids  # noqa: PLC0415
    from rackctl_lab.head_time import recorded_time_pid  # noqa: PLC0415

    pids = recorded_pids(lab_dir)
    services = {n: pids.get(n) for n in SERVICE_BINARIES}
    data: dict[str, Any] = {"ok": True, "services": {**services, "chronyd": recorded_time_pid(lab_dir)}}
    emit(data, as_json, lambda d: console.print(", ".join(f"{n}: {p or 'stopped'}" for n, p in d["services"].items())))
