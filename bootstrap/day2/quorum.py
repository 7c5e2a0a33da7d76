"""etcd quorum: may a control plane leave the cluster (a redeploy, a removal) without breaking it?

Each control plane runs an etcd member (kubeadm stacked etcd). Taking one member out leaves ``n - 1``
members, whose quorum is ``(n - 1) // 2 + 1``: the members still healthy after it left must reach that
quorum, or the cluster stops accepting writes. The only member can never leave (that is the cluster).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bootstrap.errors import Problem, RackctlError


class QuorumRefused(RackctlError):
    """Taking a control plane out now would break etcd quorum."""


@dataclass(frozen=True)
class QuorumCheck:
    """The arithmetic behind a decision, for plans and messages."""

    members: int
    healthy_after: int
    quorum_after: int

    @property
    def safe(self) -> bool:
        return self.members > 1 and self.healthy_after >= self.quorum_after


def check_member_leaves(node: str, members: Sequence[str], healthy: Mapping[str, bool]) -> QuorumCheck:
    """Raise :class:`QuorumRefused` unless ``node`` may leave the etcd ``members`` now.

    ``healthy``: per member, whether it is Ready (a member missing from it counts as not healthy).
    """
    if node not in members:
        return QuorumCheck(len(members), sum(1 for m in members if healthy.get(m)), 0)
    others = [m for m in members if m != node]
    check = QuorumCheck(len(members), sum(1 for m in others if healthy.get(m)), len(others) // 2 + 1)
    if check.safe:
        return check
    if len(members) == 1:
        why = f"{node} is the only control plane (the only etcd member): taking it out ends the cluster"
        fix = "add control planes first (3 for HA), or rebuild the cluster with `rackctl up`"
    else:
        down = [m for m in others if not healthy.get(m)]
        why = (
            f"taking {node} out leaves {len(others)} etcd members, {check.healthy_after} healthy "
            f"(not Ready: {', '.join(down)}); quorum needs {check.quorum_after}"
        )
        fix = f"bring {', '.join(down)} back to Ready first, then run the command again"
    raise QuorumRefused(
        f"refusing to take control plane {node} out: it would break etcd quorum",
        problems=[Problem(f"nodes.{node}", why, fix)],
    )
