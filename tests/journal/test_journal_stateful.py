"""Property test: random sequences of moves, steps and reopenings keep the journal consistent.

A tiny model tracks what the journal must say (state, where a failed/maintenance node came from, whether
a completed step still counts); every move the state machine allows must succeed and every other one must
be refused without changing anything.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from bootstrap.journal.states import FORCE_ONLY, MAIN_LINE, InvalidTransition, NodeState, allowed_targets
from bootstrap.journal.store import Journal

NODES = ("a", "b")
S = NodeState


class JournalMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="journal-sm-"))
        self.journal = Journal(self.dir)
        self.journal.register_nodes(NODES)
        self.state = dict.fromkeys(NODES, S.REGISTERED)
        self.failed_from: dict[str, NodeState | None] = dict.fromkeys(NODES)
        self.maint_from: dict[str, NodeState | None] = dict.fromkeys(NODES)
        self.step_counts: dict[str, bool] = dict.fromkeys(NODES, False)  # a completed step still counts
        self.moves = dict.fromkeys(NODES, 1)

    def left_from(self, node: str) -> NodeState | None:
        if self.state[node] is S.FAILED:
            return self.failed_from[node]
        if self.state[node] is S.MAINTENANCE:
            return self.maint_from[node]
        return None

    @rule(node=st.sampled_from(NODES), to=st.sampled_from(list(NodeState)), force=st.booleans())
    def move(self, node: str, to: NodeState, force: bool) -> None:
        current, left = self.state[node], self.left_from(node)
        allowed = allowed_targets(current, left_from=left, force=force)
        try:
            self.journal.transition(node, to, "property test", force=force)
        except InvalidTransition:
            assert to not in allowed
            assert self.journal.state(node) is current
            return
        assert to in allowed
        self.moves[node] += 1
        if to is S.FAILED and current is not S.MAINTENANCE:
            self.failed_from[node] = current
        if to is S.MAINTENANCE:
            self.maint_from[node] = current
        self.state[node] = to
        # undoing progress (a reimage, a retry from an earlier state, ready -> joined) redoes steps
        origin = left if current in (S.FAILED, S.MAINTENANCE) else current
        backward = to in MAIN_LINE and origin in MAIN_LINE
        if backward and (MAIN_LINE.index(to) < MAIN_LINE.index(origin) or (origin, to) in FORCE_ONLY):
            self.step_counts[node] = False

    @rule(node=st.sampled_from(NODES))
    def complete_step(self, node: str) -> None:
        with self.journal.step(None, node, "provision", "write-image", destructive=True):
            pass
        self.step_counts[node] = True

    @rule()
    def reopen(self) -> None:
        self.journal.close()
        self.journal = Journal(self.dir)

    @invariant()
    def journal_matches_model(self) -> None:
        if not hasattr(self, "journal"):
            return
        for node in NODES:
            status = self.journal.status(node)
            assert status.state is self.state[node]
            assert status.left_from() == self.left_from(node)
            history = self.journal.history(node)
            assert len(history) == self.moves[node]
            assert history[-1].to_state is self.state[node]
            for before, after in itertools.pairwise(history):
                assert after.from_state is before.to_state
            step = self.journal.step(None, node, "provision", "write-image", destructive=True)
            assert step.already_done is self.step_counts[node]

    def teardown(self) -> None:
        if hasattr(self, "journal"):
            self.journal.close()
            shutil.rmtree(self.dir, ignore_errors=True)


JournalMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestJournalMachine = JournalMachine.TestCase
