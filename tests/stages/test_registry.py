"""Registering stages: a real one replaces the placeholder; conflicts and bad names are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.errors import EXIT_OK, EnvironmentMissing, InvalidInput, NotImplementedStage
from bootstrap.inventory import Inventory
from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from bootstrap.stages import base
from bootstrap.stages.base import (
    STAGE_ORDER,
    Stage,
    StageContext,
    get_stage,
    register_stage,
    registered_stages,
    unregister_stage,
)
from bootstrap.stages.runner import Runner, select

from .conftest import Recorder, make_all, make_stage


def test_nine_placeholders_in_order(registry: dict) -> None:
    stages = registered_stages()
    assert [s.name for s in stages] == list(STAGE_ORDER)
    assert not any(s.implemented for s in stages)
    assert all(s.description for s in stages)


def test_placeholder_run_raises_not_implemented(registry: dict, tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        ctx = StageContext("firmware", None, [], j, tmp_path, 1)
        with pytest.raises(NotImplementedStage, match="'firmware' is not implemented yet"):
            get_stage("firmware").run(ctx)


def test_real_stage_replaces_placeholder_and_can_step_aside(registry: dict) -> None:
    cls = make_stage("bios", Recorder())
    assert isinstance(get_stage("bios"), cls) and get_stage("bios").implemented
    other = type("OtherBios", (cls,), {"__module__": "elsewhere"})
    with pytest.raises(ValueError, match="already implemented"):
        register_stage(other)
    register_stage(type("LateBiosPlaceholder", (base.NotImplementedYet,), {"name": "bios"}))
    assert get_stage("bios").implemented, "a placeholder must not replace a real stage"
    unregister_stage("bios")
    assert not get_stage("bios").implemented


def test_unknown_names_are_refused(registry: dict) -> None:
    bogus = type("Bogus", (Stage,), {"name": "deploy", "plan": None, "run": None})
    with pytest.raises(ValueError, match="not one of preflight, discover"):
        register_stage(bogus)
    with pytest.raises(InvalidInput, match="unknown stage 'deploy'"):
        get_stage("deploy")


def test_a_stage_module_that_cannot_import_is_an_environment_error() -> None:
    with pytest.raises(EnvironmentMissing, match="stage 'x' cannot load"):
        base._import_stage_module("bootstrap.stages.no_such_module_for_test", "x")


def test_force_reimages_a_provisioned_node_and_redoes_its_steps(
    registry: dict, inventory: Inventory, hostnames: list[str], tmp_path: Path
) -> None:
    rec = Recorder()
    make_all(rec)
    opts = base.RunOptions(yes=True)
    sel = select(inventory, stages=list(STAGE_ORDER[:5]))
    assert Runner(inventory, tmp_path, sel, options=opts).run().exit_code == EXIT_OK
    node = hostnames[0]
    again = select(inventory, stages=["provision"], limit=[node], force=True)
    out = Runner(inventory, tmp_path, again, options=base.RunOptions(yes=True, force=True)).run()
    assert out.exit_code == EXIT_OK, out.message
    assert rec.count("provision", node, "wipe") == 2
    assert all(rec.count("provision", n, "wipe") == 1 for n in hostnames[1:])
    with Journal(tmp_path, readonly=True) as j:
        moves = [(t.from_state, t.to_state) for t in j.history(node)][-2:]
        assert moves == [
            (NodeState.PROVISIONED, NodeState.PROVISIONING),
            (NodeState.PROVISIONING, NodeState.PROVISIONED),
        ]
        assert "--force" in j.history(node)[-2].cause
