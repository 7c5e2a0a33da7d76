"""Rich progress for ``rackctl up``: one bar per stage, advancing as nodes finish; yellow when not applied."""

from __future__ import annotations

import threading
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
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
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

    def node_done(self, stage: str, node: str, ok: bool, message: str = "") -> None:
        """A line per node as it ends; a failed node's error is left to the command's outcome, which says each
        error once."""
        mark = "[green]ok[/green]" if ok else "[red]failed[/red]"
        tail = f": {escape(message)}" if message and ok else ""
        self._progress.console.print(f"  {escape(stage)} {escape(node)} {mark}{tail}")
        with self._lock:
            task = self._tasks.get(stage)
        if task is not None:
            self._progress.advance(task)

    def stage_finished(self, stage: str, ok: bool, message: str = "") -> None:
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
        with self._lock:
            task = self._tasks.get(stage)
        if task is not None:
            total = self._progress.tasks[task].total or 1
            self._progress.update(task, completed=total, description=f"[yellow]{stage} (not applied)[/yellow]")
        said = f"{stage}: rendered + validated, not applied (why: `rackctl journal show NODE`)"
        self._progress.console.print(f"[yellow]{escape(said)}[/yellow]")

    def task_done(self, stage: str, node: str, task: str, status: str, done: int) -> None:
        """On a terminal, the stage's bar names the node's latest task and its count (the bar's clock runs on);
        piped, one line per ended task and node, cut to the width."""
        if self.console.is_terminal:
            with self._lock:
                bar = self._tasks.get(stage)
            if bar is not None:
                self._progress.update(bar, description=_cut(f"{stage}: {node} #{done} {task}", TERMINAL_LABEL))
            return
        self._progress.console.print(escape(_cut(f"  {stage} {node} #{done} {status}: {task}", PIPED_WIDTH)))

    def log(self, message: str) -> None:
        self._progress.console.print(escape(message))


#: the widest a bar's label gets (the bar, counts and clock fill the rest of 80 columns)
TERMINAL_LABEL = 40
PIPED_WIDTH = 80


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
