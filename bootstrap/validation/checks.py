"""The checks of what a live cluster reports, registered by name: ``rackctl validate-cluster`` and the nvidia
stage run them all through :func:`validate_cluster`, one machine-readable result for the whole cluster.

Inputs are what the cluster reports in its documented formats (:data:`INPUTS`): ``kubectl get nodes -o json``
(a v1 ``List`` of ``Node``), per node ``nvidia-smi -q -x`` and ``lspci -n`` (:class:`GpuNodeFacts`), and DCGM
exporter metrics (Prometheus text exposition: a file, or read live per node by :mod:`bootstrap.validation.dcgm`,
which says per node where they came from or why they could not be read: :class:`DcgmSource`). Each check
compares them with the inventory.

A check is a function ``(inputs, node) -> Iterable[CheckResult | Skipped]`` registered with :func:`check`
under a stable name (tests and users read it), with the inputs it reads and the nodes it goes over. A check
whose input was not given at all is skipped, saying so. The registry's order is the report's; checks next to
each other that go over the same nodes run node by node, so one node's results stay together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import groupby
from operator import attrgetter
from typing import Any

from bootstrap.inventory.models import Inventory, Node
from bootstrap.nvidia.detect import NvSwitchReport
from bootstrap.nvidia.smi import SmiReport
from bootstrap.validation.report import CheckResult, ClusterReport, Skipped

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

#: What a check can read (its ``reads``), in words; a check whose input was not given is skipped with
#: "no <words> given". Every check also reads the inventory.
INPUTS: dict[str, str] = {
    "nodes": "kubectl get nodes -o json",
    "nvidia-smi": "nvidia-smi -q -x report per node",
    "nvswitch": "NVSwitch detection per node (lspci -n)",
    "dcgm-metrics": "DCGM exporter metrics",
    "dcgm-sources": "where each node's DCGM exporter metrics were read",
}

# One sample line of the text exposition format: name{labels} value
_SAMPLE_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL_RE = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass
class GpuNodeFacts:
    """What was gathered on one GPU node (any part may be missing)."""

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


@dataclass(frozen=True)
class ClusterInputs:
    """What the checks read: the inventory and what the cluster reported (:data:`INPUTS`)."""

    inv: Inventory
    #: node name -> Node object (``kubectl get nodes -o json``)
    nodes: dict[str, dict[str, Any]]
    facts: dict[str, GpuNodeFacts]
    dcgm_metrics: str | None = None
    dcgm_sources: dict[str, DcgmSource] = field(default_factory=dict)

    def given(self, name: str) -> bool:
        """Whether input ``name`` was given at all (a per-node input missing on one node is its check's to say)."""
        return name != "dcgm-metrics" or self.dcgm_metrics is not None

    @cached_property
    def dcgm_per_host(self) -> dict[str, set[str]]:
        """``dcgm_metrics`` read once: Hostname -> GPU indices that report."""
        return dcgm_gpus_per_host(self.dcgm_metrics or "")


CheckFunc = Callable[[ClusterInputs, Node], Iterable[CheckResult | Skipped]]
NodeSet = Callable[[ClusterInputs], Sequence[Node]]


@dataclass(frozen=True)
class ClusterCheck:
    """A registered check: its stable name, the inputs it reads (:data:`INPUTS`), the nodes it goes over."""

    name: str
    reads: tuple[str, ...]
    over: NodeSet
    func: CheckFunc


CHECKS: dict[str, ClusterCheck] = {}


def check(name: str, *, reads: tuple[str, ...], over: NodeSet) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check under a stable name; it runs after those registered before it."""
    if not set(reads) <= INPUTS.keys():
        raise ValueError(f"check {name!r} reads an unknown input: {sorted(set(reads) - INPUTS.keys())}")

    def deco(func: CheckFunc) -> CheckFunc:
        CHECKS[name] = ClusterCheck(name, reads, over, func)
        return func

    return deco


def validate_cluster(
    inv: Inventory,
    nodes_json: dict[str, Any],
    facts: dict[str, GpuNodeFacts] | None = None,
    dcgm_metrics: str | None = None,
    dcgm_sources: dict[str, DcgmSource] | None = None,
) -> ClusterReport:
    """Every registered check: every node Ready; GPU allocatable as the inventory says; Fabric Manager up where
    NVSwitches are; with ``dcgm_metrics``, every GPU reporting DCGM metrics (a node whose ``dcgm_sources`` entry
    has an error fails with it)."""
    inputs = ClusterInputs(inv, nodes_by_name(nodes_json), facts or {}, dcgm_metrics, dcgm_sources or {})
    report = ClusterReport()
    for over, group in groupby(CHECKS.values(), key=attrgetter("over")):
        runs = []
        for registered in group:
            missing = [name for name in registered.reads if not inputs.given(name)]
            if missing:
                report.add(Skipped(registered.name, f"no {INPUTS[missing[0]]} given"))
            else:
                runs.append(registered)
        for node in over(inputs):
            for registered in runs:
                for result in registered.func(inputs, node):
                    report.add(result)
    return report


# -- the nodes a check goes over -----------------------------------------------------------------------------
def every_node(inputs: ClusterInputs) -> Sequence[Node]:
    """Every node of the inventory."""
    return inputs.inv.nodes


def every_gpu_node(inputs: ClusterInputs) -> Sequence[Node]:
    """Every GPU worker of the inventory."""
    return gpu_nodes(inputs.inv)


def gpu_nodes_in_cluster(inputs: ClusterInputs) -> Sequence[Node]:
    """The GPU workers the cluster lists."""
    return [n for n in gpu_nodes(inputs.inv) if n.hostname in inputs.nodes]


# -- the checks, in the report's order -----------------------------------------------------------------------
@check("node-ready", reads=("nodes",), over=every_node)
def node_ready(inputs: ClusterInputs, node: Node) -> Iterator[CheckResult]:
    """The node's Ready condition is True."""
    obj = inputs.nodes.get(node.hostname)
    if obj is None:
        yield CheckResult("node-ready", node.hostname, False, "not in the cluster (kubectl get nodes)")
        return
    ok, how = _ready(obj)
    yield CheckResult("node-ready", node.hostname, ok, how)


@check("gpu-allocatable", reads=("nodes",), over=gpu_nodes_in_cluster)
def gpu_allocatable(inputs: ClusterInputs, node: Node) -> Iterator[CheckResult]:
    """Each GPU resource the node should advertise (:func:`expected_gpu_resources`) is allocatable in full."""
    allocatable = inputs.nodes[node.hostname].get("status", {}).get("allocatable", {})
    for resource, expected in expected_gpu_resources(inputs.inv, node).items():
        actual = _quantity(allocatable.get(resource, "0"))
        message = f"{resource}: {actual} allocatable, inventory expects {expected}"
        yield CheckResult("gpu-allocatable", node.hostname, actual == expected, message, expected, actual)


@check("fabric-manager", reads=("nvswitch", "nvidia-smi"), over=gpu_nodes_in_cluster)
def fabric_manager(inputs: ClusterInputs, node: Node) -> Iterator[CheckResult | Skipped]:
    """Fabric Manager up on an NVSwitch node: every GPU's fabric state ``Completed/Success`` in nvidia-smi's
    report (an operator-managed driver's nvidia-smi is in the driver container)."""
    facts = inputs.facts.get(node.hostname)
    if facts is None or facts.nvswitch is None:
        yield Skipped("fabric-manager", "no NVSwitch detection from this node", node.hostname)
        return
    if not facts.nvswitch.needs_fabric_manager:
        yield CheckResult("fabric-manager", node.hostname, True, "no NVSwitch: Fabric Manager not needed")
        return
    if facts.smi is None or not facts.smi.gpus:
        operator = inputs.inv.nvidia.profile_for(node.model).driver == "operator"
        why = _not_read(facts, operator=operator) if facts.smi is None else "nvidia-smi's report lists no GPU"
        yield CheckResult("fabric-manager", node.hostname, False, why)
        return
    waiting = [g.bus_id for g in facts.smi.gpus if not g.fabric_ready]
    states = sorted({f"{g.fabric_state}/{g.fabric_status}" for g in facts.smi.gpus})
    where = f" ({facts.smi_where})" if facts.smi_where else ""
    yield CheckResult(
        "fabric-manager",
        node.hostname,
        not waiting,
        f"every GPU registered with Fabric Manager{where}"
        if not waiting
        else f"GPUs {', '.join(waiting)} not registered with Fabric Manager (fabric state {', '.join(states)})"
        f"{where}: is nvidia-fabricmanager active at the driver's version?",
    )


@check("dcgm-metrics", reads=("dcgm-metrics", "dcgm-sources"), over=every_gpu_node)
def dcgm_metrics(inputs: ClusterInputs, node: Node) -> Iterator[CheckResult]:
    """The node's GPUs that report DCGM metrics against the inventory's count, or why none were read."""
    count = inputs.inv.gpus_of(node).count
    source = inputs.dcgm_sources.get(node.hostname)
    if source is not None and source.error is not None:
        message = f"DCGM exporter metrics not read: {source.error}"
        yield CheckResult("dcgm-metrics", node.hostname, False, message, count, None)
        return
    if source is not None and source.metrics is not None:  # its own exporter's answer
        reporting = len(dcgm_gpus_per_host(source.metrics, host=node.hostname).get(node.hostname, set()))
    else:
        reporting = len(inputs.dcgm_per_host.get(node.hostname, set()))
    where = f" ({source.where})" if source is not None else ""
    message = f"{reporting} GPUs report DCGM metrics{where}, inventory has {count}"
    yield CheckResult("dcgm-metrics", node.hostname, reporting == count, message, count, reporting)


# -- what the checks read ------------------------------------------------------------------------------------
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


def _not_read(facts: GpuNodeFacts, *, operator: bool) -> str:
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
