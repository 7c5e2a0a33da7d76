"""The one place for the tests' waits: poll intervals, timeouts, and the factor that scales them.

Machines of one kind differ two- to threefold on qemu TCG work and on a loaded CI runner, so a timeout is
written once here or as ``seconds(base)`` at its use, ``base`` sized for an unloaded machine, and scaled by
``RACKCTL_TEST_TIME_FACTOR`` (default 1; CI or a slow machine sets e.g. 2). Never widen one timeout after a
flake: raise the factor, or make the test wait for the event it needs (:func:`wait_for`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

ENV = "RACKCTL_TEST_TIME_FACTOR"

#: how often a test re-reads what it waits for (a journal row, a file, an emulator's record, an API object)
POLL_S = 0.05
#: :func:`wait_for`'s pause grows from :data:`POLL_S` by this factor per read, up to :data:`MAX_POLL_S`: a short
#: wait still ends within a few tens of milliseconds of its event, and a long one (a Node Ready, an API server
#: back) does not spawn a kubectl or an ssh twenty times a second on a machine whose two cores the lab's
#: clusters and VMs need (a 60 s wait read every 50 ms costs about a core-minute in kubectl alone)
POLL_GROWTH = 1.5
MAX_POLL_S = 1.0
#: and the pause is at least this many times what the last read itself took, so that reading never takes
#: more than a fifth of a core, however slow one read is
POLL_COST_FACTOR = 4.0
#: a wait for something a local process does at once (a socket opening, a file written)
QUICK_S = 10.0
#: a wait for an emulated BMC job, a subprocess's effect, an API server round trip under load
SLOW_S = 60.0
#: the lab VMs under qemu TCG: a PXE install's callback and first SSH
VM_CALLBACK_S = 900.0
VM_SSH_S = 600.0
#: one Ansible run of a role on the lab VMs (molecule verify, a stage)
VM_PLAYBOOK_S = 900.0

T = TypeVar("T")


class TimeFactorError(ValueError):
    """``RACKCTL_TEST_TIME_FACTOR`` is not a number of at least 1."""


def factor(environ: dict[str, str] | None = None) -> float:
    """The time factor from the environment (1 when unset); a clear error naming the variable when bad."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 1.0 <= value < float("inf"):  # also NaN
        raise TimeFactorError(
            f"{ENV}={raw!r} is not a number of at least 1: set it to the slow-down of this machine "
            f"against an unloaded one (e.g. {ENV}=2), or unset it"
        )
    return value


def seconds(base: float) -> float:
    """``base`` seconds (sized for an unloaded machine) scaled by the time factor."""
    return base * factor()


def whole_seconds(base: float) -> int:
    """:func:`seconds` rounded up to whole seconds (for CLI options and messages that take an integer)."""
    scaled = seconds(base)
    return int(scaled) + (0 if scaled == int(scaled) else 1)


def pauses(interval: float | None, cost: float) -> Callable[[], float]:
    """The pauses between :func:`wait_for`'s reads: a fixed ``interval`` where one is given (a test that must
    catch a short-lived state), else from :data:`POLL_S` growing by :data:`POLL_GROWTH` to :data:`MAX_POLL_S`;
    never shorter than :data:`POLL_COST_FACTOR` times ``cost``, the first read's seconds."""
    floor = POLL_COST_FACTOR * cost
    if interval is not None:
        return lambda: max(interval, min(floor, MAX_POLL_S * 5))
    current = [POLL_S / POLL_GROWTH]

    def pause() -> float:
        current[0] = min(current[0] * POLL_GROWTH, MAX_POLL_S)
        return max(current[0], min(floor, MAX_POLL_S * 5))

    return pause


def wait_for(
    predicate: Callable[[], T], timeout: float = QUICK_S, interval: float | None = None, what: str = "condition"
) -> T:
    """Poll ``predicate`` until it is truthy, within ``seconds(timeout)``; fail naming ``what`` and its last value.

    Without ``interval`` the pause between reads grows (:func:`pauses`); with one it stays that long."""
    deadline = time.monotonic() + seconds(timeout)
    started = time.monotonic()
    value = predicate()
    pause = pauses(interval, time.monotonic() - started)
    while not value:
        now = time.monotonic()
        if now >= deadline:
            raise AssertionError(f"{what} not reached within {seconds(timeout):.1f} s (last value: {value!r})")
        time.sleep(min(pause(), max(0.0, deadline - now)))
        value = predicate()
    return value
