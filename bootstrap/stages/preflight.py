"""Preflight: before anything touches a server, check what rackctl itself needs for each node.

Read-only. Per node: BMC credentials resolve (without showing them), the TLS trust for the BMC exists
(CA bundle readable, or a pinned fingerprint, or an explicit insecure flag), and the BMC answers on TCP.
The controller must have the core tools (``rackctl doctor``).
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from bootstrap.doctor import run_doctor
from bootstrap.errors import EnvironmentMissing, InvalidInput
from bootstrap.inventory.secrets import resolve_bmc_credentials
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

    def run(self, ctx: StageContext) -> StageResult:
        missing = [f for f in run_doctor({"core"}) if not f.ok]
        if missing:
            names = ", ".join(f"{f.check.name} ({f.check.install})" for f in missing)
            raise EnvironmentMissing(f"this machine lacks: {names}")
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(ctx.nodes)))) as pool:
            results = list(pool.map(lambda n: self._check_node(ctx, n), ctx.nodes))
        return StageResult.from_nodes(results)

    def _check_node(self, ctx: StageContext, hostname: str) -> NodeResult:
        inv = ctx.inventory
        node = ctx.node(hostname)
        problems: list[str] = []
        try:
            resolve_bmc_credentials(inv, node)
        except InvalidInput as exc:
            problems.append("; ".join(str(p) for p in exc.problems) or exc.message)
        settings = inv.bmc_settings(node)
        insecure = bool(settings.insecure) or ctx.options.insecure
        if not insecure and settings.fingerprint is None:
            if settings.ca_file is None:
                problems.append("no CA bundle or fingerprint to verify the BMC certificate")
            elif not inv.resolve_path(settings.ca_file).is_file():
                problems.append(f"CA bundle {settings.ca_file} is missing")
        unreachable = bmc_reachable(node.bmc.url)
        if unreachable:
            problems.append(unreachable)
        message = "; ".join(problems)
        ctx.progress.node_done(self.name, hostname, not problems, message)
        return NodeResult(hostname, ok=not problems, message=message, data={"insecure_tls": insecure})
