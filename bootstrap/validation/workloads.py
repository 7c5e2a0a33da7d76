"""Workload checks of ``rackctl validate-cluster`` on a live cluster: GPUs that run a container, not only
GPUs that are advertised.

- **cuda-smoke**, one Job per GPU product of the inventory: ``nvidia-smi -L`` in the CUDA base image
  (:data:`CUDA_IMAGE`) with one GPU, pinned by ``nodeSelector`` to the product's ``nvidia.com/gpu.product``
  label (:func:`smoke_targets`).
- **nccl-allreduce** (``--nccl``), one Job per node whose GPUs are SXM (NVLink, with or without NVSwitch):
  nccl-tests' ``all_reduce_perf`` over every GPU of the node (:data:`NCCL_IMAGE`); its output read back with
  ``kubectl logs job/…`` and judged by :mod:`bootstrap.nvidia.nccl_tests` against a bus-bandwidth threshold.

The Jobs are applied server-side in one namespace (:func:`bootstrap.kube.apply.apply_objects`),
watched until Complete or Failed within one deadline, and deleted afterwards (propagation Background) unless
asked to keep them. Each becomes a :class:`~bootstrap.validation.report.CheckResult`; a failure says why: the
Job's Failed condition, the pod's container state, a pod the scheduler could not place (its message, such as
``Insufficient nvidia.com/gpu``), or that no Job controller started it. :func:`plan` gives the Jobs without
creating anything; :func:`validate_live` runs the read-only checks and these together (for a stage).
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bootstrap.inventory.hardware import GPU_TYPES
from bootstrap.inventory.models import Inventory, Node
from bootstrap.kube.api import KubeError, WorkloadApi
from bootstrap.kube.apply import apply_objects
from bootstrap.nvidia import nccl_tests
from bootstrap.validation.checks import (
    GpuNodeFacts,
    expected_gpu_resources,
    gpu_nodes,
    mig_layout,
    nodes_by_name,
    validate_cluster,
)
from bootstrap.validation.report import CheckResult, ClusterReport

#: The smoke Job's image. CUDA 12.2 is the newest CUDA whose containers both pinned drivers of
#: ``bootstrap.inventory.profiles`` run without forward compatibility (535.161.08 of ``dell-dvd-2024`` is the
#: 535 branch, CUDA 12.2; 580.95.05 of ``current`` runs every 12.x): the NVIDIA Container Toolkit refuses an
#: image whose ``NVIDIA_REQUIRE_CUDA`` the driver does not meet. ``base`` images carry only the CUDA runtime;
#: ``nvidia-smi`` comes from the driver, mounted by the toolkit (the image sets
#: ``NVIDIA_DRIVER_CAPABILITIES=compute,utility``). Tag: NGC catalog ``nvidia/cuda`` (also Docker Hub
#: ``nvidia/cuda``).
CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04"
#: The NCCL Job's image: NVIDIA's CUDA deep-learning base image, which installs nccl-tests built with MPI as
#: ``/usr/local/bin/*_perf_mpi`` (NVIDIA JAX-Toolbox's NCCL workflow names this tag as its example and relies on
#: those binaries; NGC PyTorch images, built on it, are used the same way). One process drives every GPU of the
#: node (``-g N``), started without ``mpirun`` (MPI singleton). CUDA 12.6 wants driver 560+; NGC's container
#: release notes allow older data-center branches (535) through CUDA forward compatibility. None of this could
#: be run here (no GPU, no registry): the first run on a site is its proof; ``--nccl-image`` replaces the image
#: (a site mirror's copy, or an image of the site's own with the same binary).
NCCL_IMAGE = "nvcr.io/nvidia/cuda-dl-base:24.11-cuda12.6-devel-ubuntu24.04"
#: all_reduce_perf in one process over every GPU of the node (``-g N``): message sizes 512 MiB to 8 GiB,
#: doubling, results checked (``-c 1``). Sizes that large measure bandwidth, not latency.
NCCL_ARGS = ("-b", "512M", "-e", "8G", "-f", "2", "-c", "1")
NCCL_BINARY = "all_reduce_perf_mpi"
#: Default threshold of the average all-reduce bus bandwidth, GB/s: far above what GPUs reach over PCIe
#: (Gen5 x16 moves about 64 GB/s each way), well below NVLink 4 (900 GB/s per H100 SXM, both ways together).
#: A node under it has a GPU talking over PCIe, a link down, or Fabric Manager not serving its NVSwitches.
DEFAULT_MIN_BUSBW = 300.0
#: Where the Jobs run (created if missing; left in place afterwards, empty).
NAMESPACE = "rackctl-validate"
CUDA_SMOKE, NCCL_ALLREDUCE = "cuda-smoke", "nccl-allreduce"
PRODUCT_LABEL = "nvidia.com/gpu.product"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Labels on every Job (and, through the template, its pods).
CHECK_LABEL, RUN_LABEL = "rackctl.io/check", "rackctl.io/validate-run"
_NAME_MAX = 63


@dataclass(frozen=True)
class Settings:
    """How the workload checks run (the CLI's options)."""

    namespace: str = NAMESPACE
    timeout_s: float = 600.0
    nccl: bool = False
    nccl_min_busbw: float = DEFAULT_MIN_BUSBW
    keep: bool = False
    cuda_image: str = CUDA_IMAGE
    nccl_image: str = NCCL_IMAGE


@dataclass(frozen=True)
class Target:
    """Where one Job runs: the check, what it is about (a GPU product or a node) and the pods' placement."""

    check: str
    subject: str
    selector: tuple[tuple[str, str], ...]
    resource: str
    count: int
    nodes: tuple[str, ...]
    tolerations: tuple[tuple[str, str, str], ...] = ()


# -- what runs where ----------------------------------------------------------------------------------------
def product_label(inv: Inventory, node: Node) -> str | None:
    """The ``nvidia.com/gpu.product`` value GPU feature discovery gives ``node``: the GPU type's label
    (:data:`bootstrap.inventory.hardware.GPU_TYPES`), with ``-MIG-<slice>`` under MIG strategy ``single`` and
    ``-SHARED`` with time-slicing (GPU Operator documentation, "GPU Feature Discovery" labels and
    "Time-Slicing GPUs in Kubernetes")."""
    gpu = GPU_TYPES.get(inv.gpus_of(node).type)
    if gpu is None:
        return None
    profile = inv.nvidia.profile_for(node.model)
    layout = mig_layout(inv, node)
    if layout and profile.mig_strategy == "single":
        return f"{gpu.label}-MIG-{sorted(layout)[0]}"
    if not layout and profile.time_slicing_replicas:
        return f"{gpu.label}-SHARED"
    return gpu.label


def _tolerations(nodes: list[Node]) -> tuple[tuple[str, str, str], ...]:
    """The inventory's taints of ``nodes`` as (key, value, effect), each once."""
    return tuple(sorted({(t.key, t.value, t.effect) for n in nodes for t in n.taints}))


def smoke_targets(inv: Inventory) -> list[Target]:
    """One cuda-smoke target per GPU product and resource: whole GPUs, or under MIG ``mixed`` a slice (the
    subject then names it: ``NVIDIA-H100-80GB-HBM3/mig-1g.10gb``)."""
    groups: dict[tuple[str, str], list[Node]] = {}
    for node in gpu_nodes(inv):
        label = product_label(inv, node)
        if label is None:
            continue
        resource = sorted(expected_gpu_resources(inv, node))[0]
        groups.setdefault((label, resource), []).append(node)
    return [
        Target(
            CUDA_SMOKE,
            label if resource == "nvidia.com/gpu" else f"{label}/{resource.removeprefix('nvidia.com/')}",
            ((PRODUCT_LABEL, label),),
            resource,
            1,
            tuple(n.hostname for n in nodes),
            _tolerations(nodes),
        )
        for (label, resource), nodes in sorted(groups.items())
    ]


def _sxm(inv: Inventory, node: Node) -> bool:
    hw = inv.hardware(node.model)
    return bool(hw and hw.nvswitch) or inv.gpus_of(node).type.endswith("-SXM")


def nccl_targets(inv: Inventory) -> tuple[list[Target], list[dict[str, str]]]:
    """One nccl-allreduce target per GPU node with SXM GPUs (all its GPUs); MIG nodes skipped, with why."""
    targets, skipped = [], []
    for node in gpu_nodes(inv):
        if not _sxm(inv, node):
            continue
        if mig_layout(inv, node):
            skipped.append(
                {"check": NCCL_ALLREDUCE, "node": node.hostname, "why": "its GPUs are MIG-partitioned: no NVLink"}
            )
            continue
        selector = ((HOSTNAME_LABEL, node.hostname),)
        count = inv.gpus_of(node).count
        targets.append(
            Target(
                NCCL_ALLREDUCE, node.hostname, selector, "nvidia.com/gpu", count, (node.hostname,), _tolerations([node])
            )
        )
    return targets, skipped


# -- the objects ----------------------------------------------------------------------------------------------
def job_name(target: Target, run_id: str) -> str:
    """``rackctl-<check>-<subject>-<run>``, a DNS label (63 characters at most)."""
    prefix = "rackctl-cuda-smoke" if target.check == CUDA_SMOKE else "rackctl-nccl"
    slug = re.sub(r"[^a-z0-9]+", "-", target.subject.lower()).strip("-")
    room = _NAME_MAX - len(prefix) - len(run_id) - 2
    return f"{prefix}-{slug[:room].strip('-')}-{run_id}"


def _container(target: Target, settings: Settings) -> dict[str, Any]:
    if target.check == CUDA_SMOKE:
        image, command = settings.cuda_image, ["nvidia-smi", "-L"]
    else:
        image, command = settings.nccl_image, [NCCL_BINARY, *NCCL_ARGS, "-g", str(target.count)]
    return {
        "name": target.check,
        "image": image,
        "command": command,
        "resources": {"limits": {target.resource: str(target.count)}},  # a quantity: SSA wants a string
    }


def job_manifest(target: Target, settings: Settings, run_id: str) -> dict[str, Any]:
    """The Job of one target: no retries, killed by the Job controller when the checks' deadline passes."""
    labels = {"app.kubernetes.io/managed-by": "rackctl", CHECK_LABEL: target.check, RUN_LABEL: run_id}
    tolerations = [
        {"key": key, "operator": "Equal", "value": value, "effect": effect}
        if value
        else {"key": key, "operator": "Exists", "effect": effect}
        for key, value, effect in target.tolerations
    ]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": dict(target.selector),
        "containers": [_container(target, settings)],
    }
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(target, run_id), "namespace": settings.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, math.ceil(settings.timeout_s)),
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def namespace_manifest(settings: Settings) -> dict[str, Any]:
    meta = {"name": settings.namespace, "labels": {"app.kubernetes.io/managed-by": "rackctl"}}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


