"""The per-area time budget: at the end of pytest, seconds spent per test directory (``--durations`` grouped).

Setup and teardown count with the test that paid them, so a shared fixture (the installed lab, the API
server) is charged to the area whose first test started it. Printed by ``pytest_terminal_summary`` (root
conftest registers this plugin), widest area first, so a regression shows in CI's log where it landed.

Under pytest-xdist (scripts/test.sh: ``-n 2``) the areas' seconds add up the workers' time, so the table
ends with each worker's busy seconds and the session's wall time: the worker that runs the lab's group
(``tests/installed_lab.py``) is the one whose seconds are the wall time.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

WIDTH = 80


def area(nodeid: str) -> str:
    """The area of a test: its directory under ``tests/`` (``tests/inband/test_x.py::t`` is ``inband``)."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if parts and parts[0] == "tests":
        parts = parts[1:]
    return parts[0] if len(parts) > 1 else "(top)"


@dataclass
class Budget:
    """Seconds and test counts per area."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    tests: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    #: busy seconds per pytest-xdist worker (empty without xdist)
    workers: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    #: seconds per test module, and the workers that ran it (the critical path's parts, module by module)
    modules: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    module_workers: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def add(self, nodeid: str, duration: float, worker: str = "") -> None:
        self.seconds[area(nodeid)] += duration
        self.tests[area(nodeid)].add(nodeid)
        module = nodeid.split("::", 1)[0]
        self.modules[module] += duration
        if worker:
            self.workers[worker] += duration
            self.module_workers[module].add(worker)

    def module_lines(self, count: int = 15) -> list[str]:
        """The ``count`` modules that took longest, each with its seconds and the workers that ran it.

        A module path too long for :data:`WIDTH` columns keeps its end (the file name).
        """
        rows = []
        for name, spent in sorted(self.modules.items(), key=lambda kv: (-kv[1], kv[0]))[:count]:
            workers = ",".join(sorted(self.module_workers.get(name, ()))) or "-"
            shown = name if len(name) <= 56 else "..." + name[-53:]
            rows.append(f"{shown:<56} {workers:>9} {spent:>8.1f}s")
        return rows

    def worker_lines(self, wall: float) -> list[str]:
        """Each worker's busy seconds and share of the wall time, then the wall time (xdist runs only)."""
        rows = []
        for name, spent in sorted(self.workers.items()):
            share = spent / wall * 100 if wall else 0.0
            rows.append(f"{'worker ' + name:<20} {'':>6} {spent:>9.1f} {spent / 60:>6.1f} {share:>5.1f}%")
        return [*rows, f"{'wall':<20} {'':>6} {wall:>9.1f} {wall / 60:>6.1f}"] if rows else []

    def lines(self) -> list[str]:
        """The table, at most :data:`WIDTH` columns: area, tests, seconds, minutes, share of the total."""
        total = sum(self.seconds.values())
        rows = [f"{'area':<20} {'tests':>6} {'seconds':>9} {'min':>6} {'share':>6}"]
        for name, spent in sorted(self.seconds.items(), key=lambda kv: (-kv[1], kv[0])):
            share = spent / total * 100 if total else 0.0
            rows.append(f"{name[:20]:<20} {len(self.tests[name]):>6} {spent:>9.1f} {spent / 60:>6.1f} {share:>5.1f}%")
        count = sum(len(t) for t in self.tests.values())
        rows.append(f"{'total':<20} {count:>6} {total:>9.1f} {total / 60:>6.1f} {100.0 if total else 0.0:>5.1f}%")
        return rows


_BUDGET = Budget()
_START = [time.monotonic()]


def pytest_sessionstart() -> None:
    _START[0] = time.monotonic()


def worker_of(report: pytest.TestReport) -> str:
    """The xdist worker (``gw0``...) that ran ``report``'s test, as the controller sees it; "" without xdist."""
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    return str(getattr(gateway, "id", ""))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _BUDGET.add(report.nodeid, report.duration, worker_of(report))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _BUDGET.seconds:
        return
    terminalreporter.write_sep("=", "time per area (setup + call + teardown)")
    for line in [*_BUDGET.lines(), *_BUDGET.worker_lines(time.monotonic() - _START[0])]:
        terminalreporter.write_line(line)
    terminalreporter.write_sep("=", "slowest modules (setup + call + teardown)")
    for line in _BUDGET.module_lines():
        terminalreporter.write_line(line)
