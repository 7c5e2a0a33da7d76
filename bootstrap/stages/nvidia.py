"""The nvidia stage: render and validate the GPU Operator release and the Fabric Manager plan; not applied yet.

It writes the nvidia part of ``rackctl render cluster`` to ``<state-dir>/nvidia`` (one directory, by
rename): the GPU Operator chart values (``charts/gpu-operator/values.yaml``), its rendered manifests when
the chart is at hand (``up --charts DIR``; ``--crds DIR`` for the custom-resource checks), the per-node
operator labels (``nvidia/node-labels.yaml``: host driver, MIG config) and the per-node Fabric Manager
decision (``nvidia/fabric-manager.yaml``: who runs it, the pinned host packages). The decision comes from
the inventory; whether a node really has NVSwitches is detected on the node (:mod:`bootstrap.nvidia.detect`)
when the stage applies. Checks: the profile rules (MIG strategy and
operator driver agree cluster-wide, MIG only on MIG-capable GPUs) and the driver / Fabric Manager version
match; a problem fails the stage as bad input (exit 2), naming the inventory field.

Applying needs the kubernetes stage applied (nodes ``joined``) and the install itself, which is not built:
every node is reported "rendered + validated, not applied", with the kubernetes reason where it applies.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from bootstrap.cluster.gpu_operator import driver_version, gpu_nodes, gpu_operator
from bootstrap.cluster.render import Bundle, RenderedFile, render_cluster
from bootstrap.inventory.models import Inventory, Node
from bootstrap.stages.base import NOT_APPLIED, PlannedAction, StageContext, StageResult, register_stage
from bootstrap.stages.cluster_inputs import cluster_inputs
from bootstrap.stages.cluster_render import ClusterRenderStage, checked_by, validate_or_refuse, write_not_applied

#: Where the stage writes its artefacts, under the state directory.
OUT_DIR = "nvidia"
#: Why nothing is applied (shown as "rendered + validated, not applied: <why>").
WHY = (
    "rackctl cannot apply it yet: the GPU Operator install (Helm) and the node-side driver / Fabric Manager "
    "steps are not built, and they need the kubernetes stage applied"
)
#: The checks the stage makes besides the bundle validators.
CHECKS = (
    "nvidia.profiles rules (MIG strategy and operator driver agree cluster-wide; MIG only on MIG GPUs)",
    "driver / Fabric Manager exact version match (host driver)",
)


def fabric_manager_decision(inv: Inventory, node: Node) -> str:
    """Who runs Fabric Manager on a GPU node if detection finds NVSwitches there (from the inventory)."""
    profile = inv.nvidia.profile_for(node.model)
    hw = inv.hardware(node.model)
    expected = "expected" if hw is not None and hw.nvswitch else "not expected"
    who = (
        "the operator's driver container"
        if profile.driver == "operator"
        else f"host packages at exactly driver {driver_version(inv, profile)}, held"
    )
    return f"Fabric Manager if NVSwitches are detected on the node ({expected} for {node.model}): {who}"


def render_nvidia(inv: Inventory, charts_dir: Path | None = None) -> Bundle:
    """The GPU Operator part of the cluster bundle, with the per-node labels and Fabric Manager plan.

    ``charts_dir``: the chart archives (``up --charts``); the GPU Operator's is rendered, its CRDs kept.
    """
    full = render_cluster(inv, charts_dir)
    gpu = gpu_operator(inv)
    part = Bundle(full.kubernetes_version, full.kubeadm_api, problems=list(gpu.problems))
    part.corrections = list(gpu.corrections)
    if gpu.release is None:
        return part
    name = gpu.release.name
    own = (f"charts/{name}/", f"manifests/{name}/", f"crds/{name}/", "nvidia/")
    part.files = [f for f in full.files if f.path.startswith(own)]
    part.files.append(
        RenderedFile(
            "nvidia/node-labels.yaml",
            "node-labels",
            ("nvidia.profiles", "nodes[*].mig_profile"),
            text=yaml.safe_dump(gpu.node_labels, sort_keys=True),
        )
    )
    part.releases = [r for r in full.releases if r["release"] == name]
    if not any(f.path.startswith(f"manifests/{name}/") for f in part.files):
        part.not_rendered.append(
            {
                "what": f"chart manifests (helm template) of {gpu.release.chart} {gpu.release.version}",
                "why": (f"no chart archive for it in {charts_dir}" if charts_dir else "no --charts directory was given")
                + "; the stage installs the chart with Helm when it applies",
            }
        )
    return part


@register_stage
class NvidiaStage(ClusterRenderStage):
    """GPU Operator and Fabric Manager: rendered and validated into ``<state-dir>/nvidia``, not applied."""

    name = "nvidia"
    description = "Render + validate the GPU Operator values and the Fabric Manager plan per node (not applied yet)"

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        inv = ctx.inventory
        with_gpus = {n.hostname for n in gpu_nodes(inv)}
        actions = []
        for hostname in ctx.nodes:
            node = ctx.node(hostname)
            why = f" ({ctx.cannot_apply[hostname]})" if hostname in ctx.cannot_apply else ""
            if hostname in with_gpus:
                gpus = inv.gpus_of(node)
                what = (
                    f"render + validate {gpus.count} x {gpus.type}: operator node labels; "
                    f"{fabric_manager_decision(inv, node)}; {NOT_APPLIED}{why}"
                )
            else:
                what = f"nothing node-specific: no GPUs (the GPU Operator release is cluster-wide){why}"
            actions.append(PlannedAction(self.name, hostname, what, applies=False))
        versions = inv.cluster.resolved_versions()
        release = f"GPU Operator {versions.gpu_operator} values" if with_gpus else "nothing: no GPU nodes"
        actions.append(
            PlannedAction(
                self.name,
                None,
                f"render + validate {release} into {ctx.state_dir / OUT_DIR}"
                f"{cluster_inputs(ctx.options.extra).described() if with_gpus else ''}; {NOT_APPLIED}",
                applies=False,
            )
        )
        return actions

    def run(self, ctx: StageContext) -> StageResult:
        inv = ctx.inventory
        inputs = cluster_inputs(ctx.options.extra)
        bundle = render_nvidia(inv, inputs.charts)
        validate_or_refuse(inv, bundle, self.name, inputs.crds)
        out = ctx.state_dir / OUT_DIR
        gpus = len(gpu_nodes(inv))
        message = (
            f"GPU Operator {inv.cluster.resolved_versions().gpu_operator} values and the Fabric Manager plan "
            f"for {gpus} GPU node(s) written to {out}"
            if gpus
            else f"no GPU nodes: no GPU Operator release (index written to {out})"
        )
        return write_not_applied(ctx, bundle, out, why=WHY, message=message, checks=checked_by(bundle, *CHECKS))
