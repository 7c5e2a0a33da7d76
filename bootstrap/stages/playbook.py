"""Stages that run one of the project's playbooks over SSH, through the one in-band seam.

A :class:`PlaybookStage` declares its playbook, the fact it reads back (``facts_var``) and, when a play
needs them, other nodes (:meth:`PlaybookStage.helper_hosts`: control planes for a join), which are put in
the run's limit but never moved in the journal. A run:

1. renders the Ansible inventory with :func:`bootstrap.inband.render.write_ansible_inventory` (the
   same tree ``rackctl inventory render`` writes, with the connection of :mod:`bootstrap.inband.access`
   for the run's environment);
2. runs :func:`bootstrap.ansible_driver.run_playbook`, keeping ansible-runner's artifacts under
   ``<state-dir>/ansible/runs/<run-id>-<stage>/``;
3. reports each target node: ok only when Ansible reached it and no task failed; a failed or
   unreachable host carries Ansible's message (the runner journals it as the cause). The fact named by
   ``facts_var`` is recorded in the journal and returned in the node's data.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar, cast

from bootstrap.ansible_driver import HostOutcome, PlaybookResult, run_playbook
from bootstrap.inband.render import write_ansible_inventory
from bootstrap.journal.states import NodeState, rank
from bootstrap.stages.base import (
    NodeResult,
    PlannedAction,
    RunningTaskReporter,
    Stage,
    StageContext,
    StageResult,
    TaskReporter,
)

#: what a failed run's message keeps of ansible's output
MESSAGE_LIMIT = 400
#: how a node's message starts where the play never ran on it
NOT_REACHED = "the play did not run on this node"
#: The stage that configures a node in-band (package source, networks, containerd); later stages' host
#: sides run only after it completed on the node.
NETWORK_STAGE = "network"


def host_side_targets(ctx: StageContext, nodes: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """Of ``nodes``, those a later stage's host side can run on now (installed, the network stage completed,
    reachable in-band here), and the others, each with why it does not run there."""
    excluded = ctx.options.environment.out_of_band_only(ctx.inventory)
    run: list[str] = []
    not_run: dict[str, str] = {}
    for node in nodes:
        state = ctx.state(node)
        if node in excluded:
            not_run[node] = excluded[node]
        elif rank(state) < rank(NodeState.PROVISIONED):
            not_run[node] = f"the node is not installed ({state.value})"
        elif ctx.journal.stage_done(node, NETWORK_STAGE) is None:
            not_run[node] = f"the {NETWORK_STAGE} stage has not completed on the node (run it first)"
        else:
            run.append(node)
    return run, not_run


def runs_dir(state_dir: Path) -> Path:
    """Where each playbook run's ansible-runner directory is kept: ``<state-dir>/ansible/runs``."""
    return Path(state_dir) / "ansible" / "runs"


def stage_extravars(ctx: StageContext, stage: str) -> dict[str, Any]:
    """A stage's extra Ansible variables for this run: ``RunOptions.extravars[<stage>]`` (never secrets)."""
    return dict(ctx.options.extravars.get(stage) or {})


