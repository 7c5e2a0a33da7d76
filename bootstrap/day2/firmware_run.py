"""``rackctl firmware apply``'s run: the rolling firmware update, journalled, drained through Kubernetes.

:func:`apply_firmware` opens one journal run, rolls :mod:`bootstrap.firmware.apply` out over the selected
nodes' BMCs with the cluster's drain gate and returns the report; Ctrl-C (or the fleet stopping on it) ends
the run ``interrupted`` with each node's result so far. The CLI reads the plan, calls this and renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bootstrap.environment import Environment
from bootstrap.firmware.apply import ApplySettings, FirmwareNodeOutcome, FirmwareRollout
from bootstrap.firmware.health import OsHealth
from bootstrap.firmware.plan import FirmwarePlan
from bootstrap.inventory.models import Inventory
from bootstrap.journal.run import journal_run
from bootstrap.journal.store import Journal
from bootstrap.kube import ClusterGate, cluster_for
from bootstrap.oob import policy_for, targets_for
from bootstrap.rollout.report import RolloutReport
from bootstrap.selection import select_nodes
from redfish_tools.fleet import FleetInterrupted


@dataclass(frozen=True)
class FirmwareRun:
    """What a firmware apply did: its journal run, the per-node report, and whether Ctrl-C stopped it."""

    run_id: int
    report: RolloutReport[FirmwareNodeOutcome]
    interrupted: bool = False


def apply_firmware(
    inventory: Inventory,
    plan: FirmwarePlan,
    state_dir: Path,
    environment: Environment,
    *,
    limit: str | None,
    poll_s: float,
    on_event: Callable[[str, str, str], None] | None = None,
) -> FirmwareRun:
    """Roll ``plan`` out over the ``limit`` nodes (all when ``None``), journalled under ``state_dir``."""
    targets = {t.name: t for t in targets_for(inventory, select_nodes(inventory, limit))}
    command = "firmware apply" + (f" --limit {limit}" if limit else "")
    with Journal(state_dir) as journal, journal_run(journal, command) as run:
        rollout = FirmwareRollout(
            inventory,
            plan,
            journal,
            run.id,
            targets,
            gate=ClusterGate(cluster_for(state_dir)),
            conn_policy=policy_for(state_dir),
            os_health=OsHealth(inventory, journal, environment),
            settings=ApplySettings(poll_s=poll_s),
            on_event=on_event,
        )
        try:
            report = rollout.run()
        except (KeyboardInterrupt, FleetInterrupted):
            report = rollout.interrupted_report(f"`rackctl {command}`")
            run.end("interrupted", report.reason)
            return FirmwareRun(run.id, report, interrupted=True)
        run.end("completed" if report.ok else "failed", report.reason)
        return FirmwareRun(run.id, report)
