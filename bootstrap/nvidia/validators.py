"""The checks behind ``rackctl validate-cluster``: one machine-readable result for the whole cluster.

Inputs are what the cluster reports in its documented formats: ``kubectl get nodes -o json`` (a v1
``List`` of ``Node``), per node ``nvidia-smi -q -x`` and ``lspci -n``, and DCGM exporter metrics (Prometheus
text exposition: a file, or read live per node by :mod:`bootstrap.validation.dcgm`, which says per node where
they came from or why they could not be read: :class:`DcgmSource`). Each check compares them with the inventory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from bootstrap.inventory.models import Inventory, Node
from bootstrap.nvidia.detect import NvSwitchReport
from bootstrap.nvidia.smi import SmiReport

#: MIG instances per GPU of each mig-parted config of the operator's default config (80 GB H100).
MIG_LAYOUTS_80GB: dict[str, dict[str, int]] = {
    "all-disabled": {},
    "all-enabled": {},
    "all-1g.10gb": {"1g.10gb": 7},
    "all-1g.20gb": {"1g.20gb": 4},
    "all-2g.20gb": {"2g.20gb": 3},
    "all-3g.40gb": {"3g.40gb": 2},
    "all-4g.40gb": {"4g.40gb": 1},
    "all-7g.80gb": {"7g.80gb": 1},
    "all-balanced": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
}

# One sample line of the text exposition format: name{labels} value
_SAMPLE_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL_RE = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass
class Check:
    """One check's outcome."""

    name: str
    node: str
    ok: bool
    message: str
    expected: Any = None
    actual: Any = None

    def as_dict(self) -> dict[str, Any]:
        data = {"check": self.name, "node": self.node, "ok": self.ok, "message": self.message}
        if self.expected is not None or self.actual is not None:
            data |= {"expected": self.expected, "actual": self.actual}
        return data


@dataclass
class NodeFacts:
    """What was gathered on one node (any part may be missing)."""

    smi: SmiReport | None = None
    nvswitch: NvSwitchReport | None = None
    #: which nvidia-smi gave ``smi`` (``SmiRead.source``; in words for messages: ``smi_where``), and why there is
    #: no ``smi`` where that is known
    smi_source: str = ""
    smi_where: str = ""
    smi_why: str | None = None


@dataclass(frozen=True)
class DcgmSource:
    """Where one node's DCGM exporter metrics were read (``where``, in words), or why not (``error``); ``metrics``:
    the text that node's own exporter answered (its GPUs are counted from it, whatever ``Hostname`` label the
    exporter gives its samples)."""

    where: str
    error: str | None = None
    metrics: str | None = field(default=None, repr=False)


@dataclass
class ClusterReport:
    checks: list[Check] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    #: what the workload checks ran on a live cluster (``bootstrap.validation.workloads``), when they ran
    workloads: dict[str, Any] | None = None
    #: per GPU node, the DCGM exporter read live (``bootstrap.validation.dcgm``), when it was
    dcgm: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "passed": sum(c.ok for c in self.checks),
            "failed": sum(not c.ok for c in self.checks),
            "checks": [c.as_dict() for c in self.checks],
            "skipped": self.skipped,
            **({"workloads": self.workloads} if self.workloads is not None else {}),
            **({"dcgm": self.dcgm} if self.dcgm is not None else {}),
        }


def gpu_nodes(inv: Inventory) -> list[Node]:
    """Workers that carry GPUs."""
    return [n for n in inv.workers if inv.gpus_of(n).count > 0]


