"""``phases``: the progress of a long step (image build, mirror build) as each phase starts."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from bootstrap.cli import common


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buffer = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=buffer, force_terminal=False, width=80))
    return buffer


def test_piped_a_line_per_phase_with_the_time_since_the_start(stderr: io.StringIO) -> None:
    with common.phases("building the OS image") as step:
        step("copying the root tree")
        step("compressing [the disk]")  # markup-looking text is printed as it is
    lines = stderr.getvalue().splitlines()
    assert [re.sub(r"^\[\d+:\d\d\] ", "", line) for line in lines] == [
        "building the OS image",
        "copying the root tree",
        "compressing [the disk]",
        "done",
    ]
    assert all(re.match(r"^\[0:0\d\] ", line) for line in lines), lines


def test_quiet_prints_nothing(stderr: io.StringIO) -> None:
    with common.phases("building the mirror", quiet=True) as step:
        step("downloading 12 packages")
    assert stderr.getvalue() == ""


def test_a_failed_step_does_not_say_done(stderr: io.StringIO) -> None:
    with pytest.raises(RuntimeError), common.phases("building the mirror") as step:
        step("resolving")
        raise RuntimeError("apt refused")
    assert "done" not in stderr.getvalue() and "resolving" in stderr.getvalue()
