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


def wait_for(
    predicate: Callable[[], T], timeout: float = QUICK_S, interval: float = POLL_S, what: str = "condition"
) -> T:
    """Poll ``predicate`` until it is truthy, within ``seconds(timeout)``; fail naming ``what`` and its last value."""
    deadline = time.monotonic() + seconds(timeout)
    value = predicate()
    while not value:
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached within {seconds(timeout):.1f} s (last value: {value!r})")
        time.sleep(interval)
        value = predicate()
    return value
