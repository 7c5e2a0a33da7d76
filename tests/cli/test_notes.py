"""The pieces the tables share to fit a terminal: timestamps to the second in UTC, texts cut with a
reference to their whole below the table."""

from __future__ import annotations

import pytest

from bootstrap.cli import common
from bootstrap.cli.common import Notes, cut_text, stamp


def test_stamp_is_utc_to_the_second_and_leaves_other_text_alone() -> None:
    assert stamp("2026-11-29T14:37:55.123456+01:00") == "2026-11-29T13:37:55Z"
    assert stamp("2026-11-29T13:37:55") == "2026-11-29T13:37:55"  # no offset: none made up
    assert stamp("not a time") == "not a time"
    assert stamp(None) == stamp("") == ""


def test_cut_text_keeps_words_unless_too_little_is_left() -> None:
    assert cut_text("short", 10) == "short"
    assert cut_text("render + validate the kubeadm init config", 20) == "render + validate"
    assert cut_text("run playbooks/preflight.yml over SSH", 20) == "run playbooks/prefli"  # "run" alone: too little


def test_notes_cut_to_the_room_left_and_say_each_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.console, "width", 40)
    notes = Notes(room=10, columns=2)  # 40 - 10 - 3 * 2 - 1 = 23 characters for the cell
    long = "stage preflight failed: BMC no answer on [bold]x[/bold]"
    first, again = notes.cell(long), notes.cell(long)
    assert first == again == "stage preflight … [1]"  # within the 23 characters, the same reference again
    assert notes.cell("fits") == "fits"
    assert notes.cell("[red]markup[/red] is shown as typed") == "\\[red]markup\\[/red] … [2]"  # escaped
    with common.console.capture() as captured:
        notes.show()
    lines = captured.get().splitlines()
    assert max(len(line) for line in lines) <= 40 and lines[0].startswith("[1] stage") and len(lines) > 2  # wrapped
    assert " ".join(" ".join(lines).split()) == f"[1] {long} [2] [red]markup[/red] is shown as typed"  # verbatim
