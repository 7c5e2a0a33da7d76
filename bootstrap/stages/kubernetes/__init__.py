"""The kubernetes stage: render and validate the whole cluster bundle, then apply it where the nodes allow.

It writes what ``rackctl render cluster`` writes (:func:`bootstrap.cluster.render.render_cluster`: kubeadm
configs per node, kube-vip static pods or keepalived/haproxy, chart values, node labels, Triton manifests,
``index.json``) to ``<state-dir>/cluster``, as one directory swapped in by rename, after validating it the
same way (typed kubeadm models, ``kubernetes-validate --strict`` for the target version), with the chart
archives and CRDs of ``up --charts/--crds`` when given (:mod:`bootstrap.stages.cluster_inputs`). A problem
fails the stage as bad input (exit 2), naming the inventory field, and nothing is written.

Then the host side runs for real on every node the network stage configured
(:mod:`bootstrap.stages.kubernetes.host`: kubeadm/kubelet/kubectl at exactly the cluster's version from the
site's package source, held, the node's kubeadm config validated by that kubeadm; where the sources lack
them nothing changes and the node says which are missing; on the control planes the API VIP's holder:
kube-vip's static pods staged, or keepalived + haproxy installed, configured and started).

Where a cluster already exists (``<state-dir>/kubeconfig``), the nodes' labels and taints are applied to it
(:mod:`bootstrap.stages.kubernetes.labels`): per node "labels/taints applied: ..." or "not joined: Node <name>
not in the cluster".

With that kubeconfig, the stage's releases (CNI, local-path-provisioner, kube-prometheus-stack, in that
order) are also installed or upgraded by Helm when their pinned charts are in ``up --charts DIR``
(:mod:`bootstrap.stages.helm_releases`): per release "installed/upgraded/unchanged (revision N)", or
"rendered + validated, not installed: chart X VERSION not in --charts DIR"; a Helm error or a workload not
ready within ``up --helm-timeout`` fails the stage. Then the Grafana dashboard ConfigMaps of
``monitoring/dashboards.yaml`` are applied (:mod:`bootstrap.stages.kubernetes.dashboards`).

kubeadm init and the joins (:mod:`bootstrap.stages.kubernetes.cluster`, ``playbooks/kubernetes_cluster.yml``)
run only where the host side has just installed kubeadm at the cluster's version on every control plane and
``kubeadm version -o short`` on the first answers it, or, once rackctl has initialised the cluster, on the
run's nodes (the gate): then per node "initialised", "joined as
control plane", "joined as worker" or "already joined", the node moved to ``joined``, and the admin
kubeconfig fetched to ``<state-dir>/kubeconfig``. Elsewhere the result is "rendered + validated, not
applied" for the node, with what its host side did and why init/join did not run; the runner journals it
``rendered`` and moves no node (see :mod:`bootstrap.stages.runner`). A node where the host side, init or
its join failed fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bootstrap.cluster import charts, kubeadm
from bootstrap.cluster.render import DASHBOARDS_FILE, render_cluster
from bootstrap.inventory.models import Inventory, Node
from bootstrap.kube import KUBECONFIG, Kubectl, cluster_for
from bootstrap.stages.base import NOT_APPLIED, PlannedAction, RunOptions, StageContext, StageResult, register_stage
from bootstrap.stages.cluster_inputs import cluster_inputs
from bootstrap.stages.cluster_render import (
    ClusterRenderStage,
    checked_by,
    with_host_side,
    write_not_applied,
)
from bootstrap.stages.helm_releases import planned, releases_drift, with_helm_releases
from bootstrap.stages.kubernetes.cluster import cluster_side, joinable, planned_actions, with_cluster_side
from bootstrap.stages.kubernetes.dashboards import with_dashboards
from bootstrap.stages.kubernetes.host import HOST_PLAYBOOK, api_endpoint_action, host_side, source_described
from bootstrap.stages.kubernetes.labels import with_live_labels

if TYPE_CHECKING:
    from bootstrap.journal.store import Journal

#: Where the stage writes the bundle, under the state directory.
OUT_DIR = "cluster"
#: Why nothing is applied (shown as "rendered + validated, not applied: <why>").
WHY = (
    "rackctl cannot apply it yet: kubeadm init/join run only once the host side installed kubeadm at the "
    "cluster's version on every control plane and the first one's kubeadm answers that version (once the cluster "
    "is initialised: on the nodes of the run), and the charts "
    "are installed with Helm only where a cluster exists (<state-dir>/kubeconfig) and they are in --charts DIR "
    "(docs/kubernetes.md, 'The kubernetes and nvidia stages of rackctl up')"
)


def node_action(inv: Inventory, node: Node) -> str:
    """What the stage renders and validates for one node: its kubeadm role and the VIP's parts."""
    api = kubeadm.api_version(inv)
    first = inv.control_planes[0] if inv.control_planes else None
    vip = "kube-vip static pod" if inv.kubernetes.api_endpoint == "kube-vip" else "keepalived.conf + haproxy.cfg"
    if node is first:
        return (
            f"render + validate the kubeadm init config ({api} Init/ClusterConfiguration, KubeletConfiguration, "
            f"KubeProxyConfiguration) and the {vip}: kubeadm init on the first control plane"
        )
    if node.is_control_plane:
        return f"render + validate the control-plane JoinConfiguration ({api}) and the {vip}: control-plane join"
    return f"render + validate the worker JoinConfiguration ({api}): worker join"


