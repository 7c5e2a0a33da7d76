"""tests/timing.py: one factor scales every wait; a bad factor is refused by name; waits end on the event."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import timing

REPO = Path(__file__).resolve().parents[2]


def test_the_factor_defaults_to_one_and_scales_every_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(timing.ENV, raising=False)
    assert timing.factor() == 1.0 and timing.seconds(timing.VM_SSH_S) == timing.VM_SSH_S
    monkeypatch.setenv(timing.ENV, "2.5")
    assert timing.seconds(10) == 25.0
    assert timing.whole_seconds(5.1) == 13  # 12.75 rounded up: a CLI --timeout takes whole seconds
    assert timing.whole_seconds(6) == 15


@pytest.mark.parametrize("raw", ["0.5", "fast", "nan", "inf", "-2"])
def test_a_bad_factor_is_refused_naming_the_variable_and_the_fix(raw: str) -> None:
    with pytest.raises(timing.TimeFactorError) as caught:
        timing.factor({timing.ENV: raw})
    assert f"{timing.ENV}={raw!r}" in str(caught.value) and "at least 1" in str(caught.value)
    assert f"{timing.ENV}=2" in str(caught.value)


def test_a_bad_factor_stops_pytest_before_any_test_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, timing.ENV: "fast"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "tests/suite/test_timing.py", "-k", "defaults"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert f"{timing.ENV}='fast' is not a number of at least 1" in proc.stderr
    assert "Traceback" not in proc.stderr and "passed" not in proc.stdout


def test_wait_for_returns_as_soon_as_the_event_happens() -> None:
    event = threading.Event()
    threading.Timer(0.2, event.set).start()
    start = time.monotonic()
    assert timing.wait_for(event.is_set, timeout=30, what="the event") is True
    assert time.monotonic() - start < 5  # well before its 30 s timeout


def test_wait_for_fails_naming_what_and_the_last_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(timing.ENV, "2")
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"the journal row not reached within 0\.4 s \(last value: \[\]\)"):
        timing.wait_for(list, timeout=0.2, what="the journal row")
    assert time.monotonic() - start >= 0.4  # scaled: 0.2 s x 2


def test_without_an_interval_the_pause_grows_from_the_poll_to_its_cap() -> None:
    pause = timing.pauses(None, cost=0.0)
    seen = [pause() for _ in range(20)]
    assert seen[0] == pytest.approx(timing.POLL_S)
    assert all(b >= a for a, b in itertools.pairwise(seen))  # never shorter than the one before
    assert seen[-1] == timing.MAX_POLL_S and max(seen) == timing.MAX_POLL_S


def test_a_given_interval_stays_and_a_slow_read_widens_any_pause() -> None:
    fixed = timing.pauses(0.05, cost=0.001)
    assert [fixed() for _ in range(5)] == [0.05] * 5  # a test that must catch a short-lived state
    slow = timing.pauses(None, cost=0.3)  # a read that spawns a kubectl on a loaded machine
    assert slow() == pytest.approx(timing.POLL_COST_FACTOR * 0.3)
    assert timing.pauses(0.05, cost=0.3)() == pytest.approx(timing.POLL_COST_FACTOR * 0.3)
    assert timing.pauses(None, cost=60.0)() == 5 * timing.MAX_POLL_S  # however slow, a pause is bounded


def test_a_long_wait_reads_far_fewer_times_than_its_length_over_the_poll() -> None:
    reads: list[float] = []
    start = time.monotonic()
    with pytest.raises(AssertionError, match="the count"):
        timing.wait_for(lambda: reads.append(time.monotonic()) and False, timeout=3, what="the count")
    assert time.monotonic() - start >= 3
    # a fixed 50 ms poll would read about 60 times in 3 s; growing to 1 s it reads well under half of that
    assert 3 <= len(reads) < 20, len(reads)
