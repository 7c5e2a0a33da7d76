"""Preflight: before anything touches a server, check what rackctl itself needs for each node.

Read-only, in two kinds:

- Environment checks (:meth:`PreflightStage.check_environment`, run by the runner before any node is
  touched): this machine has the core tools (``rackctl doctor``; else ``EnvironmentMissing``, exit 3) and,
  for every selected node, the BMC password is readable (env var set and non-empty, or the password file
  exists with mode 0600 and holds the entry) and the CA bundle exists and parses
  (``bootstrap.inventory.environment_checks``). A failure is the operator's: ``OperatorEnvironmentError``,
  exit 2, every problem with its field, value and fix, and no node's journal state changes.
- Node checks (:meth:`PreflightStage.run`): each BMC is proved, not pinged
  (:func:`redfish_tools.proof.prove_bmc`): the service root read over TLS verified against the CA bundle
  or the pinned fingerprint, the credential accepted (a session created, and deleted at the end), the
  Redfish version and the iDRAC firmware read. A node whose BMC fails any of it fails with the cause and
  the fix (:func:`cause_of`: the TLS problem, a rejected credential naming its field and password source,
  no answer naming ``bmc.address``); the stage's data has per BMC ``ok`` and what it proved or why not.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bootstrap.doctor import run_doctor
from bootstrap.errors import EnvironmentMissing
from bootstrap.inventory.environment_checks import check_environment
from bootstrap.inventory.models import Inventory, Node
from bootstrap.oob import policy_for, targets_for
from bootstrap.stages.base import NodeResult, PlannedAction, Stage, StageContext, StageResult, register_stage
from redfish_tools.connection import ConnectionPolicy
from redfish_tools.fleet import BmcResult, run_fleet
from redfish_tools.proof import prove_bmc

#: One BMC's proof (root, login, one read, logout) is cut after 45 s; a dead address fails within seconds.
PREFLIGHT_POLICY = ConnectionPolicy(
    connect_timeout=3.0, read_timeout=15.0, retries=1, request_deadline_s=20.0, deadline_s=45.0
)


#: error kind -> what failed, in the operator's words
_FAILED = {
    "tls": "TLS not trusted",
    "auth": "credential rejected",
    "permission": "account lacks the privilege",
    "transport": "no answer",
    "timeout": "no answer",
    "deadline": "no answer in time",
    "session_limit": "no free session",
}


def _credential_source(inventory: Inventory, node: Node) -> str:
    """Where the node's BMC credential comes from, by name: field, user and password source (no secret)."""
    name = inventory.bmc_settings(node).credentials
    cred = inventory.credentials.get(name) if name else None
    if name is None or cred is None:
        return "the node's bmc.credentials"
    source = f"${cred.password_env}" if cred.password_env else f"the file {cred.password_file}"
    return f"credentials.{name} (user {cred.username!r}, password from {source})"


def fix_for(kind: str, inventory: Inventory, node: Node, address: str) -> str:
    """What the operator does about a failed proof of ``kind`` (a TLS failure carries its own fix)."""
    if kind == "auth":
        return f"make {_credential_source(inventory, node)} match the iDRAC's account"
    if kind == "permission":
        return f"give the iDRAC user of {_credential_source(inventory, node)} the Administrator role"
    if kind in ("transport", "timeout", "deadline"):
        return f"check bmc.address ({address}) and that this machine reaches the iDRAC's HTTPS port"
    if kind == "session_limit":
        return "close idle sessions in the iDRAC (iDRAC Settings > Users > Sessions) and run preflight again"
    return ""


def cause_of(result: BmcResult[Any], fix: str = "") -> str:
    """A failed proof's cause in one line: what failed (TLS, credential, no answer), the BMC's reason and
    the fix (a TLS failure's reason holds its own)."""
    error = result.error or {}
    kind = str(error.get("kind") or "error")
    reason = str(error.get("message") or "failed").removeprefix("TLS: ")
    text = f"BMC {_FAILED.get(kind, kind)}: {reason}"
    return f"{text}; fix: {fix}" if fix and "fix:" not in reason else text


@register_stage
class PreflightStage(Stage):
    """Controller-side checks of every selected node; nothing is changed."""

    name = "preflight"
    description = "Prove each BMC (TLS trust, credential, Redfish version, iDRAC firmware) and this machine's tools"

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        what = "prove the BMC: TLS, credential, Redfish and iDRAC versions"
        return [PlannedAction(self.name, n, what) for n in ctx.nodes]

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
        targets = targets_for(ctx.inventory, [ctx.node(n) for n in ctx.nodes])
        if ctx.options.insecure:  # `up --insecure`: an explicit opt-out of BMC certificate checks
            targets = [replace(t, insecure=True) for t in targets]
        results = run_fleet(targets, prove_bmc, policy=policy_for(ctx.state_dir, PREFLIGHT_POLICY))
        out: list[NodeResult] = []
        proved: dict[str, dict[str, Any]] = {}  # the stage's data in `up --json`: per BMC, ok and what it proved
        for target, result in zip(targets, results, strict=True):
            data: dict[str, Any] = {"insecure_tls": target.insecure}
            if result.ok and result.value is not None:
                data["bmc"] = result.value.as_dict()
                out.append(NodeResult(result.name, ok=True, message=result.value.summary(), data=data))
                proved[result.name] = {"ok": True, **data["bmc"]}
            else:
                data["error"] = result.error
                kind = str((result.error or {}).get("kind") or "error")
                fix = fix_for(kind, ctx.inventory, ctx.node(result.name), target.url)
                out.append(NodeResult(result.name, ok=False, message=cause_of(result, fix), data=data))
                proved[result.name] = {"ok": False, "cause": kind, "tls": target.tls.describe()}
            ctx.progress.node_done(self.name, result.name, out[-1].ok, out[-1].message)
        stage = StageResult.from_nodes(out)
        stage.data = {"bmcs": proved}
        return stage
