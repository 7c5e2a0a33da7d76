"""The rollout scheduler: a hypothesis property test over fleet shapes and failure sequences, and examples."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bootstrap.rollout import NodePhase, Rollout, RolloutNode, RolloutPolicy, max_unavailable_count, plan_batches
from bootstrap.rollout.scheduler import InvalidPhase


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[RolloutNode], RolloutPolicy, set[str]]:
    """Any fleet: 0-5 control planes, 0-40 workers, some not Ready, some not needing work; a policy; and which
    nodes fail when they are worked on."""
    cps = draw(st.integers(0, 5))
    workers = draw(st.integers(0, 25))
    nodes = []
    for i in range(cps + workers):
        nodes.append(
            RolloutNode(
                f"n{i}",
                control_plane=i < cps,
                ready=draw(st.booleans()) or draw(st.booleans()),  # mostly Ready
                needs_work=draw(st.integers(0, 9)) > 0,
            )
        )
    budget: int | str = draw(st.one_of(st.integers(1, 12), st.integers(1, 100).map(lambda p: f"{p}%")))
    policy = RolloutPolicy(budget, draw(st.integers(1, 6)))
    failing = draw(st.sets(st.sampled_from([n.name for n in nodes]) if nodes else st.nothing()))
    return nodes, policy, failing


def down(rollout: Rollout, nodes: dict[str, RolloutNode], control_plane: bool) -> set[str]:
    return {n for n in nodes if nodes[n].control_plane == control_plane and rollout.unavailable(n)}


def check_batch(
    rollout: Rollout,
    nodes: dict[str, RolloutNode],
    batch_nodes: tuple[str, ...],
    cp: bool,
    workers_down_before: set[str],
) -> None:
    """The invariant, checked while the batch is down."""
    if cp:
        assert len(batch_nodes) == 1
        assert down(rollout, nodes, True) == set(batch_nodes), "two control planes down together"
        assert not down(rollout, nodes, False) - workers_down_before, "workers taken with a control plane"
    else:
        assert all(not nodes[n].control_plane for n in batch_nodes)
        now_down = down(rollout, nodes, False)
        added = now_down - workers_down_before
        # a worker that was up is taken only within max-unavailable; one already down (not Ready) may be
        # worked on (it costs nothing more), like Kubernetes replacing unavailable pods first
        assert not added or len(now_down) <= rollout.budget, (sorted(now_down), rollout.budget)
        assert len(now_down) <= max(rollout.budget, len(workers_down_before))


@settings(max_examples=250, deadline=None)
@given(fleets())
def test_no_schedule_exceeds_max_unavailable_or_takes_two_control_planes(
    case: tuple[list[RolloutNode], RolloutPolicy, set[str]],
) -> None:
    nodes, policy, failing = case
    by_name = {n.name: n for n in nodes}
    rollout = Rollout(nodes, policy)
    seen: set[str] = set()
    while True:
        workers_down = down(rollout, by_name, False)
        batch = rollout.next_batch()
        if batch is None:
            break
        assert len(rollout.failures) < policy.failure_threshold, "a batch started past the failure threshold"
        assert not seen & set(batch.nodes), "a node was scheduled twice"
        seen |= set(batch.nodes)
        assert all(by_name[n].needs_work for n in batch.nodes)
        check_batch(rollout, by_name, batch.nodes, batch.control_plane, workers_down)
        for name in batch.nodes:
            rollout.finish(name, name not in failing)
    failed = rollout.failures
    assert set(failed) <= failing
    if not rollout.stopped:
        # nothing is left without a reason
        for name in rollout.pending:
            assert name in rollout.blocked, name
    # control planes all before any worker
    kinds = [b.control_plane for b in rollout.batches]
    assert kinds == sorted(kinds, reverse=True)


@settings(max_examples=200, deadline=None)
@given(fleets())
def test_plan_batches_is_the_all_success_run(case: tuple[list[RolloutNode], RolloutPolicy, set[str]]) -> None:
    nodes, policy, _ = case
    schedule = plan_batches(nodes, policy)
    scheduled = [n for b in schedule.batches for n in b.nodes]
    assert len(scheduled) == len(set(scheduled))
    wanted = {n.name for n in nodes if n.needs_work}
    assert set(scheduled) | set(schedule.blocked) == wanted


def fleet(cps: int, workers: int, **not_ready: bool) -> list[RolloutNode]:
    out = [RolloutNode(f"cp{i}", control_plane=True, ready=not not_ready.get(f"cp{i}")) for i in range(cps)]
    out += [RolloutNode(f"w{i}", ready=not not_ready.get(f"w{i}")) for i in range(workers)]
    return out


def test_control_planes_one_at_a_time_then_workers_by_percentage() -> None:
    schedule = plan_batches(fleet(3, 10), RolloutPolicy("25%"))
    assert [b.nodes for b in schedule.batches[:3]] == [("cp0",), ("cp1",), ("cp2",)]
    assert [len(b.nodes) for b in schedule.batches[3:]] == [2, 2, 2, 2, 2]  # 25% of 10 rounds down to 2
    assert schedule.budget == 2 and not schedule.blocked


def test_a_not_ready_control_plane_goes_first_and_two_block_the_rest() -> None:
    assert plan_batches(fleet(3, 0, cp2=True), RolloutPolicy()).batches[0].nodes == ("cp2",)
    schedule = plan_batches(fleet(3, 2, cp1=True, cp2=True), RolloutPolicy())
    assert schedule.batches == []
    assert "etcd quorum" in schedule.blocked["cp0"] and set(schedule.blocked) == {"cp0", "cp1", "cp2", "w0", "w1"}


def test_failures_use_the_budget_and_stop_at_the_threshold() -> None:
    rollout = Rollout(fleet(0, 6), RolloutPolicy(2, failure_threshold=2))
    first = rollout.next_batch()
    assert first is not None and first.nodes == ("w0", "w1")
    rollout.finish("w0", ok=False)
    rollout.finish("w1", ok=True)
    second = rollout.next_batch()
    assert second is not None and second.nodes == ("w2",)  # w0 failed: still down, one slot left
    rollout.finish("w2", ok=False)
    assert rollout.stopped and rollout.next_batch() is None
    assert rollout.pending == ["w3", "w4", "w5"]


def test_phases_refuse_bad_moves_and_counts_validate() -> None:
    rollout = Rollout(fleet(0, 1), RolloutPolicy())
    with pytest.raises(InvalidPhase):
        rollout.finish("w0", ok=True)  # never started
    assert rollout.phase["w0"] is NodePhase.PENDING
    assert max_unavailable_count("10%", 5) == 1 and max_unavailable_count("50%", 9) == 4
    for bad in (0, "0%", "150%", "ten", True):
        with pytest.raises(ValueError, match="max_unavailable"):
            max_unavailable_count(bad, 10)  # type: ignore[arg-type]


@st.composite
def interrupted_runs(draw: st.DrawFn) -> tuple[list[RolloutNode], RolloutPolicy, set[str], list[tuple[int, int]]]:
    """A fleet (as :func:`fleets`), and for each run until the last: after how many batches it is stopped,
    and which of the stopped batch's nodes had their jobs finish on the BMC anyway (a bit mask)."""
    nodes, policy, failing = draw(fleets())
    stops = draw(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2**12)), max_size=4))
    return nodes, policy, failing, stops


