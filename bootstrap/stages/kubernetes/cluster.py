"""The kubernetes stage's cluster side: kubeadm init and joins over SSH, behind a gate.

``playbooks/kubernetes_cluster.yml`` runs only where the host side (:mod:`bootstrap.stages.kubernetes.host`)
has just reported kubeadm installed at the cluster's version on every control plane AND ``kubeadm version -o
short`` on the first control plane answered ``v<version>`` (:func:`gate`; once the cluster is initialised,
on the run's nodes). Then, in order: ``kubeadm init
--upload-certs`` on the first control plane (role ``kubeadm_init``, skipped where ``admin.conf`` exists), the
other control planes joined one at a time (``serial: 1``), each after an etcd snapshot on the first (roles
``etcd_snapshot``, ``kubeadm_join``), then the workers (skipped where ``kubelet.conf`` exists). With kube-vip
(``kubernetes.api_endpoint``) the static pod the host side staged is copied into the manifests directory first
(role ``api_endpoint``, ``place.yml``): the super-admin.conf variant before init from 1.29, switched to the
admin.conf one after it (also on a later run, where one stopped in between), ``kube-vip.yaml`` before each
control-plane join, whose preflight then lets ``DirAvailable--etc-kubernetes-manifests`` through. Each node's
``kubeadm config validate`` and ``kubeadm init|join phase preflight`` run on the resolved config first
(role ``kubeadm_preflight``). The token, CA hash and certificate key are made on the node / the first control
plane at that moment and never logged. The admin kubeconfig is fetched to ``<state-dir>/kubeconfig`` (0600,
written atomically).

Once rackctl has initialised the cluster (``<state-dir>/kubeconfig`` exists), a run joins the nodes it has
without every control plane (a worker added or redeployed later): the first control plane, where it is not in
the run, takes part as a helper (it makes the token and, for a control plane, the certificate key and the etcd
snapshot) and is never initialised again: kubeadm init runs only where no such kubeconfig exists.

Per node: "initialised", "joined as control plane", "joined as worker" or "already joined", with "after
kubeadm reset of a half-done init|join (why)" where the role had to undo what an earlier init or join left
(a join's etcd member removed on the first control plane and its Node deleted first); the runner moves such a
node to ``joined``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bootstrap.cluster import vip
from bootstrap.fsutil import atomic_write_bytes
from bootstrap.inventory.models import Inventory
from bootstrap.kube import KUBECONFIG
from bootstrap.stages.base import NOT_APPLIED, NodeResult, PlannedAction, StageContext, StageResult
from bootstrap.stages.kubernetes.host import HOST_FACTS, KUBE_VIP_STAGE_DIR
from bootstrap.stages.playbook import NOT_REACHED, PlaybookStage

#: The cluster side's playbook and the fact each node returns (``{action, ...}``).
CLUSTER_PLAYBOOK = "kubernetes_cluster.yml"
CLUSTER_FACTS = "kubeadm_cluster_report"
#: kube-vip's static pod on a control plane, placed from what the host side staged (role api_endpoint, place.yml).
KUBE_VIP_MANIFEST = "/etc/kubernetes/manifests/kube-vip.yaml"
KUBE_VIP_PLACED = f"{KUBE_VIP_STAGE_DIR}/kube-vip.yaml placed as {KUBE_VIP_MANIFEST}"
KUBE_VIP_SWITCH = f", then kube-vip switched to admin.conf ({KUBE_VIP_PLACED})"
#: The one kubeadm preflight check a control-plane join lets through with kube-vip's pod in the manifests dir
#: (kubeadm join before 1.23 refuses a non-empty directory; init checks only its own four manifests).
JOIN_IGNORED = "DirAvailable--etc-kubernetes-manifests"


def kube_vip_before_init(inv: Inventory) -> str:
    """The plan's words for kube-vip's static pod placed before init on the first control plane."""
    if vip.needs_super_admin(inv):
        return f"{KUBE_VIP_STAGE_DIR}/kube-vip-init.yaml (super-admin.conf, 1.29+) placed as {KUBE_VIP_MANIFEST}, then "
    return f"{KUBE_VIP_PLACED}, then "


def kube_vip_words(report: dict[str, Any]) -> str:
    """What the cluster side did with kube-vip's static pod on a node, from its report ('' where nothing)."""
    manifest = report.get("kube_vip_manifest")
    if not manifest:
        return ""
    if "kube_vip_before_init" in report:  # the first control plane: placed before init, switched after it
        before = report.get("kube_vip_before_init")
        done = [f"{before} placed before init"] if before else []
        if report.get("kube_vip_switched"):
            done.append(f"switched to {report['kube_vip_switched']} (admin.conf) after it")
        return f"kube-vip static pod {manifest}: {', '.join(done)}" if done else ""
    ignored = ",".join(report.get("ignored_preflight_errors") or [])
    return f"kube-vip static pod placed as {manifest} before the join" + (
        f" (--ignore-preflight-errors={ignored})" if ignored else ""
    )