@dataclass
class Plan:
    """The Jobs a run creates (with its run id), and the targets left out with why."""

    run_id: str
    jobs: list[tuple[Target, dict[str, Any]]]
    skipped: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self, settings: Settings) -> dict[str, Any]:
        return {
            "namespace": settings.namespace,
            "run_id": self.run_id,
            "jobs": [
                {"check": t.check, "subject": t.subject, "nodes": list(t.nodes), "job": job} for t, job in self.jobs
            ],
        }


def plan(inv: Inventory, settings: Settings, run_id: str | None = None) -> Plan:
    """The Jobs for this inventory: smoke per GPU product, NCCL per SXM node when asked. Creates nothing."""
    # a letter first: an id of hex digits only ("123456", "12e456") reads back from YAML as a number, and
    # the API server refuses a label value that is not a string (CI met it once in ~16 runs)
    run_id = run_id or f"r{secrets.token_hex(3)}"
    targets = smoke_targets(inv)
    skipped: list[dict[str, str]] = []
    if settings.nccl:
        nccl, skipped = nccl_targets(inv)
        targets += nccl
        if not nccl and not skipped:
            skipped.append({"check": NCCL_ALLREDUCE, "why": "no node with SXM GPUs in the inventory"})
    else:
        skipped.append({"check": NCCL_ALLREDUCE, "why": "not asked for (--nccl)"})
    if not targets:
        skipped.append({"check": CUDA_SMOKE, "why": "no GPU node in the inventory"})
    return Plan(run_id, [(t, job_manifest(t, settings, run_id)) for t in targets], skipped)


