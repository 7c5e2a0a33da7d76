"""The kubernetes and nvidia stages' Helm part: the pinned charts installed where a cluster already exists.

With ``<state-dir>/kubeconfig`` (:func:`bootstrap.kube.cluster_for`), each stage hands its releases, in install
order, to :func:`bootstrap.stages.helm_install.install_releases`: the kubernetes stage the CNI,
local-path-provisioner and kube-prometheus-stack, the nvidia stage the GPU Operator. A release whose chart is
in ``up --charts DIR`` is installed, upgraded or left unchanged by Helm, and its workloads are watched to ready
within ``up --helm-timeout`` (``RunOptions.helm.timeout_s``, default 600 s); one whose chart is not
there stays "rendered + validated, not installed: chart X VERSION not in --charts DIR".

The stage's message names what Helm did per release (release, revision). Each release's outcome (release,
chart, version, revision, values digest) is recorded on every selected node as the journal facts of
:data:`FACTS` (``{"releases": {name: ...}}``, merged with the releases recorded before, so the nvidia stage's
GPU Operator and the kubernetes stage's releases sit side by side, and a release Helm was not asked about in
this run keeps its earlier record). :func:`releases_drift` compares the inventory's releases with the newest of
those records: where one whose chart is at hand is missing, of another chart version or values, or last failed,
``up`` runs the stage again on nodes already past it (:meth:`bootstrap.stages.base.Stage.cluster_drift`),
which it would otherwise skip; where they agree, a second ``up`` still skips the stage. A release the stage
installed that the inventory no longer has is left installed, and the plan and the stage's message say so
(:func:`left_installed`).

A release that fails (Helm's error, a release in a failed or pending state, a workload not ready in time)
fails the stage on every selected node with that message; the stage's message keeps what was applied before
it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bootstrap.cluster.charts import Release
from bootstrap.cluster.helm_render import chart_source
from bootstrap.kube import KUBECONFIG, Kubectl, cluster_for
from bootstrap.stages.base import NodeResult, PlannedAction, RunOptions, StageContext, StageResult
from bootstrap.stages.cluster_inputs import cluster_inputs
from bootstrap.stages.helm_install import (
    APPLIED,
    INSTALLED,
    NOT_ATTEMPTED,
    NOT_INSTALLED,
    UNCHANGED,
    UPGRADED,
    HelmReport,
    install_releases,
    values_digest,
)

if TYPE_CHECKING:
    from bootstrap.journal.store import Journal

#: The journal's facts key the releases are recorded under (``rackctl journal show NODE``).
FACTS = "helm"


def planned(ctx: StageContext, stage: str, releases: list[Release]) -> list[PlannedAction]:
    """One cluster-wide action per release: "helm install/upgrade RELEASE (CHART VERSION) into NS", or why not."""
    charts = cluster_inputs(ctx.options.cluster).charts
    timeout = ctx.options.helm.timeout_s
    kubeconfig = ctx.state_dir / KUBECONFIG
    out = []
    for r in releases:
        what = f"helm install/upgrade {r.name} ({r.chart} {r.version}) into {r.namespace}"
        if r.install == "server-side":
            what = f"helm template {r.name} ({r.chart} {r.version}), applied server-side (no Helm release)"
        if charts is not None and chart_source(charts, r) is not None:
            text = (
                f"{what} on the cluster of {kubeconfig} (unchanged when Helm has it deployed with this version and "
                f"these values), its workloads watched to ready within {timeout:g} s"
            )
            if r.install == "server-side":
                text = f"{what} on the cluster of {kubeconfig}, its CRDs established within {timeout:g} s"
            out.append(PlannedAction(stage, None, text))
        else:
            where = f"not in --charts {charts}" if charts is not None else "not at hand (no --charts DIR)"
            text = f"{what}: not installed, chart {r.chart} {r.version} {where}"
            out.append(PlannedAction(stage, None, text, applies=False))
    left = left_installed(ctx.journal, stage, releases)
    if left:
        out.append(PlannedAction(stage, None, f"{', '.join(left)}: {LEFT_INSTALLED}", applies=False))
    return out


def recorded_releases(journal: Journal) -> dict[str, dict[str, Any]]:
    """Each release's newest record in the journal, whichever node holds it (the one of the latest run)."""
    out: dict[str, dict[str, Any]] = {}
    for node in journal.nodes():
        for name, fact in ((journal.latest_facts(node).get(FACTS) or {}).get("releases") or {}).items():
            if name not in out or int(fact.get("run") or 0) > int(out[name].get("run") or 0):
                out[name] = fact
    return out


