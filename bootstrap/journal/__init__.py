"""The run journal: node lifecycle states, transitions, steps and facts in SQLite under the state dir."""

from bootstrap.journal.secrets import SecretRefused
from bootstrap.journal.states import InvalidTransition, NodeState, allowed_targets, check_transition
from bootstrap.journal.store import JOURNAL_FILE, Journal, JournalBusy, NodeStatus, StepHandle, Transition

__all__ = [
    "JOURNAL_FILE",
    "InvalidTransition",
    "Journal",
    "JournalBusy",
    "NodeState",
    "NodeStatus",
    "SecretRefused",
    "StepHandle",
    "Transition",
    "allowed_targets",
    "check_transition",
]