def first_control_plane(inv: Inventory) -> str | None:
    """The control plane kubeadm init runs on (the inventory's first)."""
    return inv.control_planes[0].hostname if inv.control_planes else None


def gate(inv: Inventory, host: dict[str, NodeResult], *, initialised: bool = False) -> str | None:
    """None where init/join may run now, else why not (from what the host side just reported).

    Before the cluster exists: open only when every control plane is in ``host`` with kubeadm installed at the
    cluster's version and the first control plane's ``kubeadm version -o short`` answered ``v<version>``.
    Once it is ``initialised`` (rackctl fetched its kubeconfig): open where at least one node of the run has
    kubeadm at the version and each of those answered ``v<version>``.
    """
    version = inv.cluster.resolved_versions().kubernetes
    first = first_control_plane(inv)
    if first is None:
        return "the inventory has no control plane"
    if initialised:
        nodes = joinable(inv, host)
        if not nodes:
            return f"the host side did not report kubeadm {version} installed on any node of this run"
        return next(filter(None, (_answered(node, host[node], version) for node in nodes)), None)
    for node in inv.control_planes:
        res = host.get(node.hostname)
        if res is None:
            return (
                f"control plane {node.hostname} is not in this run (kubeadm init needs every control plane; once "
                f"the cluster is initialised, nodes join without them)"
            )
        report = res.data.get(HOST_FACTS) or {}
        kubeadm = str((report.get("installed") or {}).get("kubeadm") or "")
        if not (res.ok and res.applied) or not kubeadm.startswith(f"{version}-"):
            return f"the host side did not report kubeadm {version} installed on control plane {node.hostname}"
    return _answered(first, host[first], version)


def _answered(node: str, res: NodeResult, version: str) -> str | None:
    """Why ``node``'s ``kubeadm version -o short`` (in the host side's report) is not ``v<version>``, or None."""
    report = res.data.get(HOST_FACTS) or {}
    answer = str(report.get("kubeadm_version") or "").strip()
    if answer == f"v{version}":
        return None
    error = report.get("kubeadm_version_error") or "no output"
    said = f"answered {answer!r}" if answer else f"did not answer ({error})"
    return f"`kubeadm version -o short` on {node} {said}, not v{version}"


def joinable(inv: Inventory, host: dict[str, NodeResult]) -> list[str]:
    """The nodes the cluster side runs on: those the host side installed kubeadm at the version on."""
    version = inv.cluster.resolved_versions().kubernetes
    out = []
    for node, res in host.items():
        kubeadm = str(((res.data.get(HOST_FACTS) or {}).get("installed") or {}).get("kubeadm") or "")
        if res.ok and res.applied and kubeadm.startswith(f"{version}-"):
            out.append(node)
    return out


def initialised(ctx: StageContext) -> bool:
    """Whether rackctl has initialised this cluster already: its admin kubeconfig is in the state directory."""
    return (ctx.state_dir / KUBECONFIG).is_file()


