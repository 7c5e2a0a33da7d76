"""The kubernetes stage's host side: kubeadm/kubelet/kubectl pinned and held on the nodes, over SSH.

``playbooks/kubernetes_host.yml`` (role ``kubernetes_packages``) runs on every node of the stage that is
installed, configured by the network stage and reachable in-band here. It installs the three packages at
exactly ``cluster.versions.kubernetes`` (``<version>-*`` resolved by apt to the full Debian version) from
the node's package source, holds them, and validates the node's rendered kubeadm config
(``<state-dir>/cluster/kubeadm/<node>.yaml``) with that kubeadm (``kubeadm config validate``, from 1.26).
Where the node's sources lack them it changes nothing and says which are missing; a different version
already installed fails the node (an upgrade is a separate operation).

On the control planes the same playbook puts what holds the API VIP in place (role ``api_endpoint``,
``kubernetes.api_endpoint``): kube-vip's rendered static pods (``static-pods/<cp>/kube-vip.yaml``, and
``kube-vip-init.yaml`` on the first control plane from 1.29) staged 0600 in ``/etc/rackctl``, from where the
cluster side places them into the manifests directory before init/join; or keepalived + haproxy installed
from the site's package source, ``host/<cp>/keepalived.conf`` and ``haproxy.cfg`` written after
``keepalived -t`` / ``haproxy -c`` accepted them, both enabled and started. Its report is added to the host
side's fact as ``api_endpoint``.

Where the packages come from is the site's package source (``site_services.packages``): the head node's
mirror or a site mirror carries them or not (nothing else is added); with the public archives the role
adds the upstream repository ``pkgs.k8s.io/core:/stable:/v<major.minor>/deb/``, signed by the key that
repository publishes (``Release.key``, fetched over HTTPS as upstream's instructions do). The head node's
mirror carries them when ``rackctl mirror build`` read that repository
(``site_services.packages.upstreams.kubernetes``, on by default); where a node still lacks them the
message says which of the two is the cause.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bootstrap.cluster import vip
from bootstrap.inventory.models import Inventory, Node
from bootstrap.inventory.package_upstreams import KUBERNETES_REPO
from bootstrap.stages.base import NodeResult, StageContext
from bootstrap.stages.playbook import PlaybookStage, host_side_targets

#: The host side, run over SSH on installed nodes, and the fact it returns.
HOST_PLAYBOOK = "kubernetes_host.yml"
HOST_FACTS = "kubernetes_packages_report"
#: The upstream Kubernetes package repository (one per minor version) and where a node keeps its key.
UPSTREAM_REPO = KUBERNETES_REPO
UPSTREAM_KEY_ON_NODE = "/etc/apt/keyrings/kubernetes-apt-keyring.asc"
PACKAGES = ("kubeadm", "kubelet", "kubectl")
#: Where role api_endpoint stages kube-vip's static pods on a control plane (its ``api_endpoint_stage_dir``).
KUBE_VIP_STAGE_DIR = "/etc/rackctl"


def minor_of(version: str) -> str:
    """``1.33.5`` -> ``1.33``."""
    return ".".join(version.split(".")[:2])


def package_repo(inv: Inventory) -> dict[str, str] | None:
    """The Kubernetes repository the role adds, or None where the site's own source is the only one.

    Public archives: the upstream repository of the cluster's minor version. A mirror (the head node's or
    the site's) is the site's one source: it carries the packages or the node reports them missing.
    """
    if inv.site_services.packages.source != "public":
        return None
    uri = UPSTREAM_REPO.format(minor=minor_of(inv.cluster.resolved_versions().kubernetes))
    return {"uri": uri, "key_url": f"{uri}Release.key", "signed_by": UPSTREAM_KEY_ON_NODE}


def source_described(inv: Inventory) -> str:
    """Where the node's packages come from, in words."""
    repo = package_repo(inv)
    if repo is not None:
        return f"the public archives and {repo['uri']}"
    src = inv.site_services.packages
    return "the head node's mirror" if src.source == "mirror" else f"the site mirror {src.uri}"


def missing_hint(inv: Inventory) -> str:
    """Why the head node's mirror may lack the packages, and the fix ('' for the other sources)."""
    src = inv.site_services.packages
    if src.source != "mirror":
        return ""
    if src.upstreams.kubernetes.enabled is False:
        return (
            "the mirror is built without Kubernetes' repository (site_services.packages.upstreams.kubernetes is "
            "false): turn it on and run `rackctl mirror build`"
        )
    return "`rackctl mirror build` puts them into the mirror from Kubernetes' repository: run it, then this stage again"


def api_endpoint_fix(inv: Inventory) -> str:
    """The fix where a control plane's sources lack keepalived or haproxy (Debian packages), by package source."""
    src = inv.site_services.packages
    if src.source == "mirror":
        return (
            "`rackctl mirror build` puts them into the head node's mirror (role api_endpoint declares them in "
            "api_endpoint_packages): run it, then this stage again"
        )
    if src.source == "public":
        return "the node's Debian sources carry them: check its apt sources (role package_source), then run this again"
    return f"add them to the site mirror {src.uri}, then run this stage again"


