"""``rackctl redeploy NODE``: take one node out, reinstall it through provisioning, bring it back.

Steps, each journalled (stage ``redeploy``) so that a killed redeploy run again resumes instead of
starting over:

1. checks: the node is installed (``provisioned`` or later) and the environment does not provide it
   (the head node serving the installs is never reimaged); for a joined control plane, etcd keeps quorum
   without it (:mod:`bootstrap.day2.quorum`);
2. its Kubernetes labels recorded, then drain, etcd member removal (control planes) and node deletion,
   when Kubernetes is there (otherwise each is skipped, saying why);
3. the deliberate reimage: the node's journal state moves back to ``provisioning`` (a forced move that
   starts a new lifecycle epoch, so the provision stage's install step runs again, once);
4. the implemented stages from ``provision`` on, for this node alone (``up`` stops at the first stage not
   implemented yet, exit 4, and says so; stages that only render and validate end it with exit 5, said too);
5. the recorded labels restored once its Kubernetes node is back; while it is not (its kubelet has not
   registered it again), the labels stay recorded, the redeploy stays open and says so, and running it
   again restores them (it resumes: nothing is reinstalled).

The redeploy marker (facts of stage ``redeploy``: ``started`` with the epoch it began in) is what makes a
second run resume: while it says ``started`` the reimage move is not made again once the epoch moved on,
and the provision stage's journalled install step is not repeated. What is read outranks the journal
before the reimage: a Node that is there again is drained and deleted again though the journal has both
done (``LIVE_STEPS``); after it, the journal keeps the rejoined node from being drained or deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bootstrap.day2.quorum import QuorumCheck, check_member_leaves
from bootstrap.errors import EXIT_OK, InvalidInput, Problem
from bootstrap.inventory.models import Inventory, Node
from bootstrap.journal.run import journal_run
from bootstrap.journal.states import NodeState, rank
from bootstrap.journal.store import Journal
from bootstrap.kube import Cluster, user_labels
from bootstrap.stages.base import STAGE_ORDER, ProgressReporter, RunOptions
from bootstrap.stages.runner import Runner, Selection

REDEPLOY_STAGE = "redeploy"
#: the steps the Node read at the start of a run decides over the journal (before the reimage): a removed
#: etcd member cannot come back by itself, so etcd-remove keeps to the journal (and reads membership itself)
LIVE_STEPS = ("drain", "delete-node")
#: the stages a reinstalled node is brought through (``up`` stops at the first one not implemented yet)
STAGES_AFTER: tuple[str, ...] = STAGE_ORDER[STAGE_ORDER.index("provision") :]


def stages_after(until: str | None = None) -> tuple[str, ...]:
    """The stages from ``provision`` on, up to and including ``until`` (every one when None)."""
    if until is None:
        return STAGES_AFTER
    if until not in STAGES_AFTER:
        raise InvalidInput(
            f"--until {until!r} is not a stage a reinstalled node goes through",
            problems=[Problem("--until", f"{until!r} is not one of them", f"choose one of: {', '.join(STAGES_AFTER)}")],
        )
    return STAGES_AFTER[: STAGES_AFTER.index(until) + 1]


@dataclass
class RedeployPlan:
    """What ``redeploy`` will do, step by step: ``(step, what, skip reason or None)``."""

    node: str
    resuming: bool
    steps: list[tuple[str, str, str | None]] = field(default_factory=list)
    quorum: QuorumCheck | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "resuming": self.resuming,
            "steps": [{"step": s, "action": a, "skip": k} for s, a, k in self.steps],
            "quorum": None
            if self.quorum is None
            else {
                "members": self.quorum.members,
                "healthy_after": self.quorum.healthy_after,
                "quorum_after": self.quorum.quorum_after,
            },
        }


def marker(journal: Journal, node: str) -> dict[str, Any] | None:
    """The node's redeploy in progress (``status: started``), if any."""
    record = journal.latest_facts(node).get(REDEPLOY_STAGE)
    return record if record and record.get("status") == "started" else None


def joined_control_planes(inventory: Inventory, journal: Journal) -> list[str]:
    """Control planes whose journal state says they joined Kubernetes (their etcd members)."""
    states = journal.nodes()
    out = []
    for node in inventory.control_planes:
        status = states.get(node.hostname)
        if status is not None and rank(status.left_from() or status.state) >= rank(NodeState.JOINED):
            out.append(node.hostname)
    return out