def planned_actions(ctx: StageContext, stage: str) -> list[PlannedAction]:
    """What the cluster side would do on each node of ``ctx`` (where the gate opens at run time)."""
    inv = ctx.inventory
    first = first_control_plane(inv)
    if first is None:
        return []
    version = inv.cluster.resolved_versions().kubernetes
    exists = initialised(ctx)
    if exists:
        gated = (
            f"; only where the host side installed kubeadm {version} on the node and its `kubeadm version -o short` "
            f"answers v{version}, else {NOT_APPLIED}"
        )
    else:
        gated = (
            f"; only where the host side installed kubeadm {version} on every control plane and `kubeadm version "
            f"-o short` on {first} answers v{version}, else {NOT_APPLIED}"
        )
    checks = "kubeadm config validate + kubeadm {} phase preflight on the node's config, then "
    kube_vip = inv.kubernetes.api_endpoint == "kube-vip"
    actions = []
    for hostname in ctx.nodes:
        node = ctx.node(hostname)
        if hostname == first and exists:
            what = (
                f"nothing to initialise: the cluster is initialised ({ctx.state_dir / KUBECONFIG} exists; init is "
                f"refused where {first} has no admin.conf); its admin.conf fetched again"
            )
        elif hostname == first:
            what = (
                f"{kube_vip_before_init(inv) if kube_vip else ''}{checks.format('init')}kubeadm init --upload-certs "
                f"(skipped where admin.conf exists){KUBE_VIP_SWITCH if kube_vip and vip.needs_super_admin(inv) else ''}"
                f"; its admin.conf fetched to {ctx.state_dir / KUBECONFIG} (0600)"
            )
        elif node.is_control_plane:
            join = (
                f"{KUBE_VIP_PLACED} and kubeadm join as control plane with --ignore-preflight-errors={JOIN_IGNORED}"
                if kube_vip
                else "kubeadm join as control plane"
            )
            what = (
                f"an etcd snapshot on {first}, then {checks.format('join')}{join}, one control plane at a time "
                "(skipped where kubelet.conf exists)"
            )
        else:
            what = (
                f"{checks.format('join')}kubeadm join as worker after the control planes (skipped where "
                "kubelet.conf exists)"
            )
        actions.append(PlannedAction(stage, hostname, f"playbooks/{CLUSTER_PLAYBOOK} over SSH: {what}{gated}"))
    if exists and ctx.nodes and first not in ctx.nodes:
        joins_cp = any(ctx.node(n).is_control_plane for n in ctx.nodes)
        makes = "the join token" + (", the certificate key and the etcd snapshot" if joins_cp else "")
        helper = (
            f"include {first} in playbooks/{CLUSTER_PLAYBOOK} (not changed in the journal): it makes {makes}; "
            "kubeadm init is not run there"
        )
        actions.append(PlannedAction(stage, None, helper))
    return actions


class KubernetesClusterPlay(PlaybookStage):
    """The kubernetes stage's cluster side: ``playbooks/kubernetes_cluster.yml`` (run by the stage). The first
    control plane takes part where it is not in the run (it makes the join token); kubeadm init runs there only
    where the cluster is not ``initialised``."""

    name = "kubernetes"
    description = "kubeadm init on the first control plane, control planes then workers joined"
    playbook = CLUSTER_PLAYBOOK
    facts_var = CLUSTER_FACTS

    def __init__(self, fetch_dir: Path, *, init_allowed: bool) -> None:
        self.fetch_dir = fetch_dir
        self.init_allowed = init_allowed

    def helper_hosts(self, ctx: StageContext) -> list[str]:
        first = first_control_plane(ctx.inventory)
        return [first] if first else []

    def extravars(self, ctx: StageContext) -> dict[str, Any]:
        return {
            "kubeadm_kubeconfig_fetch_dir": str(self.fetch_dir),
            "kubeadm_init_allowed": self.init_allowed,
            **super().extravars(ctx),
        }


