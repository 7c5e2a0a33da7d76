"""The human view of a rollout's report (``firmware apply``, the host path of ``driver upgrade``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rich.table import Table

from bootstrap.cli.common import console, escape
from bootstrap.rollout.report import OutcomeT, RolloutReport

STATUS_STYLE = {"done": "green", "nothing-to-do": "green", "failed": "red"}


def show_rollout(
    report: RolloutReport[OutcomeT], columns: Mapping[str, Callable[[OutcomeT], str]], *, title: str | None = None
) -> None:
    """A line per node (node, batch, status, the kind's own ``columns``); each node's message and records
    written once below the table, nodes with the same words sharing one reference; then why the rollout
    ended."""
    table = Table(title=title, show_edge=False, header_style="bold")
    for col in ("node", "batch", "status", *columns):
        table.add_column(col, no_wrap=col in ("node", "batch", "status"), overflow="fold")
    notes: dict[str, int] = {}
    for node in report.nodes:
        style = STATUS_STYLE.get(node.status, "yellow")
        record = "; ".join(f"{k}: {v}" for k, v in node.records.items())
        text = "; ".join(t for t in (node.message, record) if t)
        mark = f" [{notes.setdefault(text, len(notes) + 1)}]" if text else ""
        table.add_row(
            node.node,
            str(node.batch or "-"),
            f"[{style}]{node.status}[/{style}]{escape(mark)}",
            *(escape(cell(node)) for cell in columns.values()),
        )
    console.print(table)
    for text, ref in notes.items():
        console.print(f"{escape(f'[{ref}]')} {escape(text)}", soft_wrap=False)
    style = "green" if report.ok else "red"
    console.print(f"[{style}]{escape(report.reason)}[/{style}]", soft_wrap=False)
