"""network: every installed node's package source, baseline, networks and container runtime.

Runs ``playbooks/network.yml`` through the in-band seam (:class:`~bootstrap.stages.playbook.PlaybookStage`):
one play, one role per concern, in the order the playbook lists them (package source → baseline →
networks → container runtime). Per host: ok only when Ansible reached it and no task failed; the runner
records the stage as done only for those. A node that failed is reported with the task that failed and
the state it was last known in. Each host's changed tasks are returned (``changed_tasks``), so a second
run can be shown to change nothing. The plan lists, per node, what each role would set from the inventory.
Before any node is touched, the head node's mirror must hold every package the roles install (exit 2).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

from bootstrap.ansible_driver import PlaybookResult, playbook_path
from bootstrap.inband.node_services import time_servers
from bootstrap.inband.render import groups
from bootstrap.inventory.profiles import containerd_minimum, version_tuple
from bootstrap.mirror.check import require_mirror_ready
from bootstrap.mirror.site_vars import head_address, registry_vars
from bootstrap.mirror.upstreams import containerd_upstream_package
from bootstrap.stages.base import NodeResult, PlannedAction, StageContext, StageResult, register_stage
from bootstrap.stages.playbook import PlaybookStage

#: the fact role container_runtime reports: the containerd the node runs (``containerd``, as it said it)
RUNTIME_FACTS = "container_runtime_report"

#: what each role does, for the plan (a role not listed here is named as it is)
ROLE_SUMMARIES: dict[str, str] = {
    "package_source": "apt from the site's package source only",
    "networks": "netplan for the inventory's interfaces, bonds and VLANs (rollback if the node is cut off)",
}


@cache
def playbook_roles(playbook: str) -> tuple[str, ...]:
    """The roles ``playbooks/<playbook>`` applies, in order."""
    plays = yaml.safe_load(playbook_path(playbook).read_text()) or []
    out: list[str] = []
    for play in plays:
        for role in play.get("roles") or []:
            out.append(role["role"] if isinstance(role, dict) else str(role))
    return tuple(out)


def time_sources(ctx: StageContext, node: str) -> list[str]:
    """Where ``node``'s chrony gets time (role baseline's defaults): the site's NTP or the head nodes."""
    if node in groups(ctx.inventory)["head"]:
        return list(ctx.inventory.cluster.ntp_servers) or ["none: local clock, stratum 10"]
    return time_servers(ctx.inventory, ctx.options.environment)


def describe(ctx: StageContext, node: str, roles: tuple[str, ...], registry: str | None) -> str:
    """One line: what the playbook's roles would set on ``node``."""
    parts: list[str] = []
    for role in roles:
        if role == "baseline":
            parts.append(
                f"baseline (hostname {node}, /etc/hosts with {len(ctx.inventory.nodes)} nodes, "
                f"chrony from {', '.join(time_sources(ctx, node)) or 'nothing'}, time zone "
                f"{ctx.inventory.cluster.timezone}, overlay/br_netfilter/ip_forward, swap off, unattended "
                "upgrades that skip pinned packages)"
            )
        elif role == "container_runtime":
            where = f"pulling through {registry}" if registry else "pulling from upstream registries"
            minimum = containerd_minimum(ctx.inventory.cluster.resolved_versions().kubernetes)
            which = f"the package source's containerd, {minimum} or later" if minimum else "containerd"
            upstream = containerd_upstream_package(ctx.inventory)
            if upstream is not None:
                which = f"{upstream['package']} {upstream['version']} from the mirror's upstream, held"
            driver = f"runc on the {ctx.inventory.kubernetes.cgroup_driver} cgroup driver"
            parts.append(f"container_runtime ({which}, {driver}, {where}, a container run as a check)")
        else:
            parts.append(f"{role} ({ROLE_SUMMARIES[role]})" if role in ROLE_SUMMARIES else role)
    return "apply " + "; ".join(parts) + " over SSH"


def runtime_message(ctx: StageContext, report: dict[str, Any]) -> str:
    """A configured node's line: the containerd it runs, and the inventory's pin where that differs (the role
    installs the package source's containerd; it holds only the kubelet's minimum)."""
    running = str(report.get("containerd") or "?")
    pinned = ctx.inventory.cluster.resolved_versions().containerd
    upstream = containerd_upstream_package(ctx.inventory)
    if upstream is not None and running == pinned:
        return f"containerd {running} ({upstream['package']}, cluster.versions.containerd)"
    if version_tuple(running)[:2] == version_tuple(pinned)[:2]:
        return f"containerd {running}"
    return (
        f"containerd {running} from the package source (cluster.versions.containerd {pinned} not installed: "
        "site_services.packages.upstreams.containerd mirrors it)"
    )


@register_stage
class NetworkStage(PlaybookStage):
    """Apply the node roles (package source, baseline, networks, container runtime) with Ansible."""

    name = "network"
    description = "Configure each installed node over SSH: package source, baseline, networks, containerd"
    playbook = "network.yml"
    facts_var = RUNTIME_FACTS

    def registry(self, ctx: StageContext) -> str | None:
        """The registry containerd pulls through (``rackctl_registry.address``), if any."""
        environment = ctx.options.environment
        address = registry_vars(ctx.inventory, head_address(ctx.inventory, environment)).get("address")
        return str(address) if address else None

    def check_environment(self, ctx: StageContext) -> None:
        """Before any node is touched: with the head node's mirror as the package source, every package a
        role installs must be in it at its pinned version (exit 2 with the list otherwise)."""
        excluded = ctx.options.environment.out_of_band_only(ctx.inventory)
        if any(n not in excluded for n in ctx.nodes):
            require_mirror_ready(ctx.inventory, ctx.state_dir)

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        excluded = ctx.options.environment.out_of_band_only(ctx.inventory)
        roles = playbook_roles(self.playbook)
        registry = self.registry(ctx)
        return [
            PlannedAction(
                self.name,
                n,
                f"playbooks/{self.playbook}: {describe(ctx, n, roles, registry)}",
                skip=excluded.get(n),
            )
            for n in ctx.nodes
        ]

    def run(self, ctx: StageContext) -> StageResult:
        last_known = {n: ctx.state(n).value for n in ctx.nodes}
        result = super().run(ctx)
        for node, res in result.nodes.items():
            if not res.ok:
                res.message = f"{res.message or 'failed'} (last known state: {last_known.get(node, 'unknown')})"
        return result

    def _node_result(self, ctx: StageContext, node: str, result: PlaybookResult, *, record: bool = True) -> NodeResult:
        res = super()._node_result(ctx, node, result, record=record)
        outcome = result.hosts.get(node)
        if outcome is not None:
            res.data["changed_tasks"] = list(outcome.changed_tasks)
        recap = result.changed_by_host()
        if node in recap:
            res.data["changed"] = recap[node]
        report = res.data.get(RUNTIME_FACTS)
        if res.ok and isinstance(report, dict):
            res.message = runtime_message(ctx, report)
        return res