# -- before creating: can the Job land anywhere? ----------------------------------------------------------------
def _ready(item: dict[str, Any]) -> bool:
    conditions = item.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def unplaceable(target: Target, nodes_json: dict[str, Any]) -> str | None:
    """Why no Ready node of the cluster matches the target's selector (then the Job is not created), or None."""
    selector = dict(target.selector)
    matching = [
        item
        for item in nodes_by_name(nodes_json).values()
        if all((item.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in selector.items())
    ]
    wanted = ", ".join(f"{k}={v}" for k, v in selector.items())
    if not matching:
        hint = (
            " (GPU feature discovery sets it: is the GPU Operator running there?)"
            if PRODUCT_LABEL in selector
            else " (not joined?)"
        )
        return f"not run: no node in the cluster has {wanted}{hint}"
    if not any(_ready(item) for item in matching):
        names = ", ".join(sorted(item["metadata"]["name"] for item in matching))
        return f"not run: the nodes with {wanted} are not Ready ({names})"
    return None


# -- watching -----------------------------------------------------------------------------------------------
def _condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next(
        (
            c
            for c in job.get("status", {}).get("conditions") or []
            if c.get("type") == kind and c.get("status") == "True"
        ),
        None,
    )


def finished(job: dict[str, Any] | None) -> bool:
    return job is None or bool(_condition(job, "Complete") or _condition(job, "Failed"))


def pod_problems(pods: list[dict[str, Any]]) -> list[str]:
    """What each pod of a Job shows: not scheduled (the scheduler's message), a container waiting (image pull)
    or terminated with an error (reason, exit code, message)."""
    out = []
    for pod in pods:
        name, status = pod.get("metadata", {}).get("name", "?"), pod.get("status", {})
        phase = status.get("phase", "Pending")
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                out.append(f"pod {name} {phase}, not scheduled: {cond.get('reason', '')}: {cond.get('message', '')}")
        for container in status.get("containerStatuses") or []:
            state = container.get("state", {})
            if waiting := state.get("waiting"):
                out.append(f"pod {name} {phase}: waiting, {waiting.get('reason', '')}: {waiting.get('message', '')}")
            terminated = state.get("terminated")
            if terminated and terminated.get("exitCode", 0) != 0:
                out.append(
                    f"pod {name} {phase}: {terminated.get('reason', 'terminated')}, exit code "
                    f"{terminated.get('exitCode')}: {terminated.get('message', '').strip()}".rstrip(": ")
                )
        if phase == "Pending" and not any(name in line for line in out):
            out.append(f"pod {name} Pending")
    return out


def job_outcome(job: dict[str, Any] | None, pods: list[dict[str, Any]], timeout_s: float) -> tuple[bool, str]:
    """Whether a Job passed, and its story in one line."""
    if job is None:
        return False, "the Job is gone (deleted by someone else?)"
    where = sorted({p.get("spec", {}).get("nodeName") for p in pods if p.get("spec", {}).get("nodeName")})
    on = f" on {', '.join(where)}" if where else ""
    if _condition(job, "Complete"):
        return True, f"Complete{on}"
    problems = "; ".join(pod_problems(pods))
    if failed := _condition(job, "Failed"):
        why = f"Failed ({failed.get('reason', '')}: {failed.get('message', '')})"
        return False, why + (f"; {problems}" if problems else "")
    if problems:
        return False, f"not Complete within {timeout_s:g} s: {problems}"
    if not pods and not job.get("status", {}).get("startTime"):
        return False, (
            f"not Complete within {timeout_s:g} s: no pod created, no Job controller has started the Job "
            "(is kube-controller-manager running?)"
        )
    return False, f"not Complete within {timeout_s:g} s: {len(pods)} pod(s), none finished"


def _job_pods(api: WorkloadApi, namespace: str, name: str) -> list[dict[str, Any]]:
    try:
        return api.namespaced_objects("pods", namespace, f"job-name={name}")
    except KubeError:
        return []


def watch_jobs(
    api: WorkloadApi,
    namespace: str,
    names: list[str],
    *,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, dict[str, Any] | None], dict[str, str]]:
    """Poll the Jobs until each is Complete or Failed (or gone), or ``timeout_s`` passed: their last state, and
    for each Job whose last read failed, why. A read that fails (a loaded or restarting API server) is tried
    again at the next poll. Polls every 0.5 s at first, then less often (up to every 5 s)."""
    deadline, pause = clock() + timeout_s, 0.5
    last: dict[str, dict[str, Any] | None] = {}
    unanswered: dict[str, str] = {}
    while True:
        for name in names:
            if name not in last or not finished(last[name]):
                try:
                    last[name] = api.get_object("job", name, namespace)
                    unanswered.pop(name, None)
                except KubeError as exc:
                    unanswered[name] = exc.message
        done = sum(name in last and finished(last[name]) for name in names)
        if progress:
            progress(f"{done}/{len(names)} Jobs finished")
        if done == len(names) or clock() >= deadline:
            return last, unanswered
        sleep(min(pause, max(0.0, deadline - clock())))
        pause = min(pause * 1.5, 5.0)