def releases(inv: Inventory) -> list[charts.Release]:
    """The charts of the cluster itself, in install order (the GPU operator is the nvidia stage's)."""
    return charts.cluster_releases(inv)


@register_stage
class KubernetesStage(ClusterRenderStage):
    """HA Kubernetes with kubeadm: the nodes' packages applied; the rest rendered and validated, not applied."""

    name = "kubernetes"
    description = (
        "kubeadm/kubelet/kubectl pinned and held on the nodes over SSH; render + validate kubeadm configs, the API "
        "VIP, chart values and node labels; kubeadm init/join where the nodes' kubeadm answers the pinned version"
    )
    #: init/join apply behind a gate only the run can check (the host side's report): the plan says "not applied"
    applies_behind_gate = True

    def cluster_drift(self, inventory: Inventory, state_dir: Path, journal: Journal, options: RunOptions) -> str | None:
        """The cluster's Helm releases (:func:`releases`) the journal does not record as installed as wanted."""
        return releases_drift(state_dir, journal, options, releases(inventory))

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        inv = ctx.inventory
        version = inv.cluster.resolved_versions().kubernetes
        # the plan is made before the stages ahead of this one ran: only the environment can rule a node out
        out_of_band = ctx.options.environment.out_of_band_only(inv)
        actions = []
        for hostname in ctx.nodes:
            vip_action = api_endpoint_action(inv, ctx.node(hostname))
            actions.append(
                PlannedAction(
                    self.name,
                    hostname,
                    f"playbooks/{HOST_PLAYBOOK} over SSH once the network stage configured the node: kubeadm, "
                    f"kubelet, kubectl {version} from {source_described(inv)}, held, and kubeadm config validate "
                    "on the node's rendered config (nothing changed if the sources lack them)"
                    + (f"; the API VIP: {vip_action}" if vip_action else ""),
                    skip=out_of_band.get(hostname),
                )
            )
            actions.append(
                PlannedAction(
                    self.name, hostname, f"{node_action(inv, ctx.node(hostname))}; {NOT_APPLIED}", applies=False
                )
            )
        actions += planned_actions(ctx, self.name)
        if cluster_for(ctx.state_dir).deployed:
            actions.append(
                PlannedAction(
                    self.name,
                    None,
                    f"node labels and taints of the rendered nodes/labels.yaml applied to every selected node the "
                    f"cluster of {ctx.state_dir / KUBECONFIG} knows (rackctl's own removed when the inventory drops "
                    "them; other labels left alone)",
                )
            )
            actions += planned(ctx, self.name, releases(inv))
            if inv.monitoring.enabled and inv.monitoring.grafana:
                actions.append(
                    PlannedAction(
                        self.name,
                        None,
                        f"Grafana dashboard ConfigMaps of the rendered {DASHBOARDS_FILE} applied server-side into "
                        f"namespace {inv.monitoring.namespace} (the Grafana sidecar loads them)",
                    )
                )
        charts_text = ", ".join(f"{r.chart} {r.version}" for r in releases(inv))
        actions.append(
            PlannedAction(
                self.name,
                None,
                f"render + validate chart values ({charts_text}), node labels and taints into "
                f"{ctx.state_dir / OUT_DIR}{cluster_inputs(ctx.options.cluster).described()}; {NOT_APPLIED}",
                applies=False,
            )
        )
        return actions

    def run(self, ctx: StageContext) -> StageResult:
        bundle = self.render_checked(ctx, render_cluster)
        out = ctx.state_dir / OUT_DIR
        message = (
            f"{len(bundle.files)} files for Kubernetes {bundle.kubernetes_version} ({bundle.kubeadm_api}) "
            f"written to {out}"
        )
        result = write_not_applied(ctx, bundle, out, why=WHY, message=message, checks=checked_by(bundle))
        host = host_side(ctx, out)  # after the bundle is written: the role validates each node's config
        result = with_host_side(result, host, HOST_PLAYBOOK)
        result = with_cluster_side(result, *cluster_side(ctx, host), joinable(ctx.inventory, host))
        cluster = cluster_for(ctx.state_dir)
        if isinstance(cluster, Kubectl):  # a cluster exists: its nodes get their labels and taints, Helm its charts
            result = with_live_labels(ctx, result, cluster, bundle)
            result = with_helm_releases(ctx, result, cluster, releases(ctx.inventory))
            result = with_dashboards(ctx, result, cluster, bundle)
        return result
