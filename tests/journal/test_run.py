"""journal_run: the one bracket around a mutating command's run, on a real journal in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.errors import InvalidInput
from bootstrap.journal.run import journal_run
from bootstrap.journal.store import Journal, JournalBusy


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    j = Journal(tmp_path)
    yield j
    j.close()


def test_a_block_that_ends_records_what_it_said(journal: Journal) -> None:
    with journal_run(journal, "firmware apply --limit gpu-01") as run:
        assert journal.run(run.id).status == "running"
        run.end("failed", "1 node failed")
    record = journal.run(run.id)
    assert record.command == "firmware apply --limit gpu-01"
    assert (record.status, record.message) == ("failed", "1 node failed")
    assert record.finished is not None


def test_a_block_that_says_nothing_is_completed(journal: Journal) -> None:
    with journal_run(journal, "apply") as run:
        pass
    assert (journal.run(run.id).status, journal.run(run.id).message) == ("completed", "")


def test_ctrl_c_is_recorded_interrupted_and_goes_on(journal: Journal) -> None:
    with pytest.raises(KeyboardInterrupt), journal_run(journal, "driver upgrade --version 1") as run:
        raise KeyboardInterrupt
    assert (journal.run(run.id).status, journal.run(run.id).message) == ("interrupted", "interrupted (Ctrl-C)")


def test_an_error_is_recorded_failed_with_its_message_and_goes_on(journal: Journal) -> None:
    with pytest.raises(InvalidInput), journal_run(journal, "redeploy gpu-01") as run:
        raise InvalidInput("the Kubernetes API did not answer")
    assert (journal.run(run.id).status, journal.run(run.id).message) == (
        "failed",
        "the Kubernetes API did not answer",
    )


def test_the_run_lock_is_held_for_the_block_only(journal: Journal, tmp_path: Path) -> None:
    other = Journal(tmp_path)
    try:
        with journal_run(journal, "apply"), pytest.raises(JournalBusy), other.run_lock():
            pass
        with other.run_lock():  # released when the block ended
            pass
    finally:
        other.close()