# -- running ------------------------------------------------------------------------------------------------
@dataclass
class WorkloadResult:
    """The checks the Jobs gave, the targets left out, and each Job's fate."""

    checks: list[CheckResult] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    namespace: str = NAMESPACE
    run_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "run_id": self.run_id, "jobs": self.jobs}


def _judge_nccl_output(
    api: WorkloadApi, target: Target, namespace: str, name: str, settings: Settings
) -> tuple[bool, str, float | None]:
    """Judge a Complete NCCL Job by its output (``kubectl logs job/NAME``): ok, why, the average bus bandwidth."""
    try:
        text = api.logs(f"job/{name}", namespace)
    except KubeError as exc:
        return False, f"its output could not be read, so the bus bandwidth is unchecked: {exc.message}", None
    try:
        result = nccl_tests.parse(text)
    except nccl_tests.NcclOutputError as exc:
        tail = " | ".join(text.strip().splitlines()[-3:]) or "no output"
        return False, f"{exc} ({tail})", None
    ok, message = nccl_tests.judge(result, min_busbw=settings.nccl_min_busbw, gpus=target.count)
    return ok, f"all_reduce_perf on {target.count} GPUs: {message}", result.avg_busbw


def _check_message(target: Target, namespace: str, name: str, outcome: str, settings: Settings) -> str:
    if target.check == CUDA_SMOKE:
        image = settings.cuda_image
        what = f"nvidia-smi -L with 1 {target.resource} ({image})"
    else:
        what = f"{NCCL_BINARY} -g {target.count} ({settings.nccl_image})"
    return f"Job {namespace}/{name} ({what}): {outcome}"


