"""The nvidia stage: the GPU nodes' host side over SSH; the GPU Operator and Fabric Manager rendered, not applied.

It writes the nvidia part of ``rackctl render cluster`` to ``<state-dir>/nvidia`` (one directory, by
rename): the GPU Operator chart values (``charts/gpu-operator/values.yaml``), its rendered manifests when
the chart is at hand (``up --charts DIR``; ``--crds DIR`` for the custom-resource checks), the per-node
operator labels (``nvidia/node-labels.yaml``: host driver, MIG config) and the per-node Fabric Manager
decision (``nvidia/fabric-manager.yaml``: who runs it, the pinned host packages). The decision comes from
the inventory; whether a node really has NVSwitches is detected on the node by the host side below
(:mod:`bootstrap.nvidia.host`). Checks: the profile rules (MIG strategy and
operator driver agree cluster-wide, MIG only on MIG-capable GPUs) and the driver / Fabric Manager version
match; a problem fails the stage as bad input (exit 2), naming the inventory field.

The host side runs for real on every GPU node the network stage configured (``playbooks/nvidia_host.yml``,
role ``nvidia_host``): nouveau blacklisted, the node's PCI bus and NVSwitch driver read back and compared with
the inventory (:mod:`bootstrap.nvidia.host`). A GPU count that differs from the inventory, or a model that
should have NVSwitches showing none, fails the node, unless the environment says its devices exist only
out of band (the lab's VMs). Fabric Manager is then needed exactly where NVSwitches were detected.

Where a cluster already exists (``<state-dir>/kubeconfig``) and the GPU Operator's pinned chart is in
``up --charts DIR``, Helm installs or upgrades it (:mod:`bootstrap.stages.helm_releases`: "installed/upgraded/
unchanged (revision N)", its workloads watched to ready within ``up --helm-timeout``; a Helm error or a
workload not ready fails the stage); without the chart it stays "rendered + validated, not installed".
Once Helm holds the release deployed in this run, the cluster is validated (:mod:`bootstrap.stages.nvidia.validate`:
the read-only checks of ``rackctl validate-cluster`` polled until they pass within ``up --validate-timeout``,
then a CUDA smoke Job per GPU product; ``--validate-nccl``, ``--skip-validate``): the report is the stage's
``data["validation"]`` and a journal fact, a failed check fails the stage, all ok says "validated: N checks ok";
otherwise the stage says "validators not run: <why>".

The node-side driver / Fabric Manager steps are not built, and they need the kubernetes stage applied (nodes
``joined``): every node is reported "rendered + validated, not applied", with what its host side did or why
it did not run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from bootstrap.cluster.gpu_operator import driver_version, gpu_nodes, gpu_operator
from bootstrap.cluster.render import Bundle, RenderedFile, render_cluster
from bootstrap.inventory.models import Inventory, Node
from bootstrap.kube import Kubectl, cluster_for
from bootstrap.nvidia.host import assess_report
from bootstrap.stages.base import NOT_APPLIED, NodeResult, PlannedAction, StageContext, StageResult, register_stage
from bootstrap.stages.cluster_inputs import cluster_inputs
from bootstrap.stages.cluster_render import (
    ClusterRenderStage,
    checked_by,
    with_host_side,
    write_not_applied,
)
from bootstrap.stages.helm_releases import planned, with_helm_releases
from bootstrap.stages.nvidia.validate import not_deployed_why, not_run, with_validation
from bootstrap.stages.nvidia.validate import planned as planned_validation
from bootstrap.stages.playbook import PlaybookStage, host_side_targets

#: Where the stage writes its artefacts, under the state directory.
OUT_DIR = "nvidia"
#: Why nothing is applied (shown as "rendered + validated, not applied: <why>").
WHY = (
    "rackctl cannot apply it yet: the node-side driver / Fabric Manager steps are not built, and they need the "
    "kubernetes stage applied; the GPU Operator is installed with Helm only where a cluster exists "
    "(<state-dir>/kubeconfig) and its chart is in --charts DIR"
)
#: The host side, run over SSH on installed GPU nodes, and the fact it returns.
HOST_PLAYBOOK = "nvidia_host.yml"
HOST_FACTS = "nvidia_host_report"
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


class NvidiaHostPlay(PlaybookStage):
    """The nvidia stage's host side: ``playbooks/nvidia_host.yml`` on GPU nodes (run by the stage, not registered)."""

    name = "nvidia"
    description = "Blacklist nouveau, read the PCI bus and NVSwitches of each installed GPU node"
    playbook = HOST_PLAYBOOK
    facts_var = HOST_FACTS


def host_targets(ctx: StageContext) -> tuple[list[str], dict[str, str]]:
    """The GPU nodes the host side runs on now, and the GPU nodes it cannot run on, each with why
    (:func:`bootstrap.stages.playbook.host_side_targets`)."""
    gpu = {n.hostname for n in gpu_nodes(ctx.inventory)}
    return host_side_targets(ctx, [n for n in ctx.nodes if n in gpu])


