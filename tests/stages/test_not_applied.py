"""The runner's "rendered, not applied" outcome, with simple stages: journal status, no node moves, exit 5.

The stages here are small real stages written for the test (``conftest.make_stage`` and the two below);
the journal is the real SQLite one.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from bootstrap.errors import EXIT_FAILED, EXIT_NOT_APPLIED
from bootstrap.inventory import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import STAGE_STEP, STEP_RENDERED, Journal
from bootstrap.stages.base import (
    NOT_APPLIED,
    NodeResult,
    PlannedAction,
    Rendered,
    Stage,
    StageContext,
    StageResult,
    register_stage,
)
from bootstrap.stages.runner import plan, select

from .conftest import Recorder, make_stage
from .test_runner import states, up

S = NodeState
BEFORE = ("preflight", "discover", "firmware", "bios", "provision", "os-check", "network")


def rendering_stage(name: str, seen: dict[str, dict[str, str]], *, claims_applied: bool = False) -> type[Stage]:
    """A stage that writes one file under ``<state-dir>/<name>`` and reports every node rendered, not applied.

    With ``claims_applied`` it (wrongly) reports the nodes the runner says it cannot apply to as applied.
    """

    class _Rendering(Stage):
        applies: ClassVar[bool] = claims_applied
        renders_when_blocked: ClassVar[bool] = True
        description: ClassVar[str] = f"render {name}"

        def plan(self, ctx: StageContext) -> list[PlannedAction]:
            return [PlannedAction(self.name, n, f"render {name}; {NOT_APPLIED}", applies=False) for n in ctx.nodes]

        def run(self, ctx: StageContext) -> StageResult:
            seen[self.name] = dict(ctx.cannot_apply)
            out = ctx.state_dir / self.name
            out.mkdir(parents=True, exist_ok=True)
            (out / "artefact.yaml").write_text("kind: Test\n")
            if claims_applied:
                return StageResult.from_nodes([NodeResult(n, ok=True) for n in ctx.nodes])
            rendered = Rendered(out, ("test schema",), f"{self.name} has no apply path")
            return StageResult.not_applied(ctx.nodes, rendered, message=f"{self.name}: 1 file")

    cls = type(f"Test{name.capitalize()}Rendering", (_Rendering,), {"name": name})
    cls.__module__ = f"tests.stages.fake_{name}"
    return register_stage(cls)


def bring_to_network(rec: Recorder) -> None:
    for name in BEFORE:
        make_stage(name, rec, destructive=name == "provision")


def test_rendered_stage_is_journalled_rendered_moves_no_node_and_exits_5(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec, seen = Recorder(), {}
    bring_to_network(rec)
    rendering_stage("kubernetes", seen)
    make_stage("nvidia", rec)  # a stage that needs joined nodes and cannot render: still blocked
    out = up(inventory, tmp_path, stages=[*BEFORE, "kubernetes"])
    assert out.exit_code == EXIT_NOT_APPLIED, out.message
    assert out.status == "not_applied" and out.not_applied == ["kubernetes"]
    assert f"{NOT_APPLIED}: kubernetes" in out.message
    kube = out.stages[-1]
    assert (kube.status, kube.applied, kube.artefacts) == ("rendered", False, str(tmp_path / "kubernetes"))
    assert f"{NOT_APPLIED}: kubernetes has no apply path" in kube.message
    assert {n["status"] for n in kube.nodes.values()} == {STEP_RENDERED}
    assert set(states(tmp_path).values()) == {S.PROVISIONED}, "a rendered stage moved a node"
    with Journal(tmp_path, readonly=True) as j:
        assert j.run(out.run_id).status == "not_applied"
        for node in hostnames:
            step = j.last_step(node, "kubernetes", STAGE_STEP)
            assert step is not None and step.status == STEP_RENDERED
            assert step.detail["artefacts"] == str(tmp_path / "kubernetes")
            assert step.detail["why"] == "kubernetes has no apply path"
            assert j.stage_done(node, "kubernetes") is None
            assert [r.stage for r in j.not_applied(node)] == ["kubernetes"]
    data = out.as_dict()
    assert data["ok"] is False and "error" not in data and data["exit_code"] == EXIT_NOT_APPLIED
    assert data["stages"][-1]["applied"] is False and data["stages"][0]["applied"] is True

    # nothing was applied, so the next run renders again; a plain stage needing `joined` is still blocked
    again = up(inventory, tmp_path)
    assert again.exit_code == EXIT_FAILED
    assert [s.status for s in again.stages if s.name in ("kubernetes", "nvidia")] == ["rendered", "failed"]
    assert "needs joined" in again.message


def test_a_later_stage_still_renders_and_says_its_predecessor_was_not_applied(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec, seen = Recorder(), {}
    bring_to_network(rec)
    rendering_stage("kubernetes", seen)
    rendering_stage("nvidia", seen)
    rendering_stage("triton", seen)
    out = up(inventory, tmp_path)
    assert out.exit_code == EXIT_NOT_APPLIED, out.message
    assert out.not_applied == ["kubernetes", "nvidia", "triton"]
    assert seen["kubernetes"] == {}, "provisioned nodes: kubernetes could apply if it had the means"
    assert set(seen["nvidia"]) == set(hostnames)
    reason = seen["nvidia"][hostnames[0]]
    assert reason == f"the node is provisioned; applying nvidia needs it joined (kubernetes {NOT_APPLIED})"
    assert set(states(tmp_path).values()) == {S.PROVISIONED}
    planned = plan(inventory, tmp_path, select(inventory))
    assert planned["not_applied"] == ["kubernetes", "nvidia", "triton"]
    nvidia = next(s for s in planned["stages"] if s["name"] == "nvidia")
    assert nvidia["nodes_to_run"] == hostnames and all(a["applies"] is False for a in nvidia["actions"])


def test_the_runner_never_takes_a_node_it_could_not_apply_to_as_applied(
    registry: dict, inventory: Inventory, tmp_path: Path
) -> None:
    seen: dict[str, dict[str, str]] = {}
    rendering_stage("kubernetes", seen, claims_applied=True)
    out = up(inventory, tmp_path, stages=["kubernetes"])
    assert out.exit_code == EXIT_NOT_APPLIED
    assert set(states(tmp_path).values()) == {S.REGISTERED}, "a node below `requires` was moved to joined"
    assert all(n["status"] == STEP_RENDERED for n in out.stages[0].nodes.values())
    assert all("applying kubernetes needs it provisioned" in n["message"] for n in out.stages[0].nodes.values())