def nodes_by_name(nodes_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``kubectl get nodes -o json`` -> node name -> Node object."""
    return {
        item["metadata"]["name"]: item for item in nodes_json.get("items", []) if item.get("kind", "Node") == "Node"
    }


def _ready(node: dict[str, Any]) -> tuple[bool, str]:
    for cond in node.get("status", {}).get("conditions", []):
        if cond.get("type") == "Ready":
            return cond.get("status") == "True", f"Ready={cond.get('status')} ({cond.get('reason', '')})"
    return False, "no Ready condition"


def mig_layout(inv: Inventory, node: Node) -> dict[str, int]:
    """MIG instances per GPU of ``node`` (slice profile -> count); empty when its GPUs are not partitioned."""
    profile = inv.nvidia.profile_for(node.model)
    mig = node.mig_profile or profile.mig_config or "all-disabled"
    return MIG_LAYOUTS_80GB.get(mig, {}) if profile.mig_strategy != "none" else {}


def expected_gpu_resources(inv: Inventory, node: Node) -> dict[str, int]:
    """Allocatable GPU resources the node should advertise: whole GPUs, or MIG slices per profile."""
    gpus = inv.gpus_of(node).count
    profile = inv.nvidia.profile_for(node.model)
    layout = mig_layout(inv, node)
    if not layout:
        return {"nvidia.com/gpu": gpus}
    if profile.mig_strategy == "single":
        return {"nvidia.com/gpu": gpus * sum(layout.values())}
    return {f"nvidia.com/mig-{slice_}": gpus * n for slice_, n in layout.items()}


def _quantity(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def dcgm_gpus_per_host(
    metrics_text: str, metric: str = "DCGM_FI_DEV_GPU_TEMP", *, host: str | None = None
) -> dict[str, set[str]]:
    """Hostname -> GPU indices that report ``metric`` in DCGM exporter output; with ``host``, every sample counts
    as that host's (the text of one node's own exporter)."""
    hosts: dict[str, set[str]] = {}
    for line in metrics_text.splitlines():
        match = _SAMPLE_RE.match(line.strip())
        if not match or match["name"] != metric:
            continue
        labels = {m["key"]: m["value"] for m in _LABEL_RE.finditer(match["labels"] or "")}
        name = host or labels.get("Hostname")
        if name is not None:
            hosts.setdefault(name, set()).add(labels.get("gpu", ""))
    return hosts


def validate_cluster(
    inv: Inventory,
    nodes_json: dict[str, Any],
    facts: dict[str, NodeFacts] | None = None,
    dcgm_metrics: str | None = None,
    dcgm_sources: dict[str, DcgmSource] | None = None,
) -> ClusterReport:
    """Every node Ready; GPU allocatable as the inventory says; Fabric Manager up where NVSwitches are; with
    ``dcgm_metrics``, every GPU reporting DCGM metrics (a node whose ``dcgm_sources`` entry has an error fails
    with it)."""
    report = ClusterReport()
    facts = facts or {}
    seen = nodes_by_name(nodes_json)
    for node in inv.nodes:
        obj = seen.get(node.hostname)
        if obj is None:
            report.checks.append(Check("node-ready", node.hostname, False, "not in the cluster (kubectl get nodes)"))
            continue
        ok, how = _ready(obj)
        report.checks.append(Check("node-ready", node.hostname, ok, how))
    for node in gpu_nodes(inv):
        obj = seen.get(node.hostname)
        if obj is None:
            continue
        allocatable = obj.get("status", {}).get("allocatable", {})
        for resource, expected in expected_gpu_resources(inv, node).items():
            actual = _quantity(allocatable.get(resource, "0"))
            report.checks.append(
                Check(
                    "gpu-allocatable",
                    node.hostname,
                    actual == expected,
                    f"{resource}: {actual} allocatable, inventory expects {expected}",
                    expected,
                    actual,
                )
            )
        operator = inv.nvidia.profile_for(node.model).driver == "operator"
        _fabric_manager_check(report, node, facts.get(node.hostname), operator=operator)
    if dcgm_metrics is not None:
        _dcgm_checks(report, inv, dcgm_metrics, dcgm_sources or {})
    else:
        report.skipped.append({"check": "dcgm-metrics", "why": "no DCGM exporter metrics given"})
    return report


def _dcgm_checks(report: ClusterReport, inv: Inventory, metrics: str, sources: dict[str, DcgmSource]) -> None:
    """Per GPU node: its GPUs that report DCGM metrics against the inventory's count, or why none were read."""
    per_host = dcgm_gpus_per_host(metrics)
    for node in gpu_nodes(inv):
        count = inv.gpus_of(node).count
        source = sources.get(node.hostname)
        if source is not None and source.error is not None:
            message = f"DCGM exporter metrics not read: {source.error}"
            report.checks.append(Check("dcgm-metrics", node.hostname, False, message, count, None))
            continue
        if source is not None and source.metrics is not None:  # its own exporter's answer
            reporting = len(dcgm_gpus_per_host(source.metrics, host=node.hostname).get(node.hostname, set()))
        else:
            reporting = len(per_host.get(node.hostname, set()))
        where = f" ({source.where})" if source is not None else ""
        message = f"{reporting} GPUs report DCGM metrics{where}, inventory has {count}"
        report.checks.append(Check("dcgm-metrics", node.hostname, reporting == count, message, count, reporting))


def _not_read(facts: NodeFacts, *, operator: bool) -> str:
    """Why an NVSwitch node's Fabric Manager state could not be checked (no nvidia-smi report)."""
    if facts.smi_why:
        return f"NVSwitches present, Fabric Manager state not read: {facts.smi_why}"
    if operator:
        return (
            "NVSwitches present, Fabric Manager state not read: operator-managed driver, its nvidia-smi is in the "
            "driver container (read by the nvidia stage over SSH); here give --nvidia-smi NODE=FILE with the output "
            "of `chroot /run/nvidia/driver nvidia-smi -q -x` on the node"
        )
    return "NVSwitches present but no nvidia-smi report to check: give --nvidia-smi NODE=FILE (`nvidia-smi -q -x`)"


def _fabric_manager_check(report: ClusterReport, node: Node, facts: NodeFacts | None, *, operator: bool) -> None:
    """Fabric Manager up on an NVSwitch node: every GPU's fabric state ``Completed/Success`` in nvidia-smi's
    report; ``operator``: the node's driver is the GPU Operator's (its nvidia-smi is in the driver container)."""
    if facts is None or facts.nvswitch is None:
        report.skipped.append(
            {"check": "fabric-manager", "node": node.hostname, "why": "no NVSwitch detection from this node"}
        )
        return
    if not facts.nvswitch.needs_fabric_manager:
        report.checks.append(Check("fabric-manager", node.hostname, True, "no NVSwitch: Fabric Manager not needed"))
        return
    if facts.smi is None or not facts.smi.gpus:
        why = _not_read(facts, operator=operator) if facts.smi is None else "nvidia-smi's report lists no GPU"
        report.checks.append(Check("fabric-manager", node.hostname, False, why))
        return
    waiting = [g.bus_id for g in facts.smi.gpus if not g.fabric_ready]
    states = sorted({f"{g.fabric_state}/{g.fabric_status}" for g in facts.smi.gpus})
    where = f" ({facts.smi_where})" if facts.smi_where else ""
    report.checks.append(
        Check(
            "fabric-manager",
            node.hostname,
            not waiting,
            f"every GPU registered with Fabric Manager{where}"
            if not waiting
            else f"GPUs {', '.join(waiting)} not registered with Fabric Manager (fabric state {', '.join(states)})"
            f"{where}: is nvidia-fabricmanager active at the driver's version?",
        )
    )