def plan_redeploy(
    inventory: Inventory,
    state_dir: Path,
    hostname: str,
    cluster: Cluster,
    options: RunOptions,
    *,
    until: str | None = None,
) -> RedeployPlan:
    """Check that ``hostname`` may be redeployed now and list the steps (reads only)."""
    node = _node(inventory, hostname)
    if hostname in options.environment.preinstalled(inventory):
        raise InvalidInput(
            f"{hostname} is provided by the {options.environment.name} environment and is never reinstalled",
            problems=[Problem(f"nodes.{hostname}", "installed already (it serves the installs)", "pick another node")],
        )
    with Journal(state_dir, readonly=True) as journal:
        known = journal.nodes()
        if hostname not in known:
            raise InvalidInput(
                f"{hostname} is not in the journal: it was never installed; `rackctl up --limit {hostname}` installs it"
            )
        status = known[hostname]
        ongoing = marker(journal, hostname)
        state = status.left_from() or status.state
        if ongoing is None and rank(state) < rank(NodeState.PROVISIONED):
            raise InvalidInput(
                f"{hostname} is {status.state.value}: not installed yet, so there is nothing to redeploy",
                problems=[Problem(f"nodes.{hostname}", status.state.value, f"run `rackctl up --limit {hostname}`")],
            )
        joined = rank(state) >= rank(NodeState.JOINED)
        members = joined_control_planes(inventory, journal)
    plan = RedeployPlan(hostname, resuming=ongoing is not None)
    k8s = cluster.deployed and joined
    why_not = "not joined to Kubernetes" if not joined else cluster.reason
    if node.is_control_plane and k8s:
        ready = {name: kn.ready for name, kn in cluster.nodes().items()}
        plan.quorum = check_member_leaves(hostname, members, ready)
    plan.steps.append(("record-labels", "record its Kubernetes labels", None if k8s else why_not))
    plan.steps.append(("drain", "cordon and drain it", None if k8s else why_not))
    if node.is_control_plane:
        plan.steps.append(("etcd-remove", "remove its etcd member", None if k8s else why_not))
    plan.steps.append(("delete-node", "delete its Kubernetes node object", None if k8s else why_not))
    reimaged = ongoing is not None and _epoch_moved(journal_epoch(state_dir, hostname), ongoing)
    plan.steps.append(
        (
            "reimage",
            "mark it for reinstall (journal: back to provisioning, a new epoch)",
            "done by the redeploy in progress" if reimaged else None,
        )
    )
    plan.steps.append(("stages", f"bring it through {', '.join(stages_after(until))} (up --limit {hostname})", None))
    # a resumed redeploy restores what the first run recorded, though the node is no longer "joined" by then
    recorded = bool(ongoing and ongoing.get("labels"))
    restore_skip = None if (k8s or (recorded and cluster.deployed)) else (cluster.reason if recorded else why_not)
    plan.steps.append(("restore-labels", "restore the recorded labels once its node is back", restore_skip))
    return plan


def journal_epoch(state_dir: Path, node: str) -> int:
    with Journal(state_dir, readonly=True) as journal:
        return journal.status(node).epoch


def _epoch_moved(epoch: int, ongoing: dict[str, Any]) -> bool:
    return epoch > int(ongoing.get("epoch", epoch))


def _node(inventory: Inventory, hostname: str) -> Node:
    node = inventory.node(hostname)
    if node is None:
        names = ", ".join(n.hostname for n in inventory.nodes)
        raise InvalidInput(
            f"node {hostname!r} is not in the inventory",
            problems=[Problem("NODE", repr(hostname), f"one of: {names}")],
        )
    return node