#: The outcomes after which Helm holds a release as rackctl asked (or its objects are applied).
HELD = (INSTALLED, UPGRADED, UNCHANGED, APPLIED)
#: What rackctl does with a release it installed that the inventory no longer has.
LEFT_INSTALLED = (
    "left installed, no longer in the inventory (rackctl uninstalls nothing: `helm uninstall -n NAMESPACE "
    "RELEASE` removes one)"
)


def left_installed(journal: Journal, stage: str, releases: list[Release]) -> list[str]:
    """The releases ``stage`` installed (their newest record a good outcome) that ``releases``, the inventory's
    now, no longer has: ``RELEASE (CHART VERSION in NAMESPACE)``."""
    wanted = {r.name for r in releases}
    return sorted(
        f"{name} ({fact.get('chart')} {fact.get('version')} in {fact.get('namespace')})"
        for name, fact in recorded_releases(journal).items()
        if fact.get("stage") == stage and name not in wanted and fact.get("ok") and fact.get("status") in HELD
    )


def releases_drift(state_dir: Path, journal: Journal, options: RunOptions, releases: list[Release]) -> str | None:
    """Which of ``releases`` whose charts are at hand (``up --charts``) the journal does not record as Helm
    holding them now as the inventory wants (chart version, values digest, a good outcome), or ``None``: where
    no cluster exists yet, or no chart is at hand, a run would not change them."""
    charts = cluster_inputs(options.cluster).charts
    if charts is None or not cluster_for(state_dir).deployed:
        return None
    recorded = recorded_releases(journal)
    changes = []
    for release in releases:
        if chart_source(charts, release) is None:
            continue
        fact = recorded.get(release.name)
        if fact is None:
            changes.append(f"{release.name} ({release.chart} {release.version}) not installed by rackctl yet")
        elif fact.get("version") != release.version:
            changes.append(f"{release.name} {fact.get('version')} -> {release.version}")
        elif fact.get("values_digest") != values_digest(release.values):
            changes.append(f"{release.name}'s values changed in the inventory")
        elif not (fact.get("ok") and fact.get("status") in HELD):
            changes.append(f"{release.name} was {fact.get('status')} in run {fact.get('run')}")
    return "Helm releases to converge: " + "; ".join(changes) if changes else None


def _record(ctx: StageContext, report: HelmReport) -> dict[str, Any]:
    """Record every release's outcome on each selected node, merged with the releases recorded before: a
    release Helm was not asked about this run (chart not at hand, not attempted) keeps an earlier record."""
    ours = {o.release.name: o.as_fact() | {"stage": ctx.stage, "run": ctx.run_id} for o in report.outcomes}
    untouched = {o.release.name for o in report.outcomes if o.status in (NOT_INSTALLED, NOT_ATTEMPTED)}
    for node in ctx.nodes:
        before = (ctx.journal.latest_facts(node).get(FACTS) or {}).get("releases") or {}
        touched = {name: fact for name, fact in ours.items() if name not in untouched or name not in before}
        ctx.journal.record_facts(node, FACTS, {"releases": {**before, **touched}})
    return ours


def with_helm_releases(
    ctx: StageContext, result: StageResult, cluster: Kubectl, releases: list[Release]
) -> StageResult:
    """``result`` with ``releases`` installed by Helm on ``cluster`` (or why not); failed when one failed."""
    if not releases:
        return result
    if not result.ok:  # e.g. the API did not answer the labels' requests: that failure is the stage's message
        result.message += "; helm: not run (the stage failed before it)"
        return result
    report = install_releases(
        releases,
        kubeconfig=cluster.kubeconfig,
        api=cluster,
        charts_dir=cluster_inputs(ctx.options.cluster).charts,
        timeout_s=ctx.options.helm.timeout_s,
        log=ctx.progress.log,
    )
    left = left_installed(ctx.journal, ctx.stage, releases)  # read before this run's records
    facts = _record(ctx, report)
    text = f"helm ({cluster.reason}): {report.summary()}"
    if left:
        text += f"; {', '.join(left)}: {LEFT_INSTALLED}"
    result.message = f"{result.message}; {text}" if result.message else text
    for res in result.nodes.values():
        res.data[FACTS] = facts
    if report.ok:
        return result
    failed = report.failed[0]
    why = f"helm: {failed.label} {failed.status}" + (
        f" (revision {failed.revision})" if failed.revision is not None else ""
    )
    why += f": {failed.message}"
    for node in ctx.nodes:
        before = result.nodes.get(node)
        data = before.data if before is not None else {FACTS: facts}
        result.nodes[node] = NodeResult(node, ok=False, message=why, data=data)
    result.ok = False
    return result
