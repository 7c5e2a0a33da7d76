"""The real ``rackctl`` CLI in a subprocess, with a provision stage that needs no VM (a test double).

Provisioning for real needs lab VMs (PXE, an image write, a disk boot); these tests run on emulated iDRACs
without VMs, so the ``provision`` stage is replaced by a double that does the part that reaches the BMC for
real (a one-time PXE boot override and a power cycle through ``redfish_tools``, which the emulator logs)
inside the same journalled destructive ``install`` step the real stage uses. ``os-check`` is put back to
its placeholder (it would SSH into the node), so a run stops there with exit 4, as ``up`` does at a stage
not implemented yet.

Env ``FREEZE_AFTER_INSTALL=<file>``: once the install step is journalled completed, write this process's
PID to that file and wait to be killed (SIGKILL from the test).

argv: the rackctl arguments.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from bootstrap.cli import main
from bootstrap.oob import policy_for, target_for
from bootstrap.stages.base import (
    NodeResult,
    PlannedAction,
    Stage,
    StageContext,
    StageResult,
    load_stages,
    register_stage,
    unregister_stage,
)
from redfish_tools.boot import set_boot_once
from redfish_tools.connection import BmcConnection
from redfish_tools.fleet import run_on_bmc
from redfish_tools.power import set_power


def pxe_boot(conn: BmcConnection) -> None:
    set_boot_once(conn, "Pxe")
    set_power(conn, "cycle")


class PxeInstallDouble(Stage):
    """One-time PXE boot + power cycle on the emulated iDRAC, in the journalled ``install`` step."""

    name = "provision"
    description = "test double: PXE boot through the BMC (no VM behind it)"
    destructive = True

    def plan(self, ctx: StageContext) -> list[PlannedAction]:
        return [PlannedAction(self.name, n, "PXE boot (double)", destructive=True) for n in ctx.nodes]

    def run(self, ctx: StageContext) -> StageResult:
        results = {}
        for node in ctx.nodes:
            with ctx.step(node, "install", destructive=True) as step:
                if not step.already_done:
                    if step.interrupted and not ctx.confirm(f"{node}: the install was interrupted; redo it?"):
                        raise RuntimeError("not confirmed")
                    result = run_on_bmc(target_for(ctx.inventory, ctx.node(node)), pxe_boot, policy_for(ctx.state_dir))
                    if not result.ok:
                        raise RuntimeError(str(result.error))
            freeze = os.environ.get("FREEZE_AFTER_INSTALL")
            if freeze:
                Path(freeze).write_text(str(os.getpid()))
                while True:  # the test kills this process here
                    time.sleep(0.05)
            results[node] = NodeResult(node, ok=True, message="installed (double)")
        return StageResult.from_nodes(results)


load_stages()
unregister_stage("provision")
unregister_stage("os-check")
register_stage(PxeInstallDouble)
sys.argv = ["rackctl", *sys.argv[1:]]
main()