def api_endpoint_action(inv: Inventory, node: Node) -> str:
    """What the host side does for the API VIP on ``node`` ('' off the control planes), for the plan."""
    if not node.is_control_plane:
        return ""
    if inv.kubernetes.api_endpoint == "keepalived-haproxy":
        return (
            f"keepalived + haproxy from {source_described(inv)} (the node fails, nothing changed, where they are "
            "missing), host/<node>/keepalived.conf and haproxy.cfg written after keepalived -t / haproxy -c "
            "accepted them, both enabled and started"
        )
    files = ", ".join(f"{KUBE_VIP_STAGE_DIR}/{name}" for name in vip.kube_vip_files(inv, node))
    return f"kube-vip static pod staged at {files} (0600; the cluster side places it before init/join)"


def api_endpoint_message(report: dict[str, Any]) -> str:
    """What role api_endpoint did on a control plane, in words ('' where it did not run)."""
    if report.get("staged"):
        staged = ", ".join(report["staged"])
        return f"kube-vip static pod staged at {staged} (placed by the cluster side before init/join)"
    if report.get("configs"):
        versions = ", ".join(f"{p} {v}" for p, v in (report.get("packages") or {}).items())
        return f"API VIP: {versions} installed; {', '.join(report['configs'])}; {report.get('services')}"
    return ""


class KubernetesHostPlay(PlaybookStage):
    """The kubernetes stage's host side: ``playbooks/kubernetes_host.yml`` (run by the stage, not registered)."""

    name = "kubernetes"
    description = "kubeadm/kubelet/kubectl at exactly the cluster's version, held; kubeadm config validated"
    playbook = HOST_PLAYBOOK
    facts_var = HOST_FACTS

    def __init__(self, cluster_dir: Path) -> None:
        self.cluster_dir = cluster_dir

    def extravars(self, ctx: StageContext) -> dict[str, Any]:
        inv = ctx.inventory
        return {
            "kubernetes_packages_repo": package_repo(inv),
            "kubernetes_packages_cluster_dir": str(self.cluster_dir.resolve()),
            "kubernetes_packages_cni": needs_cni_plugins(inv),
            "api_endpoint_cluster_dir": str(self.cluster_dir.resolve()),
            "api_endpoint_source": source_described(inv),
            "api_endpoint_missing_fix": api_endpoint_fix(inv),
            **super().extravars(ctx),
        }


def host_targets(ctx: StageContext) -> tuple[list[str], dict[str, str]]:
    """The nodes the host side runs on now, and the other nodes of the stage, each with why it does not run
    there (:func:`bootstrap.stages.playbook.host_side_targets`)."""
    return host_side_targets(ctx, ctx.nodes)


def needs_cni_plugins(inv: Inventory) -> bool:
    """The pod network calls the node's CNI plugins (``kubernetes-cni``) rather than installing its own."""
    return bool(inv.kubernetes.cni == "flannel")


def report_message(report: dict[str, Any], source: str, hint: str = "") -> str:
    """One node's outcome in words, from ``kubernetes_packages_report`` (``hint``: the fix where packages lack)."""
    version = report.get("version", "?")
    missing = list(report.get("missing") or [])
    if missing:
        available = report.get("available") or {}
        has = [f"{p} {v}" for p, v in available.items() if v]
        other = list(report.get("other_versions") or [])
        return (
            f"kubeadm/kubelet/kubectl not installed: the node's package sources ({source}) have no "
            f"{'/'.join(missing)} {version}"
            + (f" (they have {', '.join(has)})" if has else "")
            + (f"; already on the node, left as it is: {', '.join(other)}" if other else "")
            + (f"; {hint}" if hint else "")
            + "; nothing changed"
        )
    installed = report.get("installed") or {}
    text = (
        f"kubeadm/kubelet/kubectl {version} installed and held ({', '.join(f'{p} {v}' for p, v in installed.items())})"
    )
    if report.get("config_validated"):
        said = " ".join(str(line).strip() for line in report.get("validate_output") or [] if str(line).strip())
        text += (
            f"; kubeadm config validate --config {report.get('config')} passed on the node (read from a 0600 copy "
            "with well-formed dummies for the bootstrap token, certificate key and CA hash, which are made at "
            "init/join)" + (f" ({said})" if said else "")
        )
    else:
        text += "; the kubeadm config was not validated on the node (kubeadm config validate needs 1.26)"
    return text


def host_side(ctx: StageContext, cluster_dir: Path) -> dict[str, NodeResult]:
    """Run the host side on the nodes it can run on; per node, what it did or why it did not run.

    ``applied`` marks the nodes it ran on; a node where the role failed (a different version installed,
    kubeadm rejecting the config, unreachable) is not ok and carries Ansible's message.
    """
    run, not_run = host_targets(ctx)
    out = {n: NodeResult(n, ok=True, message=f"host side not run: {why}", applied=False) for n, why in not_run.items()}
    if not run:
        return out
    played = KubernetesHostPlay(cluster_dir).run(dataclasses.replace(ctx, nodes=run))
    source, hint = source_described(ctx.inventory), missing_hint(ctx.inventory)
    for node in run:
        res = played.nodes[node]
        if not res.ok:
            out[node] = res
            continue
        report = res.data.get(HOST_FACTS) or {}
        text = report_message(report, source, hint)
        vip_text = api_endpoint_message(report.get("api_endpoint") or {})
        if vip_text:  # "nothing changed" (the packages' words where the sources lack them) stays last, if still true
            quiet = text.endswith("; nothing changed") and not res.changed
            text = text.removesuffix("; nothing changed") + f"; {vip_text}" + ("; nothing changed" if quiet else "")
        out[node] = NodeResult(
            node,
            ok=True,
            message=f"host side applied ({res.data.get('changed', 0)} changed): {text}",
            changed=res.changed,
            data=res.data,
        )
    return out