def run_redeploy(
    inventory: Inventory,
    state_dir: Path,
    plan: RedeployPlan,
    *,
    cluster: Cluster,
    options: RunOptions,
    progress: ProgressReporter,
    until: str | None = None,
) -> dict[str, Any]:
    """Carry out ``plan`` (see the module docstring); returns what was done and the exit code."""
    hostname = plan.node
    skip = {step: reason for step, _, reason in plan.steps}
    did: list[str] = []
    with Journal(state_dir) as journal, journal_run(journal, f"redeploy {hostname}") as run:
        run_id = run.id
        ongoing = marker(journal, hostname)
        status = journal.status(hostname)
        if ongoing is None:
            labels: dict[str, str] = {}
            if skip["record-labels"] is None:
                current = cluster.nodes().get(hostname)
                labels = user_labels(current.labels) if current else {}
            ongoing = {"status": "started", "epoch": status.epoch, "run": run_id, "labels": labels}
            journal.record_facts(hostname, REDEPLOY_STAGE, ongoing)
            did.append(f"recorded {len(labels)} label(s)" if skip["record-labels"] is None else "no labels to record")
        else:
            did.append(f"resumed the redeploy started by run {ongoing.get('run')}")
        present = skip["drain"] is None and hostname in cluster.nodes()
        # the live cluster outranks the journal while the node is not reimaged yet: a Node that is there
        # again (a kubelet still running re-registered it after a killed run deleted it) is drained and
        # deleted again; after the reimage, the journal keeps the rejoined node's Node from being touched
        reimaged = status.epoch != int(ongoing["epoch"])
        for step, action in (
            ("drain", lambda: cluster.drain(hostname)),
            ("etcd-remove", lambda: cluster.remove_etcd_member(hostname, via=_peer(inventory, hostname))),
            ("delete-node", lambda: cluster.delete_node(hostname)),
        ):
            if step not in skip:
                continue
            if skip[step] is not None:
                did.append(f"{step}: skipped ({skip[step]})")
                continue
            if step == "drain" and not present:  # joined once, but no Node now: nothing to drain
                did.append(f"drain: skipped (no Kubernetes node {hostname})")
                continue
            said = None
            live = step in LIVE_STEPS and present and not reimaged
            with journal.step(run_id, hostname, REDEPLOY_STAGE, f"{step}-{ongoing['epoch']}", force=live) as handle:
                if not handle.already_done:
                    said = action()
                    if said:
                        handle.detail = {"result": said}
            if live and handle.previous is not None and handle.previous.status == "completed":
                again = f"again: the journal had it done, but the Node {hostname} is there"
                said = f"{again}; {said}" if said else again
            did.append(f"{step} ({said})" if said else step)
        if journal.status(hostname).epoch == int(ongoing["epoch"]):
            journal.transition(
                hostname,
                NodeState.PROVISIONING,
                f"redeploy (run {run_id}): deliberate reimage by `rackctl redeploy {hostname}`",
                run_id=run_id,
                force=True,
            )
            did.append("marked for reinstall (new epoch)")
        run.end("completed", f"{hostname} taken out and marked for reinstall")
    progress.log(f"{hostname}: {'; '.join(did)}")
    outcome = Runner(
        inventory,
        state_dir,
        Selection(list(stages_after(until)), [hostname], set()),
        options=options,
        progress=progress,
        command=f"redeploy {hostname}: up --limit {hostname}",
    ).run()
    result: dict[str, Any] = {
        "ok": outcome.ok,
        "node": hostname,
        "did": did,
        "run": outcome.as_dict(),
        "exit_code": outcome.exit_code,
        "state": outcome.nodes.get(hostname),
    }
    # not_implemented / not_applied: every stage rackctl can apply ran; the rest stopped or only rendered
    if outcome.exit_code != EXIT_OK and outcome.status not in ("not_implemented", "not_applied"):
        result["message"] = f"redeploy of {hostname} stopped: {outcome.message}; run it again to resume"
        return result
    labels = dict(ongoing.get("labels") or {})
    pending = ""
    if labels and skip["restore-labels"] is None and cluster.deployed:
        if hostname in cluster.nodes():
            cluster.label(hostname, labels)
            did.append(f"restored {len(labels)} label(s)")
        else:  # its kubelet has not registered it again yet: keep the labels, and this redeploy open
            pending = (
                f"its {len(labels)} recorded label(s) are not restored yet: {hostname} is not a Kubernetes node "
                f"again (its kubelet registers it when it rejoins); run `rackctl redeploy {hostname}` again once "
                f"it is back to restore them (it resumes: nothing is reinstalled)"
            )
            did.append(f"labels pending: {hostname} has not rejoined Kubernetes yet")
            result["labels_pending"] = labels
    if not pending:
        with Journal(state_dir) as journal:
            # through every implemented stage: this redeploy is over (a later one reimages again)
            journal.record_facts(hostname, REDEPLOY_STAGE, {**ongoing, "status": "completed"})
    if outcome.status == "not_implemented":
        result["message"] = (
            f"{hostname} reinstalled and brought through the implemented stages; {outcome.message}; "
            f"`rackctl up --limit {hostname}` continues once those stages exist"
        )
    elif outcome.status == "not_applied":
        result["message"] = (
            f"{hostname} reinstalled and brought through the stages rackctl applies; {outcome.message}; "
            f"`rackctl up --limit {hostname}` applies the rest once those stages can"
        )
    else:
        result["message"] = f"{hostname} redeployed"
    if pending:
        result["message"] += f"; {pending}"
    return result


def _peer(inventory: Inventory, hostname: str) -> str:
    """Another control plane, whose etcd removes this one's member."""
    for node in inventory.control_planes:
        if node.hostname != hostname:
            return node.hostname
    raise InvalidInput(f"{hostname} is the only control plane; there is no other etcd member to act through")