@settings(max_examples=200, deadline=None)
@given(interrupted_runs())
def test_runs_stopped_at_any_batch_and_resumed_keep_the_rules(
    case: tuple[list[RolloutNode], RolloutPolicy, set[str], list[tuple[int, int]]],
) -> None:
    """Each run starts from what is really down: the nodes a stopped run left in maintenance still needing
    work (down, taken first), never the ones whose jobs finished (settled before the schedule). Within
    every run the rules hold; nothing done is scheduled again; at the end every node is done, failed, or
    blocked with its reason."""
    nodes, policy, failing, stops = case
    shape = {n.name: n for n in nodes}
    done: set[str] = set()
    maintenance: set[str] = set()  # left down by a stopped or failed run, still needing work
    failed_once: set[str] = set()
    for run, stop in enumerate([*stops, None]):
        fleet = [
            RolloutNode(
                n.name,
                control_plane=n.control_plane,
                ready=(n.ready or n.name in done) and n.name not in maintenance,
                needs_work=n.needs_work and n.name not in done,
            )
            for n in nodes
        ]
        by_name = {n.name: n for n in fleet}
        rollout = Rollout(fleet, policy)
        started = 0
        while True:
            workers_down = down(rollout, by_name, False)
            batch = rollout.next_batch()
            if batch is None:
                break
            assert not done & set(batch.nodes), "a node at the baseline was worked on again"
            check_batch(rollout, by_name, batch.nodes, batch.control_plane, workers_down)
            if stop is not None and started == stop[0]:  # stopped mid-batch: some jobs finish anyway
                for i, name in enumerate(batch.nodes):
                    (done if stop[1] >> i & 1 else maintenance).add(name)
                    if name in done:
                        maintenance.discard(name)
                break
            started += 1
            for name in batch.nodes:
                ok = name not in failing or name in failed_once
                failed_once |= {name} & failing
                rollout.finish(name, ok)
                if ok:
                    done.add(name)
                    maintenance.discard(name)
                else:
                    maintenance.add(name)
        if stop is None:
            left = {n for n in shape if shape[n].needs_work} - done
            assert left <= set(rollout.failures) | set(rollout.pending), run
            if not rollout.stopped:
                assert all(name in rollout.blocked for name in rollout.pending)
