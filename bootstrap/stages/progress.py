"""Rich progress for ``rackctl up``: one bar per stage, advancing as nodes finish; yellow when not applied.

While a stage's playbook runs, each node has a row under the stage's bar on a terminal: the task running
there, how many of its tasks ended, and its clock. Piped, each ended task is one line with the time since
the stage started, so a log tells a slow run from a hung one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


class RichProgress:
    """A :class:`~bootstrap.stages.base.ProgressReporter` drawing rich progress bars (thread-safe)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=BAR_WIDTH),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._hosts: dict[tuple[str, str], TaskID] = {}  #: (stage, node) -> the node's row while its tasks run
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.stop()

    def stage_started(self, stage: str, nodes: Sequence[str]) -> None:
        with self._lock:
            self._tasks[stage] = self._progress.add_task(stage, total=max(len(nodes), 1))
            self._started[stage] = time.monotonic()

    def node_done(self, stage: str, node: str, ok: bool, message: str = "") -> None:
        """A line per node as it ends; a failed node's error is left to the command's outcome, which says each
        error once."""
        mark = "[green]ok[/green]" if ok else "[red]failed[/red]"
        tail = f": {escape(message)}" if message and ok else ""
        self._progress.console.print(f"  {escape(stage)} {escape(node)} {mark}{tail}")
        self._drop_rows(stage, node)
        with self._lock:
            task = self._tasks.get(stage)
        if task is not None:
            self._progress.advance(task)

    def stage_finished(self, stage: str, ok: bool, message: str = "") -> None:
        self._drop_rows(stage)
        with self._lock:
            task = self._tasks.get(stage)
        if task is not None:
            total = self._progress.tasks[task].total or 1
            colour = "green" if ok else "red"
            self._progress.update(task, completed=total, description=f"[{colour}]{stage}[/{colour}]")
        if message and ok:  # a failed stage's message is the command's to say, once
            self.log(message)

    def stage_not_applied(self, stage: str, message: str) -> None:
        """The stage rendered and validated but applied nothing: its bar ends yellow, "not applied", and a line
        says so; why (``message``) is the command's outcome to say, once, and the journal's per node."""
        self._drop_rows(stage)
        with self._lock:
            task = self._tasks.get(stage)
        if task is not None:
            total = self._progress.tasks[task].total or 1
            self._progress.update(task, completed=total, description=f"[yellow]{stage} (not applied)[/yellow]")
        said = f"{stage}: rendered + validated, not applied (why: `rackctl journal show NODE`)"
        self._progress.console.print(f"[yellow]{escape(said)}[/yellow]")

    def task_started(self, stage: str, node: str, task: str, done: int) -> None:
        """On a terminal, the node's row names the task now running and how many ended before it; piped,
        nothing (a line comes when the task ends)."""
        if self.console.is_terminal:
            row = self._row(stage, node)
            self._progress.update(row, description=escape(_cut(f"  {node}: {task}", TERMINAL_LABEL)), completed=done)

    def task_done(self, stage: str, node: str, task: str, status: str, done: int) -> None:
        """On a terminal, the node's row counts its ended tasks (its clock runs on); piped, one line per ended
        task and node with the time since the stage started, cut to the width."""
        if self.console.is_terminal:
            self._progress.update(self._row(stage, node), completed=done)
            return
        line = f"  {self._stamp(stage)} {stage} {node} #{done} {status}: {task}"
        self._progress.console.print(escape(_cut(line, PIPED_WIDTH)))

    def _row(self, stage: str, node: str) -> TaskID:
        with self._lock:
            row = self._hosts.get((stage, node))
            if row is None:
                row = self._progress.add_task(escape(_cut(f"  {node}", TERMINAL_LABEL)), total=None)
                self._hosts[(stage, node)] = row
            return row

    def _drop_rows(self, stage: str, node: str | None = None) -> None:
        """Remove the rows of ``stage``'s nodes (of ``node`` only when given): their outcome is printed."""
        with self._lock:
            keys = [k for k in self._hosts if k[0] == stage and (node is None or k[1] == node)]
            rows = [self._hosts.pop(k) for k in keys]
        for row in rows:
            self._progress.remove_task(row)

    def _stamp(self, stage: str) -> str:
        with self._lock:  # a stage never started (a day-2 run's playbook): its clock starts with its first task
            since = self._started.setdefault(stage, time.monotonic())
        spent = int(time.monotonic() - since)
        return f"[{spent // 60}:{spent % 60:02d}]"

    def log(self, message: str) -> None:
        self._progress.console.print(escape(message))


#: the widest a bar's label gets (the bar, counts and clock fill the rest of 80 columns)
TERMINAL_LABEL = 40
BAR_WIDTH = 20
PIPED_WIDTH = 80


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
