"""What the cluster checks found: one result per check and node (:class:`CheckResult`), a check or node left
out and why (:class:`Skipped`), and the whole cluster's report (:class:`ClusterReport`), as
``rackctl validate-cluster --json`` and the nvidia stage's journal give it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CheckResult:
    """One check's outcome on one node (or ``(cluster)``)."""

    name: str
    node: str
    ok: bool
    message: str
    expected: Any = None
    actual: Any = None

    def as_dict(self) -> dict[str, Any]:
        data = {"check": self.name, "node": self.node, "ok": self.ok, "message": self.message}
        if self.expected is not None or self.actual is not None:
            data |= {"expected": self.expected, "actual": self.actual}
        return data


@dataclass(frozen=True)
class Skipped:
    """A check not made, on one node or (``node`` None) at all, and why."""

    check: str
    why: str
    node: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {"check": self.check, **({"node": self.node} if self.node is not None else {}), "why": self.why}


@dataclass
class ClusterReport:
    """The cluster's results: every check made and every one skipped; ``ok`` when none failed."""

    checks: list[CheckResult] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    #: what the workload checks ran on a live cluster (``bootstrap.validation.workloads``), when they ran
    workloads: dict[str, Any] | None = None
    #: per GPU node, the DCGM exporter read live (``bootstrap.validation.dcgm``), when it was
    dcgm: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, result: CheckResult | Skipped) -> None:
        """A check's result, or what it skipped."""
        if isinstance(result, Skipped):
            self.skipped.append(result.as_dict())
        else:
            self.checks.append(result)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "passed": sum(c.ok for c in self.checks),
            "failed": sum(not c.ok for c in self.checks),
            "checks": [c.as_dict() for c in self.checks],
            "skipped": self.skipped,
            **({"workloads": self.workloads} if self.workloads is not None else {}),
            **({"dcgm": self.dcgm} if self.dcgm is not None else {}),
        }
