"""One journal run around a command's work: opened, its end recorded however the work ends.

``with journal_run(journal, "apply") as run:`` holds the state directory's run lock, opens a run
(:meth:`Journal.begin_run`) and, when the block ends, records how: what the block said with
:meth:`Run.end` (``completed`` when it said nothing), ``interrupted`` on Ctrl-C, ``failed`` with the error's
message on any other exception; the exception goes on. Every mutating command (``up``, ``apply``,
``redeploy``, ``firmware apply``, ``driver upgrade``, ``triton deliver``) records its run through this one
bracket.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bootstrap.errors import RackctlError
from bootstrap.journal.store import Journal


@dataclass
class Run:
    """The open run: its id, and how it ends unless an exception ends it first."""

    id: int
    status: str = "completed"
    message: str = ""

    def end(self, status: str, message: str = "") -> None:
        """Record ``status`` and ``message`` when the block ends (the last call wins)."""
        self.status, self.message = status, message


def error_message(exc: BaseException) -> str:
    """A rackctl error's message; nothing for other exceptions (their traceback is not the journal's)."""
    return exc.message if isinstance(exc, RackctlError) else ""


@contextlib.contextmanager
def journal_run(
    journal: Journal,
    command: str,
    *,
    interrupted: str = "interrupted (Ctrl-C)",
    describe: Callable[[BaseException], str] = error_message,
) -> Iterator[Run]:
    """Hold the run lock and one run of ``command`` for the block; record its end (see the module)."""
    with journal.run_lock():
        run = Run(journal.begin_run(command))
        try:
            yield run
        except KeyboardInterrupt:
            journal.finish_run(run.id, "interrupted", interrupted)
            raise
        except BaseException as exc:
            journal.finish_run(run.id, "failed", describe(exc))
            raise
        journal.finish_run(run.id, run.status, run.message)