def play(
    ctx: StageContext,
    playbook: str,
    limit: list[str],
    *,
    work_name: str,
    extravars: dict[str, Any] | None = None,
    facts_var: str | None = None,
    on_host_done: Callable[[str, bool, str], None] | None = None,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` on ``limit`` over SSH with the run's rendered Ansible inventory; ansible-runner's
    directory is kept as ``<state-dir>/ansible/runs/<run-id>-<work_name>``."""
    inventory = write_ansible_inventory(ctx.inventory, ctx.state_dir, ctx.options.environment)
    tasks = TaskProgress(ctx.progress, work_name)
    return run_playbook(
        playbook,
        inventory,
        limit=limit,
        extravars=extravars,
        facts_var=facts_var,
        on_host_done=on_host_done,
        work_dir=runs_dir(ctx.state_dir) / f"{ctx.run_id}-{work_name}",
        on_task=tasks.ended,
        on_task_start=tasks.started,
    )


class TaskProgress:
    """A playbook run's task events to a reporter, counted per host: ``started`` (host, task) as a task starts,
    ``ended`` (host, task, status) as it ends; either is None where the reporter does not show it."""

    def __init__(self, reporter: object, label: str) -> None:
        self.reporter, self.label = reporter, label
        self._done: dict[str, int] = {}
        self._lock = threading.Lock()
        self.started = self._started if isinstance(reporter, RunningTaskReporter) else None
        self.ended = self._ended if isinstance(reporter, TaskReporter) else None

    def _started(self, host: str, task: str) -> None:
        with self._lock:
            count = self._done.get(host, 0)
        cast("RunningTaskReporter", self.reporter).task_started(self.label, host, task, count)

    def _ended(self, host: str, task: str, status: str) -> None:
        with self._lock:
            self._done[host] = self._done.get(host, 0) + 1
            count = self._done[host]
        cast("TaskReporter", self.reporter).task_done(self.label, host, task, status, count)


class PlaybookStage(Stage):
    """Base class: a stage whose work is one playbook run on its nodes."""

    #: ``playbooks/<playbook>``
    playbook: ClassVar[str]
    #: the fact the play sets per host (``set_fact``) that the stage records and returns; None: none
    facts_var: ClassVar[str | None] = None

    def helper_hosts(self, ctx: StageContext) -> list[str]:
        """Other nodes the play needs (in the limit, not moved in the journal); none by default."""
        return []

    def extravars(self, ctx: StageContext) -> dict[str, Any]:
        """Extra variables of the run: :func:`stage_extravars` of this stage."""
        return stage_extravars(ctx, self.name)

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        excluded = ctx.options.environment.out_of_band_only(ctx.inventory)
        actions = [
            PlannedAction(self.name, n, f"run playbooks/{self.playbook} over SSH", skip=excluded.get(n))
            for n in ctx.nodes
        ]
        helpers = [h for h in self.helper_hosts(ctx) if h not in ctx.nodes]
        if ctx.nodes and helpers:
            actions.append(
                PlannedAction(self.name, None, f"include {', '.join(helpers)} in the play (not changed in the journal)")
            )
        return actions

    def run(self, ctx: StageContext) -> StageResult:
        self.helpers_done: dict[str, NodeResult] = {}  # how each helper host fared (not part of the result)
        excluded = ctx.options.environment.out_of_band_only(ctx.inventory)
        skipped = {
            n: NodeResult(n, ok=True, message=f"skipped, not run: {excluded[n]}") for n in ctx.nodes if n in excluded
        }
        for node, res in skipped.items():
            ctx.progress.node_done(self.name, node, res.ok, res.message)
        nodes_to_run = [n for n in ctx.nodes if n not in excluded]
        if not nodes_to_run:
            return StageResult.from_nodes(skipped, message="no node to run on in this environment")
        ctx = dataclasses.replace(ctx, nodes=nodes_to_run)
        helpers = [h for h in self.helper_hosts(ctx) if h not in ctx.nodes]
        targets = set(ctx.nodes)

        def host_done(host: str, ok: bool, message: str) -> None:
            if host in targets:
                ctx.progress.node_done(self.name, host, ok, message)

        result = play(
            ctx,
            self.playbook,
            [*ctx.nodes, *helpers],
            work_name=self.name,
            extravars=self.extravars(ctx),
            facts_var=self.facts_var,
            on_host_done=host_done,
        )
        nodes = {node: self._node_result(ctx, node, result) for node in ctx.nodes}
        self.helpers_done = {h: self._node_result(ctx, h, result, record=False) for h in helpers}
        for node, res in nodes.items():
            if node not in result.hosts:  # never reached by the play: host_done was not called for it
                ctx.progress.node_done(self.name, node, res.ok, res.message)
        done = sum(r.ok for r in nodes.values())
        where = result.artifacts or runs_dir(ctx.state_dir) / f"{ctx.run_id}-{self.name}"
        message = (
            f"playbooks/{self.playbook} (ansible {result.status}, rc {result.rc}, strategy {result.strategy}) "
            f"on {len(nodes)} node(s), {done} ok; output in {where}"
        )
        if skipped:
            message += f"; skipped {', '.join(sorted(skipped))} (not configured in-band in this environment)"
        return StageResult.from_nodes({**skipped, **nodes}, message=message)

    def _node_result(self, ctx: StageContext, node: str, result: PlaybookResult, *, record: bool = True) -> NodeResult:
        outcome: HostOutcome | None = result.hosts.get(node)
        if outcome is None:
            tail = " ".join(result.output_tail.split())[-MESSAGE_LIMIT:]
            why = f": {tail}" if tail else " (is it in the play's hosts pattern?)"
            return NodeResult(node, ok=False, message=f"{NOT_REACHED}{why}")
        data: dict[str, Any] = {"tasks_ok": outcome.ok, "changed": outcome.changed}
        if outcome.success and self.facts_var and node in result.facts:
            fact = result.facts[node]
            if record:  # a helper's facts are not journalled: it is not part of the run
                ctx.record_facts(node, {self.facts_var: fact})
            data[self.facts_var] = fact
        message = outcome.message or ("unreachable" if outcome.unreachable else "")
        return NodeResult(node, ok=outcome.success, message=message, changed=outcome.changed > 0, data=data)
