"""Shared fixtures: a clean stage registry per test and simple real stages that journal their steps."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bootstrap.inventory import Inventory, load_inventory
from bootstrap.stages import base
from bootstrap.stages.base import (
    NodeResult,
    PlannedAction,
    Stage,
    StageContext,
    StageResult,
    placeholder_for,
    register_stage,
)
from bootstrap.triton.server import TritonServer
from tests.cluster.apiserver import ApiServer
from tests.kube_objects import KubeObjects
from tests.triton_serving import host_address, serving_triton

EXAMPLE_INVENTORY = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Stage]]:
    """Every stage a placeholder, whatever real stages exist in the tree; restored afterwards."""
    fresh = {name: placeholder_for(name)() for name in base.STAGE_ORDER}
    monkeypatch.setattr(base, "_REGISTRY", fresh)
    monkeypatch.setattr(base, "_LOADED", True)
    yield fresh


@pytest.fixture
def live_state(kube: KubeObjects, kube_apiserver: ApiServer, tmp_path: Path) -> tuple[Path, str]:
    """A state directory whose kubeconfig reaches the real API server, and a fresh namespace (removed after the
    test) for the models."""
    state_dir = tmp_path / "state"
    kube_apiserver.write_kubeconfig(state_dir / "kubeconfig")
    namespace = f"live-{uuid.uuid4().hex[:6]}"
    kube.namespaces.add(namespace)
    return state_dir, namespace


@pytest.fixture
def inventory() -> Inventory:
    """The example inventory (the Dell validated design rack), loaded by the real loader."""
    return load_inventory(EXAMPLE_INVENTORY)


@pytest.fixture
def hostnames(inventory: Inventory) -> list[str]:
    return [n.hostname for n in inventory.nodes]


class StepFailed(Exception):
    """A test step reporting failure."""


class Recorder:
    """What the test stages did: (stage, node, step) for every step body that ran."""

    def __init__(self) -> None:
        self.effects: list[tuple[str, str, str]] = []
        self.runs: list[tuple[str, tuple[str, ...]]] = []

    def count(self, stage: str, node: str | None = None, step: str | None = None) -> int:
        return sum(1 for s, n, k in self.effects if s == stage and node in (None, n) and step in (None, k))


def make_stage(
    name: str,
    recorder: Recorder,
    *,
    steps: tuple[str, ...] = ("work",),
    destructive: bool = False,
    fail: Callable[[str, str], str | None] = lambda node, step: None,
    before_step: Callable[[StageContext, str, str], None] = lambda ctx, node, step: None,
) -> type[Stage]:
    """Register a real stage ``name`` whose steps append to ``recorder``; ``fail`` gives a failure message."""

    def plan(self: Stage, ctx: StageContext) -> list[PlannedAction]:
        return [PlannedAction(name, n, f"{name} {'+'.join(steps)}", destructive=destructive) for n in ctx.nodes]

    def run(self: Stage, ctx: StageContext) -> StageResult:
        recorder.runs.append((name, tuple(ctx.nodes)))
        results: dict[str, NodeResult] = {}
        for node in ctx.nodes:
            results[node] = NodeResult(node, ok=True)
            try:
                for key in steps:
                    with ctx.step(node, key, destructive=destructive) as step:
                        if step.already_done:
                            continue
                        before_step(ctx, node, key)
                        message = fail(node, key)
                        if message:
                            raise StepFailed(message)
                        recorder.effects.append((name, node, key))
            except StepFailed as exc:  # the step is journalled as failed; the node fails
                results[node] = NodeResult(node, ok=False, message=str(exc))
            ctx.progress.node_done(name, node, results[node].ok, results[node].message)
        return StageResult.from_nodes(results)

    cls = type(
        f"Test{name.capitalize()}Stage",
        (Stage,),
        {"name": name, "description": f"test {name}", "destructive": destructive, "plan": plan, "run": run},
    )
    cls.__module__ = f"tests.stages.fake_{name}"
    return register_stage(cls)


def make_all(recorder: Recorder, **overrides: dict[str, Any]) -> None:
    """Register real test stages for all nine names (``provision`` destructive)."""
    for name in base.STAGE_ORDER:
        kwargs: dict[str, Any] = {"destructive": name == "provision"}
        if name == "provision":
            kwargs["steps"] = ("wipe", "write-image", "set-boot")
        kwargs.update(overrides.get(name, {}))
        make_stage(name, recorder, **kwargs)


@pytest.fixture(scope="session")
def triton_backend() -> Iterator[tuple[str, TritonServer]]:
    """A real tritonserver (nvidia-pytriton) on a non-loopback address of this host, for the whole session:
    ``(address, server)`` (tests/triton_serving.py). Skips, saying why, without the wheel or such an address."""
    if importlib.util.find_spec("pytriton") is None:
        pytest.skip("nvidia-pytriton wheel (tritonserver) not installed")
    address = host_address()
    if address is None:
        pytest.skip("no global IPv4 address on this host (a Service endpoint may not be loopback)")
    with serving_triton(address) as server:
        yield address, server