def cluster_side(ctx: StageContext, host: dict[str, NodeResult]) -> tuple[dict[str, NodeResult], str | None]:
    """Run the cluster side where :func:`gate` opens; returns per node what it did, and why it did not run.

    A node it ran on and reported carries ``applied`` and its action; a failed node carries Ansible's message;
    a node the play never reached after the first control plane (a node of the run or the helper) failed says
    so, with the helper's message.
    """
    exists = initialised(ctx)
    why = gate(ctx.inventory, host, initialised=exists)
    if why is not None:
        return {}, why
    nodes = joinable(ctx.inventory, host)
    first = first_control_plane(ctx.inventory)
    fetch_dir = Path(tempfile.mkdtemp(prefix=".kubeconfig-fetch.", dir=ctx.state_dir))  # 0700
    stage = KubernetesClusterPlay(fetch_dir, init_allowed=not exists)
    try:
        played = stage.run(dataclasses.replace(ctx, nodes=nodes))
        fetched = fetch_dir / "admin.conf"
        if fetched.is_file():
            atomic_write_bytes(ctx.state_dir / KUBECONFIG, fetched.read_bytes(), mode=0o600)
    finally:
        shutil.rmtree(fetch_dir, ignore_errors=True)
    failed = [n for n in nodes if n in played.nodes and not played.nodes[n].ok and n not in unreached(played)]
    failed += [f"{h} (in the play as a helper: {r.message})" for h, r in stage.helpers_done.items() if not r.ok]
    out: dict[str, NodeResult] = {}
    for node in nodes:
        res = played.nodes[node]
        report = res.data.get(CLUSTER_FACTS) or {}
        if res.ok and report.get("action"):
            text = str(report["action"])
            if report.get("reset"):
                text += f" after kubeadm reset of {reset_words(report)}"
            if report.get("etcd_snapshot"):
                text += f" (etcd snapshot {report['etcd_snapshot']} on {first} first)"
            if kube_vip_words(report):
                text += f"; {kube_vip_words(report)}"
            out[node] = NodeResult(node, ok=True, message=text, changed=res.changed, data=res.data)
        elif node in unreached(played) and failed:  # the play stopped at another node's failure
            why = f"not joined: the play stopped after {', '.join(failed)} failed"
            out[node] = NodeResult(node, ok=True, message=why, applied=False)
        else:
            out[node] = res
    return out, None


def reset_words(report: dict[str, Any]) -> str:
    """What a role reset before it ran kubeadm again: "a half-done init (why)" or "a half-done join (why; ...)"."""
    kind = "init" if report.get("action") == "initialised" else "join"
    why = str(report["reset"])
    if report.get("etcd_member_removed"):
        why += f"; etcd member {int(report['etcd_member_removed']):x} removed first"
    return f"a half-done {kind} ({why})"


def unreached(played: StageResult) -> list[str]:
    """The nodes the play never ran on (it stops at a failed init or control-plane join)."""
    return [n for n, r in played.nodes.items() if not r.ok and r.message.startswith(NOT_REACHED)]


def with_cluster_side(
    result: StageResult, cluster: dict[str, NodeResult], closed: str | None, ready: list[str]
) -> StageResult:
    """``result`` (rendered, host side merged) with what the cluster side did: a node it initialised or joined
    is applied, with its action first; a failed node's result replaces the rendered one. ``closed`` (the
    gate's reason) is added to the ``ready`` nodes (kubeadm installed at the version); the others' host side
    already says why (packages missing, not run, failed)."""
    if closed is not None:
        for node in ready:
            if result.nodes[node].ok and not result.nodes[node].applied:
                result.nodes[node].message += f"; kubeadm init/join not run: {closed}"
        return result
    done = [n for n, r in cluster.items() if r.ok and r.applied]
    if done:
        result.message += f"; kubeadm init/join applied on {', '.join(done)} (playbooks/{CLUSTER_PLAYBOOK})"
    for node, res in cluster.items():
        before = result.nodes[node]
        if res.ok and res.applied:
            data = {**before.data, **res.data}
            message = f"{res.message} (playbooks/{CLUSTER_PLAYBOOK}); {before.message}"
            result.nodes[node] = NodeResult(node, ok=True, message=message, changed=res.changed, data=data)
        elif res.ok:
            before.message += f"; {res.message}"
        else:
            result.nodes[node] = res
    result.ok = all(r.ok for r in result.nodes.values())
    return result
