"""Node lifecycle: the states a node moves through and which moves are allowed.

Main line (Metal3 BareMetalHost style)::

    registered -> discovered -> configured -> provisioning -> provisioned -> joined -> ready

plus ``failed`` (any state can fail; a retry goes back to the state it failed from or an earlier one) and
``maintenance`` (reachable from any state; it returns only to the state it left). Moves that wipe a node
(back to ``provisioning`` from ``provisioned``/``joined``/``ready``: a reimage) need an explicit force.
"""

from __future__ import annotations

from enum import StrEnum

from bootstrap.errors import RackctlError


class NodeState(StrEnum):
    """Lifecycle state of one node, as stored in the run journal."""

    REGISTERED = "registered"
    DISCOVERED = "discovered"
    CONFIGURED = "configured"
    PROVISIONING = "provisioning"
    PROVISIONED = "provisioned"
    JOINED = "joined"
    READY = "ready"
    FAILED = "failed"
    MAINTENANCE = "maintenance"


#: The main line in order; a state's index is its rank (how far along a node is).
MAIN_LINE: tuple[NodeState, ...] = (
    NodeState.REGISTERED,
    NodeState.DISCOVERED,
    NodeState.CONFIGURED,
    NodeState.PROVISIONING,
    NodeState.PROVISIONED,
    NodeState.JOINED,
    NodeState.READY,
)

#: Ordinary moves between main-line states (failed and maintenance are handled by rule, see below).
MAIN_TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    NodeState.REGISTERED: frozenset({NodeState.DISCOVERED}),
    # back to registered: forget what was discovered (BMC or hardware changed)
    NodeState.DISCOVERED: frozenset({NodeState.CONFIGURED, NodeState.REGISTERED}),
    # back to discovered: re-discover before reconfiguring
    NodeState.CONFIGURED: frozenset({NodeState.PROVISIONING, NodeState.DISCOVERED}),
    NodeState.PROVISIONING: frozenset({NodeState.PROVISIONED}),
    NodeState.PROVISIONED: frozenset({NodeState.JOINED, NodeState.PROVISIONING}),
    # back to provisioned: drained and removed from the cluster
    NodeState.JOINED: frozenset({NodeState.READY, NodeState.PROVISIONED, NodeState.PROVISIONING}),
    # back to joined: day-2 work (driver or operator upgrade) makes it not ready for a while
    NodeState.READY: frozenset({NodeState.JOINED, NodeState.PROVISIONING}),
}

#: Moves that destroy what is on the node (a reimage): refused unless forced.
FORCE_ONLY: frozenset[tuple[NodeState, NodeState]] = frozenset(
    {
        (NodeState.PROVISIONED, NodeState.PROVISIONING),
        (NodeState.JOINED, NodeState.PROVISIONING),
        (NodeState.READY, NodeState.PROVISIONING),
    }
)


def rank(state: NodeState) -> int:
    """Position on the main line (registered = 0); -1 for failed and maintenance."""
    return MAIN_LINE.index(state) if state in MAIN_LINE else -1


class InvalidTransition(RackctlError):
    """A node was asked to move to a state its current state does not allow."""

    def __init__(self, node: str, current: NodeState, to: NodeState, allowed: set[NodeState], why: str = ""):
        allowed_text = ", ".join(sorted(s.value for s in allowed)) or "none"
        reason = f" ({why})" if why else ""
        super().__init__(
            f"node {node!r}: cannot move from {current.value} to {to.value}{reason}; "
            f"allowed from {current.value}: {allowed_text}"
        )
        self.node, self.current, self.to, self.allowed = node, current, to, allowed


def allowed_targets(current: NodeState, *, left_from: NodeState | None = None, force: bool = False) -> set[NodeState]:
    """States ``current`` may move to.

    ``left_from`` is the state a failed or maintenance node left (for the other states it is ignored);
    ``force`` allows the reimage moves in :data:`FORCE_ONLY`.
    """
    if current is NodeState.MAINTENANCE:
        return {left_from} if left_from is not None else {NodeState.REGISTERED}
    if current is NodeState.FAILED:
        # retry from the state it failed in, or from any earlier main-line state
        limit = rank(left_from) if left_from is not None and left_from in MAIN_LINE else 0
        return set(MAIN_LINE[: limit + 1]) | {NodeState.MAINTENANCE}
    targets = {t for t in MAIN_TRANSITIONS[current] if force or (current, t) not in FORCE_ONLY}
    return targets | {NodeState.FAILED, NodeState.MAINTENANCE}


def check_transition(
    node: str,
    current: NodeState,
    to: NodeState,
    *,
    left_from: NodeState | None = None,
    force: bool = False,
) -> None:
    """Raise :class:`InvalidTransition` unless ``current -> to`` is allowed."""
    allowed = allowed_targets(current, left_from=left_from, force=force)
    if to in allowed:
        return
    why = ""
    if (current, to) in FORCE_ONLY:
        why = "a reimage wipes the node; it needs an explicit force (--force)"
    elif current is NodeState.MAINTENANCE:
        why = f"a node leaves maintenance only to the state it left ({left_from.value if left_from else '?'})"
    elif current is NodeState.FAILED:
        why = "a failed node retries from the state it failed in or an earlier one"
    elif current == to:
        why = "already in that state"
    raise InvalidTransition(node, current, to, allowed, why)


def is_backward(current: NodeState, to: NodeState, *, left_from: NodeState | None = None) -> bool:
    """True when a move undoes progress (steps done before it no longer count).

    Leaving failed or maintenance for the state that was left is not backward; going further back is.
    """
    if to not in MAIN_LINE:
        return False
    origin = left_from if current in (NodeState.FAILED, NodeState.MAINTENANCE) else current
    if origin is None or origin not in MAIN_LINE:
        return False
    return rank(to) < rank(origin) or (origin, to) in FORCE_ONLY