@register_stage
class NvidiaStage(ClusterRenderStage):
    """The GPU nodes' host side, applied; GPU Operator and Fabric Manager rendered into ``<state-dir>/nvidia``."""

    name = "nvidia"
    description = (
        "GPU nodes' host side over SSH (nouveau, PCI bus, NVSwitches); render + validate the GPU Operator values "
        "and the Fabric Manager plan (not applied yet)"
    )

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        inv = ctx.inventory
        with_gpus = {n.hostname for n in gpu_nodes(inv)}
        # the plan is made before the stages ahead of this one ran: only the environment can rule a node out
        out_of_band = ctx.options.environment.out_of_band_only(inv)
        actions = []
        for hostname in ctx.nodes:
            node = ctx.node(hostname)
            why = f" ({ctx.cannot_apply[hostname]})" if hostname in ctx.cannot_apply else ""
            if hostname in with_gpus:
                gpus = inv.gpus_of(node)
                actions.append(
                    PlannedAction(
                        self.name,
                        hostname,
                        f"playbooks/{HOST_PLAYBOOK} over SSH once the network stage configured the node: blacklist "
                        f"nouveau, read its PCI bus and NVSwitches, check {gpus.count} x {gpus.type} are there",
                        skip=out_of_band.get(hostname),
                    )
                )
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
                f"{cluster_inputs(ctx.options.cluster).described() if with_gpus else ''}; {NOT_APPLIED}",
                applies=False,
            )
        )
        operator = gpu_operator(inv).release
        if operator is not None and cluster_for(ctx.state_dir).deployed:
            actions += planned(ctx, self.name, [operator])
            actions.append(planned_validation(ctx, self.name, deployable=not_deployed_why(ctx, operator.name)))
        return actions

    def run(self, ctx: StageContext) -> StageResult:
        inv = ctx.inventory
        bundle = self.render_checked(ctx, render_nvidia)
        host = self.host_side(ctx)
        out = ctx.state_dir / OUT_DIR
        gpus = len(gpu_nodes(inv))
        message = (
            f"GPU Operator {inv.cluster.resolved_versions().gpu_operator} values and the Fabric Manager plan "
            f"for {gpus} GPU node(s) written to {out}"
            if gpus
            else f"no GPU nodes: no GPU Operator release (index written to {out})"
        )
        result = write_not_applied(ctx, bundle, out, why=WHY, message=message, checks=checked_by(bundle, *CHECKS))
        result = with_host_side(result, host, HOST_PLAYBOOK)
        cluster = cluster_for(ctx.state_dir)
        release = gpu_operator(inv).release
        if release is None:
            return result
        if not isinstance(cluster, Kubectl):
            return not_run(result, f"no cluster ({cluster.reason})")
        result = with_helm_releases(ctx, result, cluster, [release])  # a cluster exists: Helm installs it
        return with_validation(ctx, result, cluster, release.name)

    def host_side(self, ctx: StageContext) -> dict[str, NodeResult]:
        """Run the host side on the installed GPU nodes; per GPU node, what it found or why it did not run.

        ``applied`` marks the nodes it ran on; a node whose devices differ from the inventory is not ok.
        """
        run, not_run = host_targets(ctx)
        out = {
            n: NodeResult(n, ok=True, message=f"host side not run: {why}", applied=False) for n, why in not_run.items()
        }
        if not run:
            return out
        played = NvidiaHostPlay().run(dataclasses.replace(ctx, nodes=run))
        emulated = ctx.options.environment.emulated_devices(ctx.inventory)
        for node in run:
            res = played.nodes[node]
            if not res.ok:
                out[node] = res
                continue
            report = res.data.get(HOST_FACTS) or {}
            verdict = assess_report(ctx.inventory, ctx.node(node), report, emulated=emulated.get(node))
            # one record, with the report the play recorded: the journal keeps a stage's latest facts per node
            # (nvidia-smi's XML is kept as the verdict's per-GPU fabric states, not whole)
            kept = {k: v for k, v in report.items() if k != "nvidia_smi_xml"}
            facts = {HOST_FACTS: kept, "nvidia_host": verdict.as_dict()}
            if report.get("driver_version"):  # the driver the node runs (rackctl status shows it)
                facts["driver_version"] = report["driver_version"]
            ctx.record_facts(node, facts)
            text = verdict.summary()
            out[node] = NodeResult(
                node,
                ok=verdict.ok,
                message=f"host side applied ({res.data.get('changed', 0)} changed): {text}" if verdict.ok else text,
                changed=res.changed,
                data={**res.data, "host": verdict.as_dict()},
            )
        return out
