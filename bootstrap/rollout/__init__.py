"""Rolling work over a fleet: which nodes may be taken down together (firmware, drivers, redeploys).

:func:`plan_batches` gives the whole schedule up front; :class:`Rollout` is the same rules as a state
machine that a runner drives node by node (start a batch, report each node done or failed).
"""

from bootstrap.rollout.scheduler import (
    Batch,
    NodePhase,
    Rollout,
    RolloutNode,
    RolloutPolicy,
    Schedule,
    max_unavailable_count,
    plan_batches,
)

__all__ = [
    "Batch",
    "NodePhase",
    "Rollout",
    "RolloutNode",
    "RolloutPolicy",
    "Schedule",
    "max_unavailable_count",
    "plan_batches",
]
