"""The nvidia stage's last step: ``rackctl validate-cluster``'s checks on the live cluster, once the GPU Operator
release is deployed (installed, upgraded or unchanged by Helm in this run).

- **read-only checks**, polled (:func:`bootstrap.validation.live.poll_read_only`): every inventory node Ready,
  allocatable ``nvidia.com/gpu`` (or MIG slices) per node as the inventory says, Fabric Manager on NVSwitch nodes
  (:func:`bootstrap.validation.checks.validate_cluster`). A GPU Operator just installed needs minutes before
  its device plugin advertises the GPUs: the checks are read again (every 0.5 s at first, then up to every
  5 s) until they pass or ``up --validate-timeout`` (default 900 s) runs out. Once those pass, each GPU node's
  DCGM exporter is read too (:mod:`bootstrap.validation.dcgm`: its pod through the API server's pod proxy;
  dcgm-exporter starts after the device plugin), and polled the same way until every GPU of every GPU node
  reports DCGM metrics; each such check names the pod read, or why it could not be.
- **workload checks**, once the read-only ones pass (:func:`bootstrap.validation.workloads.run`): a CUDA
  smoke Job per GPU product, and with ``up --validate-nccl`` an NCCL all-reduce per SXM node; the Jobs get
  ``--validate-timeout`` again.

The NVSwitch detection and ``nvidia-smi -q -x`` fabric states the stage's host side recorded in the journal
(``nvidia`` facts, ``nvidia_host``) feed the fabric-manager check, so it is not skipped where the node was
looked at; on NVSwitch nodes whose driver is the GPU Operator's, the fabric states are read again over SSH on
every poll until every GPU is registered (:mod:`bootstrap.stages.nvidia.fabric`: the host side ran before the
operator). A node whose devices are emulated (the lab's VMs) is left out of it, saying so.

The report (``ClusterReport.as_dict`` plus how long it polled) becomes the stage's ``data["validation"]``
(shown under the stage in ``up --json``) and, per selected node, the journal facts of :data:`FACTS` (the
totals and the node's own checks). A failed check fails the stage: each node a failed check names (for a CUDA
smoke Job: the nodes of its GPU product) fails with the check's words; all ok adds "validated: N checks ok" to
the stage's message. Where the release is not deployed in this run (no cluster, no chart, ``up
--skip-validate``, Helm failed), the stage says "validators not run: <why>" and nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bootstrap.cluster.gpu_operator import gpu_operator
from bootstrap.cluster.helm_render import chart_source
from bootstrap.inventory.models import Inventory
from bootstrap.kube import KUBECONFIG, cluster_for
from bootstrap.kube.api import WorkloadApi
from bootstrap.nvidia.detect import NvSwitchReport
from bootstrap.nvidia.smi import HOST, Gpu, SmiRead, SmiReport
from bootstrap.stages.base import NodeResult, PlannedAction, StageContext, StageResult
from bootstrap.stages.cluster_inputs import cluster_inputs
from bootstrap.stages.helm_install import INSTALLED, UNCHANGED, UPGRADED
from bootstrap.stages.helm_releases import FACTS as HELM_FACTS
from bootstrap.stages.nvidia.fabric import FabricReader, operator_nvswitch_nodes
from bootstrap.stages.options import ValidateOptions
from bootstrap.validation.checks import GpuNodeFacts, gpu_nodes
from bootstrap.validation.live import validate_polled
from bootstrap.validation.report import ClusterReport
from bootstrap.validation.workloads import Settings, smoke_targets

#: The journal's facts key the validation is recorded under (``rackctl journal show NODE``).
FACTS = "validate"
#: Where the host side's NVSwitch detection sits in the journal: stage ``nvidia``, key ``nvidia_host``.
HOST_STAGE, HOST_VERDICT = "nvidia", "nvidia_host"
READ_ONLY = (
    "node-ready, gpu-allocatable (per MIG profile), fabric-manager (NVSwitch nodes with the operator's driver: "
    "nvidia-smi read again over SSH, playbooks/nvidia_fabric.yml), then dcgm-metrics (each GPU node's DCGM "
    "exporter pod through the API server's pod proxy)"
)


def _workloads_text(inv: Inventory, opts: ValidateOptions) -> str:
    products = ", ".join(t.subject for t in smoke_targets(inv)) or "none"
    nccl = "an NCCL all-reduce per SXM node" if opts.nccl else "no NCCL all-reduce (--validate-nccl)"
    return f"a CUDA smoke Job per GPU product ({products}) and {nccl}"


def planned(ctx: StageContext, stage: str, *, deployable: str | None) -> PlannedAction:
    """The validation step of ``plan``: what it checks and within what timeout, or why it will not run.

    ``deployable``: None when Helm would deploy the GPU Operator in this run, else why not.
    """
    inv = ctx.inventory
    opts = ctx.options.validate
    what = (
        f"validate the cluster of {ctx.state_dir / KUBECONFIG} once the GPU Operator is deployed: poll {READ_ONLY} "
        f"until they pass, within {opts.timeout_s:g} s; then {_workloads_text(inv, opts)}, within "
        f"{opts.timeout_s:g} s; a failed check fails the stage"
    )
    if deployable is not None:
        return PlannedAction(stage, None, f"validators not run: {deployable}", applies=False)
    return PlannedAction(stage, None, what, skip="--skip-validate" if opts.skip else None)


def not_deployed_why(ctx: StageContext, release_name: str | None) -> str | None:
    """Why the GPU Operator will not be deployed in this run (plan's view), or None when it will be."""
    if release_name is None:
        return "no GPU Operator release (no GPU nodes)"
    cluster = cluster_for(ctx.state_dir)
    if not cluster.deployed:
        return f"no cluster ({cluster.reason})"
    release = gpu_operator(ctx.inventory).release
    charts = cluster_inputs(ctx.options.cluster).charts
    if release is None or charts is None or chart_source(charts, release) is None:
        where = f"not in --charts {charts}" if charts is not None else "not at hand (no --charts DIR)"
        version = f"{release.chart} {release.version} " if release is not None else ""
        return f"the GPU Operator is not installed: chart {version}{where}"
    return None


# -- the inputs -----------------------------------------------------------------------------------------------
def host_facts(ctx: StageContext) -> tuple[dict[str, GpuNodeFacts], dict[str, str]]:
    """The NVSwitch detection the host side recorded per GPU node (this run or before), and the GPU nodes left
    out with why (devices emulated here)."""
    emulated = ctx.options.environment.emulated_devices(ctx.inventory)
    facts: dict[str, GpuNodeFacts] = {}
    left_out: dict[str, str] = {}
    for node in gpu_nodes(ctx.inventory):
        name = node.hostname
        if name in emulated:
            left_out[name] = f"its NVSwitches exist only out of band here ({emulated[name]})"
            continue
        verdict = (ctx.journal.latest_facts(name).get(HOST_STAGE) or {}).get(HOST_VERDICT)
        if isinstance(verdict, dict) and ("nvswitch_pci_slots" in verdict or "nvswitch_proc_devices" in verdict):
            report = NvSwitchReport(
                proc_devices=list(verdict.get("nvswitch_proc_devices") or []),
                pci_slots=list(verdict.get("nvswitch_pci_slots") or []),
            )
            smi = _smi(verdict)
            source = SmiRead(str(verdict.get("nvidia_smi_source") or (HOST if smi else "")))
            where = f"{source.where}, as the host side read it" if smi else ""
            facts[name] = GpuNodeFacts(
                nvswitch=report,
                smi=smi,
                smi_source=source.source,
                smi_where=where,
                smi_why=verdict.get("nvidia_smi_why"),
            )
    return facts, left_out


def _smi(verdict: dict[str, Any]) -> SmiReport | None:
    """The GPUs' Fabric Manager states the host side read with ``nvidia-smi -q -x``, when it could."""
    gpus = verdict.get("gpus_fabric")
    if not isinstance(gpus, list):
        return None
    fields = ("bus_id", "product", "mig_current", "fabric_state", "fabric_status")
    return SmiReport("", "", [Gpu(*(str(g.get(f, "N/A")) for f in fields)) for g in gpus])


def gpu_operator_deployed(result: StageResult, name: str) -> tuple[bool, str]:
    """Whether Helm holds ``name`` deployed in this run (installed, upgraded or unchanged), else why not:
    read from the Helm facts :func:`bootstrap.stages.helm_releases.with_helm_releases` put on the nodes."""
    for res in result.nodes.values():
        fact = (res.data.get(HELM_FACTS) or {}).get(name)
        if fact is None:
            continue
        if fact.get("ok") and fact.get("status") in (INSTALLED, UPGRADED, UNCHANGED):
            return True, ""
        status = fact.get("status", "?")
        return False, f"the GPU Operator release is {status}" + (f": {fact['message']}" if fact.get("message") else "")
    return False, "the GPU Operator release was not handed to Helm (the stage failed before it)"


# -- polling ----------------------------------------------------------------------------------------------
def validate(
    ctx: StageContext, api: WorkloadApi, opts: ValidateOptions, *, progress: Callable[[str], None]
) -> tuple[ClusterReport, dict[str, Any]]:
    """Poll the read-only checks, then (when they pass) run the workload checks: the report and how it went."""
    facts, left_out = host_facts(ctx)
    fabric = FabricReader(ctx, operator_nvswitch_nodes(ctx.inventory, facts))
    settings = Settings(timeout_s=opts.timeout_s, nccl=opts.nccl)
    return validate_polled(
        ctx.inventory,
        api,
        ctx.state_dir / KUBECONFIG,
        facts,
        settings,
        progress=progress,
        left_out=left_out,
        refresh=fabric.refresh,
    )


# -- the stage's result ----------------------------------------------------------------------------------------
def _subjects(inv: Inventory) -> dict[str, tuple[str, ...]]:
    """A check's subject -> the inventory nodes it is about (a GPU product's nodes; a node itself)."""
    out: dict[str, tuple[str, ...]] = {t.subject: t.nodes for t in smoke_targets(inv)}
    out |= {n.hostname: (n.hostname,) for n in inv.nodes}
    return out


def _record(ctx: StageContext, data: dict[str, Any], subjects: dict[str, tuple[str, ...]]) -> None:
    """Per selected node: the totals and the checks about it (journal facts :data:`FACTS`)."""
    totals = {k: data[k] for k in ("status", "ok", "passed", "failed", "polls", "waited_s", "timeout_s")}
    for node in ctx.nodes:
        own = [c for c in data["checks"] if node in subjects.get(c["node"], ())]
        ctx.journal.record_facts(node, FACTS, {**totals, "stage": ctx.stage, "run": ctx.run_id, "checks": own})


def not_run(result: StageResult, why: str) -> StageResult:
    """``result`` saying the validators did not run, and why (its data says so too)."""
    text = f"validators not run: {why}"
    result.message = f"{result.message}; {text}" if result.message else text
    result.data["validation"] = {"status": "not run", "why": why}
    return result


def with_validation(ctx: StageContext, result: StageResult, api: WorkloadApi, release_name: str) -> StageResult:
    """``result`` (the GPU Operator handed to Helm) with the cluster validated, or why the validators did not run;
    failed when a check failed."""
    opts = ctx.options.validate
    if opts.skip:
        return not_run(result, "--skip-validate")
    deployed, why = gpu_operator_deployed(result, release_name)
    if not deployed:
        return not_run(result, why)
    if not result.ok:
        return not_run(result, "the stage failed before it")
    report, how = validate(ctx, api, opts, progress=lambda text: ctx.progress.log(f"{ctx.stage}: {text}"))
    data = {"status": "ok" if report.ok else "failed", **report.as_dict(), **how}
    result.data["validation"] = data
    subjects = _subjects(ctx.inventory)
    _record(ctx, data, subjects)
    if report.ok:
        text = f"validated: {data['passed']} checks ok"
        if report.skipped:
            text += f" ({len(report.skipped)} skipped, see the stage's data)"
        result.message = f"{result.message}; {text}" if result.message else text
        return result
    failed = [c for c in report.checks if not c.ok]
    lines = [f"{c.name} {c.node}: {c.message}" for c in failed]
    result.message += f"; validation failed ({len(failed)} of {len(report.checks)} checks): " + "; ".join(lines)
    per_node = {
        node: [line for c, line in zip(failed, lines, strict=True) if node in subjects.get(c.node, ())]
        for node in ctx.nodes
    }
    if not any(per_node.values()):  # only nodes outside this run's selection, or the cluster itself
        per_node = dict.fromkeys(ctx.nodes, lines)
    for node, own in per_node.items():
        if own:
            before = result.nodes.get(node)
            result.nodes[node] = NodeResult(
                node, ok=False, message="validation failed: " + "; ".join(own), data=before.data if before else {}
            )
    result.ok = False
    return result
