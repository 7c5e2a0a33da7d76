"""``rackctl driver upgrade`` without ``--plan`` on the host path: run :mod:`bootstrap.day2.driver_host`.

Journalled under ``--state-dir`` (run it again to resume: done nodes are read and left alone), progress per
node on stderr (rich), ``--json``: the report per node. Exit 0 when every GPU node runs the version, 1 when a
node failed or could not be scheduled, 130 on Ctrl-C.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bootstrap.cli.common import emit, environment_for, err_console
from bootstrap.cli.rollout_table import show_rollout
from bootstrap.day2.driver import DriverPlan
from bootstrap.day2.driver_host import AnsibleDriverNodes, DriverNodeOutcome, DriverRolloutReport, HostDriverRollout
from bootstrap.errors import EXIT_FAILED, EXIT_INTERRUPTED, RackctlError
from bootstrap.firmware.plan import rollout_policy
from bootstrap.inventory.models import Inventory
from bootstrap.journal.store import Journal
from bootstrap.kube import ClusterGate, cluster_for
from bootstrap.stages.progress import RichProgress
from bootstrap.stages.runner import ensure_writable_state_dir


def will_reboot(plan: DriverPlan) -> str:
    """What a run without ``--plan`` does to the nodes, in words (``--plan`` shows it)."""
    nodes = ", ".join(plan.steps)
    return (
        f"without --plan each GPU node not already at {plan.version} ({nodes}) is cordoned, drained, upgraded "
        f"and REBOOTED, batch by batch; a node already at {plan.version} and held is not touched"
    )


def run_host_upgrade(
    inventory: Inventory,
    plan: DriverPlan,
    state_dir: Path,
    *,
    max_unavailable: int | str | None,
    as_json: bool,
) -> None:
    """Execute the host path; exits non-zero unless every GPU node ends at the version."""
    ensure_writable_state_dir(state_dir)
    environment = environment_for(inventory)
    settings = rollout_policy(inventory)
    policy = replace(settings, max_unavailable=max_unavailable) if max_unavailable is not None else settings
    progress = None if as_json else RichProgress(err_console)
    title = f"driver {plan.version}"

    def on_event(kind: str, node: str, text: str) -> None:
        if progress is None:
            return
        if kind == "read":
            progress.stage_started(title, list(plan.steps))
        if kind in ("done", "skip", "failed") and node:
            progress.node_done(title, node, kind != "failed", text)
        else:
            progress.log(f"{kind:8}{node + ': ' if node else ''}{text}")

    journal = Journal(state_dir)
    with journal, journal.run_lock():
        run_id = journal.begin_run(f"driver upgrade --version {plan.version}")
        rollout = HostDriverRollout(
            inventory,
            plan,
            journal,
            run_id,
            nodes=AnsibleDriverNodes(inventory, state_dir, environment, plan.version, run_id),
            gate=ClusterGate(cluster_for(state_dir)),
            policy=policy,
            excluded=environment.out_of_band_only(inventory),
            on_event=on_event,
        )
        try:
            if progress is not None:
                with progress:
                    report = rollout.run()
            else:
                report = rollout.run()
        except KeyboardInterrupt:
            journal.finish_run(run_id, "interrupted", "interrupted (Ctrl-C)")
            message = f"interrupted: run `rackctl driver upgrade --version {plan.version}` again to resume"
            emit({"ok": False, "error": message, "run": run_id}, as_json, lambda _d: err_console.print(message))
            sys.exit(EXIT_INTERRUPTED)
        except RackctlError as exc:  # e.g. the Kubernetes API not answering
            journal.finish_run(run_id, "failed", exc.message)
            raise
        journal.finish_run(run_id, "completed" if report.ok else "failed", report.reason)
    data: dict[str, Any] = {
        "applied": True,
        "status": "applied" if report.ok else "failed",
        "run": run_id,
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
