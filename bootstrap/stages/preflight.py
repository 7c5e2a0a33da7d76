"""Preflight: before anything touches a server, check what rackctl itself needs for each node.

Read-only, in two kinds:

- Environment checks (:meth:`PreflightStage.check_environment`, run by the runner before any node is
  touched): this machine has the core tools (``rackctl doctor``; else ``EnvironmentMissing``, exit 3) and,
  for every selected node, the BMC password is readable (env var set and non-empty, or the password file
  exists with mode 0600 and holds the entry) and the CA bundle exists and parses
  (``bootstrap.inventory.environment_checks``). A failure is the operator's: ``OperatorEnvironmentError``,
  exit 2, every problem with its field, value and fix, and no node's journal state changes.
- Node checks (:meth:`PreflightStage.run`): each BMC answers on TCP. A BMC that does not answer fails
  that node.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from bootstrap.doctor import run_doctor
from bootstrap.errors import EnvironmentMissing
from bootstrap.inventory.environment_checks import check_environment
from bootstrap.stages.base import NodeResult, PlannedAction, Stage, StageContext, StageResult, register_stage

CONNECT_TIMEOUT_S = 3.0


def bmc_reachable(url: str, timeout: float = CONNECT_TIMEOUT_S) -> str:
    """'' when a TCP connection to the BMC's HTTPS port opens, else why not."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ""
    except OSError as exc:
        return f"BMC {host}:{port} does not answer ({exc.strerror or exc.__class__.__name__})"


@register_stage
class PreflightStage(Stage):
    """Controller-side checks of every selected node; nothing is changed."""

    name = "preflight"
    description = "Check credentials, TLS trust and reachability of each BMC, and this machine's tools"

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        return [PlannedAction(self.name, n, "check BMC credentials, TLS trust, reachability") for n in ctx.nodes]

    def check_environment(self, ctx: StageContext) -> None:
        """This machine's part: core tools, readable BMC passwords, CA bundles; raises, touches nothing."""
        missing = [f for f in run_doctor({"core"}) if not f.ok]
        if missing:
            names = ", ".join(f"{f.check.name} ({f.check.install})" for f in missing)
            raise EnvironmentMissing(f"this machine lacks: {names}")
        nodes = [ctx.node(hostname) for hostname in ctx.nodes]
        check_environment(ctx.inventory, nodes, insecure=ctx.options.insecure)

    def run(self, ctx: StageContext) -> StageResult:
        self.check_environment(ctx)  # also when run directly, without the runner
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(ctx.nodes)))) as pool:
            results = list(pool.map(lambda n: self._check_node(ctx, n), ctx.nodes))
        return StageResult.from_nodes(results)

    def _check_node(self, ctx: StageContext, hostname: str) -> NodeResult:
        node = ctx.node(hostname)
        insecure = bool(ctx.inventory.bmc_settings(node).insecure) or ctx.options.insecure
        message = bmc_reachable(node.bmc.url)
        ctx.progress.node_done(self.name, hostname, not message, message)
        return NodeResult(hostname, ok=not message, message=message, data={"insecure_tls": insecure})