def _judge(
    api: WorkloadApi, target: Target, name: str, job: dict[str, Any] | None, settings: Settings, *, unread: str = ""
) -> CheckResult:
    """One finished (or timed-out) Job as a :class:`CheckResult`; a Complete NCCL Job is judged by its output.
    ``unread``: why the Job's last read failed (``job`` is then its state before, None where none was read)."""
    if job is None and unread:
        ok, outcome = False, f"its state could not be read within {settings.timeout_s:g} s: {unread}"
    else:
        ok, outcome = job_outcome(job, _job_pods(api, settings.namespace, name), settings.timeout_s)
        if unread and not ok:
            outcome += f" (its last read failed: {unread})"
    expected: float | None = None
    actual: float | None = None
    if ok and target.check == NCCL_ALLREDUCE:
        expected = settings.nccl_min_busbw
        ok, detail, actual = _judge_nccl_output(api, target, settings.namespace, name, settings)
        outcome = f"{outcome}; {detail}"
    message = _check_message(target, settings.namespace, name, outcome, settings)
    return CheckResult(target.check, target.subject, ok, message, expected, actual)


def run(
    inv: Inventory,
    api: WorkloadApi,
    nodes_json: dict[str, Any],
    settings: Settings,
    *,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WorkloadResult:
    """Create the Jobs of :func:`plan` (those that can land on a Ready node), watch them, judge them, delete
    them (unless ``settings.keep``): one :class:`CheckResult` per target."""
    the_plan = plan(inv, settings)
    result = WorkloadResult(skipped=list(the_plan.skipped), namespace=settings.namespace, run_id=the_plan.run_id)
    runnable: dict[str, tuple[Target, dict[str, Any]]] = {}
    for target, job in the_plan.jobs:
        why = unplaceable(target, nodes_json)
        if why is None:
            runnable[job["metadata"]["name"]] = (target, job)
        else:
            result.checks.append(CheckResult(target.check, target.subject, False, why))
    if not runnable:
        return result
    created = list(runnable)  # until the apply answers: whatever it may have created is deleted afterwards
    try:
        if progress:
            progress(f"creating {len(runnable)} Job(s) in {settings.namespace}")
        try:
            applied = apply_objects(api, [namespace_manifest(settings), *(job for _, job in runnable.values())])
        except KubeError as exc:
            for target, _ in runnable.values():
                why = f"Job not created: {exc.message}"
                result.checks.append(CheckResult(target.check, target.subject, False, why))
            return result
        created = [name for name in runnable if f"Job/{settings.namespace}/{name}" in applied.applied]
        for name, (target, _) in runnable.items():
            if name not in created:
                why = applied.not_applied.get(f"Job/{settings.namespace}/{name}", "not applied")
                result.checks.append(CheckResult(target.check, target.subject, False, f"Job not created: {why}"))
        states, unread = watch_jobs(
            api, settings.namespace, created, timeout_s=settings.timeout_s, clock=clock, sleep=sleep, progress=progress
        )
        result.checks += [
            _judge(api, runnable[name][0], name, states.get(name), settings, unread=unread.get(name, ""))
            for name in created
        ]
    finally:
        result.jobs = _clean_up(api, settings, {name: runnable[name][0] for name in created})
    return result


def _clean_up(api: WorkloadApi, settings: Settings, created: dict[str, Target]) -> list[dict[str, Any]]:
    """Delete the created Jobs (their pods follow through the garbage collector), or keep them; what became of
    each."""
    out = []
    for name, target in created.items():
        after = "kept (--keep)"
        if not settings.keep:
            try:
                api.delete_object("job", name, settings.namespace)
                after = "deleted (propagation Background: the garbage collector removes its pods)"
            except KubeError as exc:
                after = f"not deleted: {exc.message}"
        out.append({"name": name, "check": target.check, "subject": target.subject, "after": after})
    return out


def validate_live(
    inv: Inventory,
    api: WorkloadApi,
    settings: Settings,
    *,
    facts: dict[str, GpuNodeFacts] | None = None,
    dcgm_metrics: str | None = None,
    workloads: bool = True,
    progress: Callable[[str], None] | None = None,
) -> ClusterReport:
    """``validate-cluster --kubeconfig`` as one call (for a stage, e.g. at the end of ``nvidia``): the nodes read
    live, the read-only checks, then the workload checks unless ``workloads`` is false."""
    nodes_json = {"items": api.objects("nodes")}
    report = validate_cluster(inv, nodes_json, facts, dcgm_metrics)
    if workloads:
        add_workloads(report, run(inv, api, nodes_json, settings, progress=progress))
    else:
        report.skipped.append({"check": f"{CUDA_SMOKE}, {NCCL_ALLREDUCE}", "why": "workload checks not asked for"})
    return report


def add_workloads(report: ClusterReport, result: WorkloadResult) -> None:
    """Fold a :class:`WorkloadResult` into the cluster's report."""
    report.checks += result.checks
    report.skipped += result.skipped
    report.workloads = result.as_dict()
