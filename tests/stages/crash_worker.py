"""A ``rackctl up`` in a separate process whose ``provision`` stage can freeze at a chosen point.

Used by ``test_crash_resume.py``: the parent kills this process with SIGKILL while it is frozen (a real
crash: no cleanup runs), then runs it again to resume. Every side effect of a step is appended (and
fsynced) to an effects file so the parent can count how often each one really happened.

argv: STATE_DIR INVENTORY EFFECTS_FILE LIMIT [KILL_NODE KILL_STEP KILL_PHASE READY_FILE]
KILL_PHASE: started (inside the step, before its effect), effect (after the effect, before the step is
recorded completed), completed (after the step was recorded completed, before the next one).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from bootstrap.inventory import load_inventory
from bootstrap.stages import base
from bootstrap.stages.base import (
    NodeResult,
    PlannedAction,
    Stage,
    StageContext,
    StageResult,
    register_placeholders,
    register_stage,
)
from bootstrap.stages.runner import Runner, select

state_dir, inventory_path, effects_path, limit = sys.argv[1:5]
kill = tuple(sys.argv[5:9]) if len(sys.argv) > 5 else None
EFFECTS = Path(effects_path)
SEEN = EFFECTS.with_suffix(".interrupted")


def effect(stage: str, node: str, step: str) -> None:
    with EFFECTS.open("a") as fh:
        fh.write(f"{stage} {node} {step}\n")
        fh.flush()
        os.fsync(fh.fileno())


def freeze_if(node: str, step: str, phase: str) -> None:
    if kill and kill[:3] == (node, step, phase):
        Path(kill[3]).write_text(str(os.getpid()))
        while True:  # the parent kills us here
            time.sleep(0.05)


def make(name: str, steps: tuple[str, ...], destructive: bool) -> None:
    def plan(self: Stage, ctx: StageContext) -> list[PlannedAction]:
        return [PlannedAction(name, n, name, destructive=destructive) for n in ctx.nodes]

    def run(self: Stage, ctx: StageContext) -> StageResult:
        results = {}
        for node in ctx.nodes:
            for key in steps:
                with ctx.step(node, key, destructive=destructive) as step:
                    if step.already_done:
                        continue
                    if step.interrupted:
                        with SEEN.open("a") as fh:
                            fh.write(f"{node} {key}\n")
                        if destructive and not ctx.confirm(f"{key} on {node} was interrupted; redo it?"):
                            raise RuntimeError("not confirmed")
                    freeze_if(node, key, "started")
                    effect(name, node, key)
                    freeze_if(node, key, "effect")
                freeze_if(node, key, "completed")
            results[node] = NodeResult(node, ok=True)
        return StageResult.from_nodes(results)

    register_stage(
        type(
            f"Crash{name.capitalize()}",
            (Stage,),
            {"name": name, "destructive": destructive, "plan": plan, "run": run},
        )
    )


register_placeholders()
base._LOADED = True  # only the stages below, whatever else exists in the tree
for stage_name in ("preflight", "discover", "firmware", "bios"):
    make(stage_name, ("check",), destructive=False)
make("provision", ("wipe", "write-image", "set-boot"), destructive=True)

inventory = load_inventory(Path(inventory_path))
selection = select(inventory, limit=limit.split(","))
outcome = Runner(inventory, Path(state_dir), selection, options=base.RunOptions(yes=True)).run()
print(json.dumps(outcome.as_dict()))
sys.exit(outcome.exit_code)
