"""``rackctl driver upgrade``'s run: which path executes, and the host path's journalled rolling upgrade.

:func:`driver_route` says what a ``driver upgrade`` does with its plan: patch the GPU Operator's ClusterPolicy
(``operator``, a cluster with a kubeconfig; :func:`bootstrap.day2.driver_operator.upgrade_with_operator`),
roll the host packages out (``host``, :func:`upgrade_host`), or render the plan and apply nothing
(``render``; ``plan`` with ``--plan``). :func:`upgrade_host` runs :mod:`bootstrap.day2.driver_host` in one
journal run: run it again to resume (done nodes are read and left alone); Ctrl-C ends the run
``interrupted``. The CLI parses, calls these and renders.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from bootstrap.day2.driver import DriverPlan
from bootstrap.day2.driver_host import AnsibleDriverNodes, DriverRolloutReport, HostDriverRollout
from bootstrap.environment import Environment
from bootstrap.firmware.plan import rollout_policy
from bootstrap.inventory.models import Inventory
from bootstrap.journal.run import journal_run
from bootstrap.journal.store import Journal
from bootstrap.kube import Cluster, ClusterGate, Kubectl, cluster_for
from bootstrap.stages.base import ProgressReporter
from bootstrap.stages.playbook import TaskProgress
from bootstrap.stages.runner import RedactingProgress, ensure_writable_state_dir

Route = Literal["operator", "host", "render", "plan"]


def driver_route(plan: DriverPlan, state_dir: Path, *, plan_only: bool) -> tuple[Route, Cluster | None]:
    """What ``driver upgrade`` does with ``plan``, and the cluster it reads (operator path only)."""
    if plan_only:
        return "plan", cluster_for(state_dir) if plan.path == "operator" else None
    if plan.path == "host":  # executes: drains, upgrades and reboots GPU nodes
        return "host", None
    cluster = cluster_for(state_dir)
    return ("operator" if isinstance(cluster, Kubectl) else "render"), cluster


def not_applied_reason(plan: DriverPlan, cluster: Cluster | None) -> str:
    """Why a planned upgrade was not applied (the operator path without a cluster, or ``--plan``)."""
    if plan.path == "operator" and cluster is not None:
        if cluster.deployed:
            return "--plan: only checked and planned (without --plan the GPU Operator's ClusterPolicy is changed)"
        return f"executing it needs GPUs and a Kubernetes cluster with the GPU Operator: {cluster.reason}"
    return will_reboot(plan)


def will_reboot(plan: DriverPlan) -> str:
    """What a run without ``--plan`` does to the nodes, in words (``--plan`` shows it)."""
    nodes = ", ".join(plan.steps)
    return (
        f"without --plan each GPU node not already at {plan.version} ({nodes}) is cordoned, drained, upgraded "
        f"and REBOOTED, batch by batch; a node already at {plan.version} and held is not touched"
    )


@dataclass(frozen=True)
class HostRun:
    """What the host path did: its journal run and report (none when Ctrl-C stopped it)."""

    run_id: int
    report: DriverRolloutReport | None


def progress_title(plan: DriverPlan) -> str:
    """The name the host path's progress goes under: ``driver <version>``."""
    return f"driver {plan.version}"


def upgrade_host(
    inventory: Inventory,
    plan: DriverPlan,
    state_dir: Path,
    environment: Environment,
    *,
    max_unavailable: int | str | None,
    on_event: Callable[[str, str, str], None] | None = None,
    shown: contextlib.AbstractContextManager[object] | None = None,
    tasks: ProgressReporter | None = None,
) -> HostRun:
    """Execute the host path (``shown``: the progress display held open while the rollout runs; ``tasks``: the
    reporter each playbook's tasks go to, redacted, under :func:`progress_title`)."""
    ensure_writable_state_dir(state_dir)
    settings = rollout_policy(inventory)
    policy = replace(settings, max_unavailable=max_unavailable) if max_unavailable is not None else settings
    with Journal(state_dir) as journal, journal_run(journal, f"driver upgrade --version {plan.version}") as run:
        rollout = HostDriverRollout(
            inventory,
            plan,
            journal,
            run.id,
            nodes=AnsibleDriverNodes(
                inventory,
                state_dir,
                environment,
                plan.version,
                run.id,
                tasks=TaskProgress(RedactingProgress(tasks), progress_title(plan)) if tasks else None,
            ),
            gate=ClusterGate(cluster_for(state_dir)),
            policy=policy,
            excluded=environment.out_of_band_only(inventory),
            on_event=on_event,
        )
        try:
            with shown or contextlib.nullcontext():
                report = rollout.run()
        except KeyboardInterrupt:
            run.end("interrupted", "interrupted (Ctrl-C)")
            return HostRun(run.id, None)
        run.end("completed" if report.ok else "failed", report.reason)
        return HostRun(run.id, report)
