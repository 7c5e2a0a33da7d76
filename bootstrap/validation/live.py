"""The cluster checks against a live cluster, for ``rackctl validate-cluster --kubeconfig`` and the nvidia stage.

The checks themselves: the read-only ones (node Ready, allocatable GPUs, Fabric Manager, DCGM metrics;
:func:`bootstrap.validation.checks.validate_cluster`), the DCGM exporters read through the API server
(:mod:`bootstrap.validation.dcgm`) and the workload Jobs (:mod:`bootstrap.validation.workloads`). Two ways
to run them, both here:

- **once** (``validate-cluster --kubeconfig``): :func:`read_nodes`, :func:`read_only_once` (DCGM exporters
  read live), then :func:`workloads_once`;
- **polled** (the nvidia stage, right after the GPU Operator is deployed): :func:`validate_polled` reads the
  read-only checks again until they pass or the timeout runs out (:func:`poll_read_only`), the DCGM
  exporters once the others pass, then runs the workload Jobs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.errors import EnvironmentMissing, InvalidInput, Problem
from bootstrap.inventory.models import Inventory
from bootstrap.kube import Kubectl, KubeError
from bootstrap.kube.api import WorkloadApi
from bootstrap.validation.checks import GpuNodeFacts, gpu_nodes, validate_cluster
from bootstrap.validation.dcgm import DcgmRead, DcgmReader, exporter
from bootstrap.validation.report import CheckResult, ClusterReport
from bootstrap.validation.workloads import Settings, add_workloads
from bootstrap.validation.workloads import run as run_workloads
from redfish_tools.secrets import redact

#: How long ``kubectl get nodes`` may take (``validate-cluster --kubeconfig``).
KUBECTL_TIMEOUT_S = 60


# -- once: validate-cluster --kubeconfig ----------------------------------------------------------------------
def read_nodes(kubeconfig: Path) -> Any:
    """``kubectl get nodes -o json`` with ``kubeconfig``; a clear error when kubectl is missing or fails."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise EnvironmentMissing(
            "kubectl is not installed",
            problems=[Problem("kubectl", "not on PATH", "install kubectl, or give --nodes-json FILE")],
        )
    try:
        done = subprocess.run(
            [kubectl, "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,  # kubectl must never prompt for a username
        )
    except subprocess.TimeoutExpired:
        raise InvalidInput(
            "kubectl get nodes failed",
            problems=[
                Problem("--kubeconfig", f"no answer within {KUBECTL_TIMEOUT_S} s", "check the kubeconfig and API VIP")
            ],
        ) from None
    if done.returncode != 0:
        raise InvalidInput(
            "kubectl get nodes failed",
            problems=[
                Problem("--kubeconfig", redact(done.stderr.strip()[-500:]), "check the kubeconfig and the API VIP")
            ],
        )
    return json.loads(done.stdout)


def read_only_once(
    inv: Inventory, kubeconfig: Path, nodes: dict[str, Any], facts: dict[str, GpuNodeFacts]
) -> ClusterReport:
    """The read-only checks, with each GPU node's DCGM exporter read live through the API server's pod proxy."""
    where = exporter(inv)
    if where is None:
        report = validate_cluster(inv, nodes, facts)
        report.skipped = [s for s in report.skipped if s["check"] != "dcgm-metrics"]
        report.skipped.append({"check": "dcgm-metrics", "why": "no DCGM exporter (no GPU Operator release)"})
        return report
    with DcgmReader(Kubectl(kubeconfig), kubeconfig, where) as reader:
        read = reader.read([n.hostname for n in gpu_nodes(inv)])
    report = validate_cluster(inv, nodes, facts, read.text, read.sources())
    report.dcgm = read.as_dict()
    return report


def workloads_once(
    inv: Inventory,
    kubeconfig: Path,
    nodes: dict[str, Any],
    settings: Settings,
    report: ClusterReport,
    *,
    progress: Callable[[str], None] | None = None,
) -> None:
    """The workload Jobs on the cluster of ``kubeconfig``, folded into ``report``."""
    add_workloads(report, run_workloads(inv, Kubectl(kubeconfig), nodes, settings, progress=progress))


# -- polled: the nvidia stage -----------------------------------------------------------------------------------
@dataclass
class Polled:
    """The read-only checks' last report, the nodes it read, how often and how long it polled."""

    report: ClusterReport
    nodes_json: dict[str, Any]
    polls: int
    waited_s: float
    error: str | None = None


def poll_read_only(
    inv: Inventory,
    api: WorkloadApi,
    facts: dict[str, GpuNodeFacts],
    *,
    timeout_s: float,
    progress: Callable[[str], None],
    dcgm: Callable[[], DcgmRead] | None = None,
    refresh: Callable[[dict[str, GpuNodeFacts]], dict[str, GpuNodeFacts]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Polled:
    """Read the nodes and run the read-only checks until they all pass or ``timeout_s`` passed (at least once);
    once the others pass, ``dcgm`` (when given) reads the DCGM exporters and their checks join in; ``refresh``
    (when given) reads some of ``facts`` again on every poll (:class:`bootstrap.stages.nvidia.fabric.FabricReader`).

    A read that fails (the API not answering) counts as not passing yet; the last error is kept. Progress is
    told when what fails changes, not on every poll.
    """
    start = clock()
    deadline, pause, polls = start + timeout_s, 0.5, 0
    said: tuple[str, ...] | None = None
    while True:
        polls += 1
        error = None
        now = refresh(facts) if refresh is not None else facts
        try:
            nodes_json = {"items": api.objects("nodes")}
            report = validate_cluster(inv, nodes_json, now)
            if dcgm is not None and report.ok:  # the GPUs are advertised: their exporters follow
                read = dcgm()
                report = validate_cluster(inv, nodes_json, now, read.text, read.sources())
                report.dcgm = read.as_dict()
        except KubeError as exc:
            nodes_json, report, error = {"items": []}, ClusterReport(), exc.message
        failing = tuple(f"{c.name} {c.node}" for c in report.checks if not c.ok) + ((error,) if error else ())
        if not failing:
            return Polled(report, nodes_json, polls, clock() - start)
        if clock() >= deadline:
            return Polled(report, nodes_json, polls, clock() - start, error)
        if failing != said:
            first = next((c for c in report.checks if not c.ok), None)
            example = f"{first.name} {first.node}: {first.message}" if first else error
            progress(f"validate: {len(failing)} read-only check(s) not passing yet ({example}); polling")
            said = failing
        sleep(min(pause, max(0.0, deadline - clock())))
        pause = min(pause * 1.5, 5.0)


def validate_polled(
    inv: Inventory,
    api: WorkloadApi,
    kubeconfig: Path,
    facts: dict[str, GpuNodeFacts],
    settings: Settings,
    *,
    progress: Callable[[str], None],
    left_out: dict[str, str] | None = None,
    refresh: Callable[[dict[str, GpuNodeFacts]], dict[str, GpuNodeFacts]] | None = None,
) -> tuple[ClusterReport, dict[str, Any]]:
    """Poll the read-only checks within ``settings.timeout_s``, then (when they pass) run the workload checks:
    the report and how it went (``left_out``: nodes whose Fabric Manager is not looked at, with why)."""
    left_out = left_out or {}
    where = exporter(inv)
    with contextlib.ExitStack() as stack:  # kubectl proxy, once started, stops after the polling
        dcgm = None
        if where is not None:
            reader = stack.enter_context(DcgmReader(api, kubeconfig, where))
            dcgm = functools.partial(reader.read, [n.hostname for n in gpu_nodes(inv)])
        polled = poll_read_only(
            inv, api, facts, timeout_s=settings.timeout_s, progress=progress, dcgm=dcgm, refresh=refresh
        )
    report = polled.report
    if polled.error is not None:
        why = f"the nodes could not be read: {polled.error}"
        report.checks.append(CheckResult("nodes-read", "(cluster)", False, why))
    for skip in report.skipped:
        if skip.get("check") == "fabric-manager" and skip.get("node") in left_out:
            skip["why"] = f"{skip['why']}: {left_out[skip['node']]}"
        elif skip.get("check") == "dcgm-metrics":
            skip["why"] = (
                "not read: the DCGM exporters are read once the other read-only checks pass"
                if where is not None
                else "no DCGM exporter (disabled in the GPU Operator's values)"
            )
    how = {"polls": polled.polls, "waited_s": round(polled.waited_s, 1), "timeout_s": settings.timeout_s}
    if not report.ok:
        why = f"the read-only checks did not pass within {settings.timeout_s:g} s"
        report.skipped.append({"check": "cuda-smoke, nccl-allreduce", "why": f"not run: {why}"})
        return report, how
    said: list[str] = []

    def tell(text: str) -> None:  # once per change: the Jobs' watch reports on every poll
        if not said or said[-1] != text:
            said.append(text)
            progress(f"validate: {text}")

    add_workloads(report, run_workloads(inv, api, polled.nodes_json, settings, progress=tell))
    return report, how
