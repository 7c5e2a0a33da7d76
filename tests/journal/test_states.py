"""The node lifecycle state machine: every allowed move, and refused ones with a useful message."""

from __future__ import annotations

import itertools

import pytest

from bootstrap.errors import RackctlError
from bootstrap.journal.states import (
    FORCE_ONLY,
    MAIN_LINE,
    MAIN_TRANSITIONS,
    InvalidTransition,
    NodeState,
    allowed_targets,
    check_transition,
    is_backward,
)

S = NodeState
ALLOWED_MAIN = sorted(((src, dst) for src, targets in MAIN_TRANSITIONS.items() for dst in targets), key=str)


def test_main_line_is_the_documented_order() -> None:
    assert [s.value for s in MAIN_LINE] == [
        "registered",
        "discovered",
        "configured",
        "provisioning",
        "provisioned",
        "joined",
        "ready",
    ]


@pytest.mark.parametrize(("src", "dst"), ALLOWED_MAIN)
def test_every_main_transition_is_allowed(src: NodeState, dst: NodeState) -> None:
    check_transition("n1", src, dst, force=(src, dst) in FORCE_ONLY)


@pytest.mark.parametrize("src", MAIN_LINE)
def test_any_main_state_can_fail_or_enter_maintenance(src: NodeState) -> None:
    check_transition("n1", src, S.FAILED)
    check_transition("n1", src, S.MAINTENANCE)


@pytest.mark.parametrize(("src", "dst"), sorted(FORCE_ONLY, key=str))
def test_reimage_needs_force(src: NodeState, dst: NodeState) -> None:
    with pytest.raises(InvalidTransition, match=r"--force"):
        check_transition("gpu-01", src, dst)
    assert dst not in allowed_targets(src)
    assert dst in allowed_targets(src, force=True)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (S.REGISTERED, S.READY),
        (S.REGISTERED, S.PROVISIONED),
        (S.DISCOVERED, S.PROVISIONING),
        (S.CONFIGURED, S.JOINED),
        (S.PROVISIONING, S.JOINED),
        (S.PROVISIONING, S.CONFIGURED),
        (S.PROVISIONED, S.READY),
        (S.READY, S.REGISTERED),
        (S.JOINED, S.JOINED),
    ],
)
def test_refused_moves_name_node_states_and_what_is_allowed(src: NodeState, dst: NodeState) -> None:
    with pytest.raises(InvalidTransition) as info:
        check_transition("gpu-01", src, dst, force=True)
    message = str(info.value)
    assert "'gpu-01'" in message
    assert f"from {src.value} to {dst.value}" in message
    for allowed in allowed_targets(src, force=True):
        assert allowed.value in message
    assert isinstance(info.value, RackctlError)
    assert info.value.allowed == allowed_targets(src, force=True)


def test_all_pairs_outside_the_table_are_refused() -> None:
    for src, dst in itertools.product(MAIN_LINE, list(NodeState)):
        expected = dst in MAIN_TRANSITIONS[src] or dst in (S.FAILED, S.MAINTENANCE)
        assert (dst in allowed_targets(src, force=True)) is expected, (src, dst)


@pytest.mark.parametrize("left", MAIN_LINE)
def test_failed_retries_from_the_state_it_failed_in_or_earlier(left: NodeState) -> None:
    allowed = allowed_targets(S.FAILED, left_from=left)
    rank = MAIN_LINE.index(left)
    assert allowed == set(MAIN_LINE[: rank + 1]) | {S.MAINTENANCE}
    for later in MAIN_LINE[rank + 1 :]:
        with pytest.raises(InvalidTransition, match="failed in or an earlier one"):
            check_transition("n1", S.FAILED, later, left_from=left)


@pytest.mark.parametrize("left", [*MAIN_LINE, S.FAILED])
def test_maintenance_returns_only_to_the_state_it_left(left: NodeState) -> None:
    assert allowed_targets(S.MAINTENANCE, left_from=left) == {left}
    for other in set(NodeState) - {left}:
        with pytest.raises(InvalidTransition, match=f"only to the state it left \\({left.value}\\)"):
            check_transition("n1", S.MAINTENANCE, other, left_from=left)


def test_failed_cannot_fail_again_and_maintenance_not_reentered() -> None:
    assert S.FAILED not in allowed_targets(S.FAILED, left_from=S.JOINED)
    assert S.MAINTENANCE not in allowed_targets(S.MAINTENANCE, left_from=S.JOINED)


@pytest.mark.parametrize(
    ("src", "dst", "left", "backward"),
    [
        (S.REGISTERED, S.DISCOVERED, None, False),
        (S.READY, S.JOINED, None, True),
        (S.PROVISIONED, S.PROVISIONING, None, True),
        (S.JOINED, S.PROVISIONED, None, True),
        (S.FAILED, S.PROVISIONING, S.PROVISIONING, False),
        (S.FAILED, S.CONFIGURED, S.PROVISIONING, True),
        (S.MAINTENANCE, S.READY, S.READY, False),
        (S.READY, S.MAINTENANCE, None, False),
        (S.JOINED, S.FAILED, None, False),
    ],
)
def test_backward_moves(src: NodeState, dst: NodeState, left: NodeState | None, backward: bool) -> None:
    assert is_backward(src, dst, left_from=left) is backward
