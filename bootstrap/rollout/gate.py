"""Taking a node out of service and back, around disruptive work (firmware, drivers, redeploys).

:class:`NodeGate` is what a rollout asks: cordon and drain, uncordon, and whether a node is Ready.
``rackctl firmware apply`` and ``rackctl up --apply-firmware`` use ``bootstrap.kube.ClusterGate`` (``kubectl``
once the kubernetes stage left a kubeconfig). Where there is no cluster to ask (the bench, the scheduler's
tests) :class:`NoKubernetes` answers: every call says so in the words that go into the journal, and nothing is
claimed that was not done.
"""

from __future__ import annotations

from typing import Protocol


class NodeGate(Protocol):
    """Cordon/drain and readiness of cluster nodes."""

    def cordon(self, node: str) -> str:
        """Cordon and drain ``node``; return what was done (recorded in the journal)."""
        ...

    def uncordon(self, node: str) -> str:
        """Make ``node`` schedulable again; return what was done."""
        ...

    def ready(self, node: str) -> bool:
        """Whether ``node`` is Ready now (a not-Ready control plane holds back the others)."""
        ...


class NoKubernetes:
    """No Kubernetes on these nodes yet: nothing is drained, every node counts as Ready."""

    def cordon(self, node: str) -> str:
        return "no Kubernetes: not drained"

    def uncordon(self, node: str) -> str:
        return "no Kubernetes: not uncordoned"

    def ready(self, node: str) -> bool:
        return True
