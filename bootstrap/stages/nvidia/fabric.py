"""The nvidia stage's validation: the Fabric Manager state of NVSwitch nodes whose driver is the GPU Operator's,
read again over SSH.

The stage's host side (``playbooks/nvidia_host.yml``) runs before Helm installs the GPU Operator in the same
stage, so on such a node the fabric states it recorded predate the operator's driver container (which runs the
driver, its ``nvidia-smi`` and nvidia-fabricmanager). :class:`FabricReader` runs ``playbooks/nvidia_fabric.yml``
(role ``nvidia_host``, ``tasks/smi.yml``: the host's ``nvidia-smi``, else ``chroot /run/nvidia/driver nvidia-smi
-q -x``) on those nodes on each poll of the read-only checks, until every GPU of the node is registered with
Fabric Manager. A node it cannot reach in-band here keeps the host side's record only where that was read from
the operator's driver container (an earlier run's); otherwise its check says why the state was not read.
"""

from __future__ import annotations

import dataclasses

from bootstrap.ansible_driver import PlaybookResult
from bootstrap.inventory.models import Inventory
from bootstrap.nvidia.smi import OPERATOR, read_from_role
from bootstrap.stages.base import StageContext
from bootstrap.stages.playbook import host_side_targets, play, stage_extravars
from bootstrap.validation.checks import GpuNodeFacts, gpu_nodes

#: The play, and the fact it returns per node (role ``nvidia_host``'s ``tasks/smi.yml``).
FABRIC_PLAYBOOK = "nvidia_fabric.yml"
FABRIC_FACTS = "nvidia_host_smi_report"
#: Where, in words, a state read by :class:`FabricReader` came from.
READ_NOW = "read over SSH at validation"


def operator_driver(inv: Inventory, model: str) -> bool:
    """Whether the nodes of ``model`` get their driver from the GPU Operator's driver container."""
    return inv.nvidia.profile_for(model).driver == "operator"


def operator_nvswitch_nodes(inv: Inventory, facts: dict[str, GpuNodeFacts]) -> list[str]:
    """The GPU nodes of ``facts`` with NVSwitches detected whose driver is the GPU Operator's."""
    return [
        node.hostname
        for node in gpu_nodes(inv)
        if (got := facts.get(node.hostname)) is not None
        and got.nvswitch is not None
        and got.nvswitch.needs_fabric_manager
        and operator_driver(inv, node.model)
    ]


class FabricReader:
    """Reads the Fabric Manager state of ``nodes`` (NVSwitch nodes with the operator's driver) over SSH, each
    until all its GPUs are registered, with the stage's extra variables (those its host side gets)."""

    def __init__(self, ctx: StageContext, nodes: list[str]) -> None:
        self.ctx = ctx
        self.extravars = stage_extravars(ctx, ctx.stage)
        self.targets, self.unreachable = host_side_targets(ctx, nodes)
        self.reads = 0
        self.last: dict[str, GpuNodeFacts] = {}

    def refresh(self, facts: dict[str, GpuNodeFacts]) -> dict[str, GpuNodeFacts]:
        """``facts`` with this reader's nodes read again (those not all registered yet; one play for them all)."""
        out = dict(facts)
        for node, why in self.unreachable.items():
            out[node] = unreachable_facts(facts[node], why)
        pending = [n for n in self.targets if not _registered(self.last.get(n))]
        if pending:
            self.reads += 1
            result = play(
                self.ctx,
                FABRIC_PLAYBOOK,
                pending,
                work_name=f"{self.ctx.stage}-fabric-{self.reads}",
                extravars=self.extravars,
                facts_var=FABRIC_FACTS,
            )
            for node in pending:
                self.last[node] = _read(node, result, facts[node])
        out.update({n: self.last[n] for n in self.targets if n in self.last})
        return out


def _registered(facts: GpuNodeFacts | None) -> bool:
    return (
        facts is not None
        and facts.smi is not None
        and bool(facts.smi.gpus)
        and all(g.fabric_ready for g in facts.smi.gpus)
    )


def unreachable_facts(kept: GpuNodeFacts, why: str) -> GpuNodeFacts:
    """An unreachable node's facts: the host side's record when read from the operator's driver container."""
    if kept.smi is not None and kept.smi_source == OPERATOR:
        return kept
    return dataclasses.replace(
        kept,
        smi=None,
        smi_why="operator-managed driver: its nvidia-smi is in the driver container, read by the nvidia stage over "
        f"SSH, and the node is not reachable in-band here ({why})",
    )


def _read(node: str, result: PlaybookResult, kept: GpuNodeFacts) -> GpuNodeFacts:
    """What the play read on ``node``: its GPUs' fabric states, or why none."""
    outcome = result.hosts.get(node)
    if outcome is None or not outcome.success or node not in result.facts:
        said = (outcome.message if outcome else "") or ("unreachable" if outcome and outcome.unreachable else "")
        tail = said or " ".join(result.output_tail.split())[-300:] or "the play did not run on it"
        why = f"playbooks/{FABRIC_PLAYBOOK} (ansible {result.status}, rc {result.rc}) failed on the node: {tail}"
        return dataclasses.replace(kept, smi=None, smi_source="", smi_where="", smi_why=why)
    smi = read_from_role(result.facts[node], node)
    where = f"{smi.where}, {READ_NOW}"
    return dataclasses.replace(
        kept, smi=smi.report, smi_source=smi.source, smi_where=where, smi_why=smi.why and f"{smi.why} ({READ_NOW})"
    )
