"""A run killed (SIGKILL) at any point of a destructive step resumes and never repeats a completed step."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bootstrap.errors import EXIT_NOT_IMPLEMENTED
from bootstrap.inventory import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal

from .conftest import EXAMPLE_INVENTORY

WORKER = Path(__file__).with_name("crash_worker.py")
REPO = Path(__file__).resolve().parents[2]
PROVISION_STEPS = ("wipe", "write-image", "set-boot")


def start(state: Path, effects: Path, nodes: list[str], kill: tuple[str, str, str, Path] | None = None):
    args = [sys.executable, str(WORKER), str(state), str(EXAMPLE_INVENTORY), str(effects), ",".join(nodes)]
    if kill:
        args += [kill[0], kill[1], kill[2], str(kill[3])]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def kill_when_frozen(proc: subprocess.Popen, ready: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None:
            pytest.fail(f"worker ended before the kill point: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("worker never reached the kill point")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


def counts(effects: Path) -> collections.Counter:
    return collections.Counter(tuple(line.split()) for line in effects.read_text().splitlines())


@pytest.mark.parametrize("phase", ["started", "effect", "completed"])
@pytest.mark.parametrize("step", PROVISION_STEPS)
def test_killed_mid_destructive_step_resumes_without_repeating(
    inventory: Inventory, tmp_path: Path, step: str, phase: str
) -> None:
    nodes = [n.hostname for n in inventory.nodes][:2]
    victim = nodes[1]
    state, effects, ready = tmp_path / "state", tmp_path / "effects.log", tmp_path / "ready"
    proc = start(state, effects, nodes, (victim, step, phase, ready))
    kill_when_frozen(proc, ready)
    assert proc.returncode == -signal.SIGKILL
    before = counts(effects)

    resumed = start(state, effects, nodes)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == EXIT_NOT_IMPLEMENTED, err
    result = json.loads(out)
    assert result["message"].startswith("stage 'os-check' is not implemented yet")
    after = counts(effects)

    for node in nodes:
        for stage in ("preflight", "discover", "firmware", "bios"):
            assert after[(stage, node, "check")] == 1, (stage, node)
        for key in PROVISION_STEPS:
            redone = node == victim and key == step and phase == "effect"
            # only a step whose effect happened but never completed runs twice (the stage was asked)
            assert after[("provision", node, key)] == (2 if redone else 1), (node, key, before, after)

    seen = effects.with_suffix(".interrupted")
    interrupted = seen.read_text().split("\n")[:-1] if seen.exists() else []
    assert interrupted == ([] if phase == "completed" else [f"{victim} {step}"])

    with Journal(state, readonly=True) as journal:
        assert {journal.state(n) for n in nodes} == {NodeState.PROVISIONED}
        runs = journal.runs()
        assert [r.status for r in runs] == ["not_implemented", "interrupted"]
        assert journal.last_step(victim, "provision", step).status == "completed"
