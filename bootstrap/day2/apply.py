"""``rackctl apply``: reconcile the cluster with an edited inventory (plan: :mod:`bootstrap.day2.reconcile`).

Order: removed nodes first (drained and deleted from Kubernetes when it is there, the control planes only
when etcd keeps quorum, then powered off through Redfish, then recorded as removed and put in
``maintenance``), then new nodes (the pipeline, those nodes alone: ``up --limit``), then changed nodes
(only the stages their change needs, forced, grouped by the stages they need), then adopted nodes (only
recorded). Unchanged nodes are not contacted. Each node's applied sections are recorded only once the
stages they need completed, so a failed or stopped ``apply`` is resumed by running it again.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from bootstrap.day2.quorum import check_member_leaves
from bootstrap.day2.reconcile import CHANGE_STAGES, NodeChange, ReconcilePlan, classify
from bootstrap.day2.snapshot import applied_snapshots, inventory_snapshot, record_applied, record_removed
from bootstrap.errors import EXIT_FAILED, EXIT_NOT_APPLIED, EXIT_NOT_IMPLEMENTED, EXIT_OK, InvalidInput, RackctlError
from bootstrap.inventory.models import Inventory
from bootstrap.inventory.secrets import resolve_credentials
from bootstrap.journal.run import journal_run
from bootstrap.journal.states import NodeState, rank
from bootstrap.journal.store import Journal
from bootstrap.kube import Cluster
from bootstrap.oob import policy_for
from bootstrap.stages.base import STAGE_ORDER, ProgressReporter, RunOptions
from bootstrap.stages.runner import Runner, RunOutcome, Selection
from redfish_tools.connection import BmcTarget, ConnectionPolicy
from redfish_tools.fleet import run_on_bmc
from redfish_tools.power import set_power
from redfish_tools.secrets import redact

#: the journal stage name of apply's own steps (drain, delete, power off)
APPLY_STAGE = "apply"
POWER_OFF_POLICY = ConnectionPolicy(deadline_s=300.0)


def plan_apply(inventory: Inventory, state_dir: Path) -> ReconcilePlan:
    """The reconcile plan (reads the journal, contacts nothing)."""
    with Journal(state_dir, readonly=True) as journal:
        applied = applied_snapshots(journal)
        states = {n: s.state for n, s in journal.nodes().items()}
    return classify(inventory_snapshot(inventory), applied, states)


def run_apply(
    inventory: Inventory,
    state_dir: Path,
    plan: ReconcilePlan,
    *,
    cluster: Cluster,
    options: RunOptions,
    progress: ProgressReporter,
    new_stages: list[str] | None = None,
) -> dict[str, Any]:
    """Carry out ``plan``; returns per node what was done (``outcome``) and the overall ``exit_code``."""
    desired = inventory_snapshot(inventory)
    results: dict[str, dict[str, Any]] = {}
    with Journal(state_dir) as journal:
        applied = applied_snapshots(journal)
        with journal_run(journal, "apply", interrupted="") as run:
            for change in plan.of_kind("removed"):
                results[change.node] = _remove(
                    inventory,
                    journal,
                    run_id=run.id,
                    change=change,
                    applied=applied,
                    cluster=cluster,
                    progress=progress,
                )
                if results[change.node]["ok"]:  # it left etcd: later quorum checks count without it
                    applied[change.node] = {**applied[change.node], "removed": True}
            for change in plan.of_kind("adopted"):
                record_applied(journal, change.node, desired[change.node], run_id=run.id)
                results[change.node] = {"ok": True, "did": "recorded its configuration as applied (adopted)"}
            run.end("completed", f"removed {len(plan.of_kind('removed'))}")
    codes = [EXIT_OK if r["ok"] else EXIT_FAILED for r in results.values()]
    new = [c.node for c in plan.of_kind("new")]
    if new:
        stages = new_stages or list(STAGE_ORDER)
        outcome = _pipeline(
            inventory,
            state_dir,
            nodes=new,
            stages=stages,
            forced=set(),
            options=options,
            progress=progress,
            why="apply: new",
        )
        codes.append(outcome.exit_code)
        for node in new:
            done = outcome.exit_code == EXIT_OK and outcome.nodes.get(node) not in (NodeState.FAILED.value, None)
            if done:
                with Journal(state_dir) as journal:
                    record_applied(journal, node, desired[node], run_id=outcome.run_id or 0)
            results[node] = {
                "ok": done,
                "did": f"pipeline ({','.join(stages)}) run {outcome.run_id}: {outcome.message}",
                "state": outcome.nodes.get(node),
            }
    groups: dict[tuple[str, ...], list[NodeChange]] = defaultdict(list)
    for change in plan.of_kind("changed"):
        groups[tuple(change.stages)].append(change)
    for stages_key, changes in groups.items():
        codes.append(
            _apply_changed(
                inventory,
                state_dir,
                stages=list(stages_key),
                changes=changes,
                desired=desired,
                options=options,
                progress=progress,
                results=results,
            )
        )
    exit_code = max(codes, key=_severity) if codes else EXIT_OK
    return {"ok": exit_code == EXIT_OK, "exit_code": exit_code, "nodes": results}


def _severity(code: int) -> int:
    return {EXIT_OK: 0, EXIT_NOT_APPLIED: 1, EXIT_NOT_IMPLEMENTED: 1}.get(code, 2)


def _pipeline(
    inventory: Inventory,
    state_dir: Path,
    *,
    nodes: list[str],
    stages: list[str],
    forced: set[str],
    options: RunOptions,
    progress: ProgressReporter,
    why: str,
) -> RunOutcome:
    command = f"{why}: up --limit {','.join(nodes)} --stages {','.join(stages)}"
    return Runner(
        inventory, state_dir, Selection(stages, nodes, forced), options=options, progress=progress, command=command
    ).run()


def _apply_changed(
    inventory: Inventory,
    state_dir: Path,
    *,
    stages: list[str],
    changes: list[NodeChange],
    desired: dict[str, dict[str, Any]],
    options: RunOptions,
    progress: ProgressReporter,
    results: dict[str, dict[str, Any]],
) -> int:
    """Run only ``stages`` (forced) on the changed nodes; record the sections whose stages completed."""
    nodes = [c.node for c in changes]
    outcome: RunOutcome | None = None
    if stages:
        outcome = _pipeline(
            inventory,
            state_dir,
            nodes=nodes,
            stages=stages,
            forced=set(stages),
            options=options,
            progress=progress,
            why="apply: changed",
        )
    completed = {
        (s.name, n)
        for s in (outcome.stages if outcome else [])
        for n, r in s.nodes.items()
        if r.get("status") in ("completed", "skip")
    }
    with Journal(state_dir) as journal:
        previous = applied_snapshots(journal)
        for change in changes:
            done = [
                sec
                for sec in change.sections
                if sec not in change.deferred and all((st, change.node) in completed for st in CHANGE_STAGES[sec])
            ]
            if done:
                sections = {sec: desired[change.node][sec] for sec in done}
                run_id = outcome.run_id if outcome and outcome.run_id else 0
                record_applied(
                    journal, change.node, sections, run_id=run_id, previous=previous[change.node].get("sections")
                )
            pending = [sec for sec in change.sections if sec not in done]
            results[change.node] = {
                "ok": not pending or set(pending) <= set(change.deferred),
                "did": (f"stages {','.join(stages)} run {outcome.run_id}: {outcome.message}" if outcome else "nothing"),
                "applied_sections": done,
                "pending_sections": pending,
                "deferred": change.deferred,
            }
    if outcome is None:
        return EXIT_OK
    return outcome.exit_code


def _remove(
    inventory: Inventory,
    journal: Journal,
    *,
    run_id: int,
    change: NodeChange,
    applied: dict[str, dict[str, Any]],
    cluster: Cluster,
    progress: ProgressReporter,
) -> dict[str, Any]:
    """Drain and delete from Kubernetes (when there), power off, record removed; each step journalled once, but a
    Node read now is drained and deleted even where the journal has that done (the live state outranks it)."""
    node = change.node
    sections = applied[node].get("sections") or {}
    did: list[str] = []
    try:
        state = journal.state(node) if node in journal.nodes() else None
        joined = state is not None and _joined(journal, node)
        if joined and cluster.deployed:
            control_plane = (sections.get("kubernetes") or {}).get("role") in ("control-plane", "head")
            members = [n for n, rec in applied.items() if _is_cp(rec) and not rec.get("removed")]
            kube_nodes = cluster.nodes()
            if control_plane:
                check_member_leaves(node, members, {n: k.ready for n, k in kube_nodes.items()})
            known = node in kube_nodes
            # what is read outranks the journal: a Node that is there (again: its kubelet re-registered it after
            # a killed run deleted it) is drained and deleted though the journal has both done
            again: list[bool] = []
            with journal.step(run_id, node, APPLY_STAGE, "drain", force=known) as step:
                again += [step.previous is not None and step.previous.status == "completed" and known]
                if not step.already_done:
                    if known:
                        cluster.drain(node)
                    else:  # joined once, but no Node now (deleted, or its kubelet never registered it)
                        step.detail = {"skipped": "no Kubernetes node of this name"}
            etcd = "removed from etcd"
            if control_plane:
                with journal.step(run_id, node, APPLY_STAGE, "etcd-remove") as step:
                    if not step.already_done:
                        others = [m for m in members if m != node]
                        staying = [m for m in others if inventory.node(m) is not None]  # not leaving too
                        step.detail = {"etcd": cluster.remove_etcd_member(node, via=(staying or others)[0])}
                        etcd += f" ({step.detail['etcd']})"
            with journal.step(run_id, node, APPLY_STAGE, "delete-node", force=known) as step:
                again += [step.previous is not None and step.previous.status == "completed" and known]
                if not step.already_done:
                    cluster.delete_node(node)
            if any(again):
                did.append("its Node was there again though the journal had it drained and deleted")
            if known:
                did.append("drained" + (f", {etcd}" if control_plane else "") + " and deleted from Kubernetes")
            else:
                did.append(
                    "not a Kubernetes node (no Node of this name): nothing to drain"
                    + (f", {etcd}" if control_plane else "")
                )
        else:
            did.append(f"no drain: {'not joined to Kubernetes' if not joined else cluster.reason}")
        with journal.step(run_id, node, APPLY_STAGE, "power-off") as step:
            if not step.already_done:
                target = removed_target(inventory, node, sections.get("bmc") or {})
                policy = policy_for(journal.state_dir, POWER_OFF_POLICY)
                result = run_on_bmc(target, lambda conn: set_power(conn, "off").as_dict(), policy)
                if not result.ok:
                    raise RackctlError(f"power off through its BMC failed: {(result.error or {}).get('message')}")
                step.detail = {"power": result.value}
        did.append("powered off through Redfish")
        record_removed(journal, node, run_id=run_id, sections=sections)
        if state is not None and state is not NodeState.MAINTENANCE:
            journal.transition(node, NodeState.MAINTENANCE, f"removed from the inventory by apply (run {run_id})")
        progress.node_done(APPLY_STAGE, node, True, "; ".join(did))
        return {"ok": True, "did": "; ".join(did)}
    except RackctlError as exc:
        message = redact(exc.message)
        progress.node_done(APPLY_STAGE, node, False, message)
        return {"ok": False, "did": "; ".join(did), "error": message}


def _joined(journal: Journal, node: str) -> bool:
    status = journal.status(node)
    state = status.left_from() or status.state
    return rank(state) >= rank(NodeState.JOINED)


def _is_cp(record: dict[str, Any]) -> bool:
    return ((record.get("sections") or {}).get("kubernetes") or {}).get("role") in ("control-plane", "head")


def removed_target(inventory: Inventory, node: str, bmc: dict[str, Any]) -> BmcTarget:
    """The BMC of a node no longer in the inventory, from its applied snapshot (credential by name)."""
    login = bmc.get("login")
    if not bmc.get("address") or not login:
        raise InvalidInput(f"{node}: its applied snapshot has no BMC address or login; power it off by hand")
    if login not in inventory.credentials:
        raise InvalidInput(
            f"{node}: its BMC login {login!r} is no longer under credentials:; keep it until the node is removed"
        )
    creds = resolve_credentials(inventory, login)
    return BmcTarget(
        name=node,
        url="https://" + str(bmc["address"]).removeprefix("https://").rstrip("/"),
        username=creds.username,
        password=creds.password,
        ca_file=Path(bmc["ca_file"]) if bmc.get("ca_file") else None,
        fingerprint=bmc.get("fingerprint"),
        insecure=bool(bmc.get("insecure")),
    )
