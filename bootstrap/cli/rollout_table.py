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
    """One row per node (node, batch, status and message, the kind's own ``columns``, the records), then
    why the rollout ended."""
    table = Table(title=title, show_edge=False, header_style="bold")
    for col in ("node", "batch", "status", *columns, "record"):
        table.add_column(col, no_wrap=col == "node", overflow="fold")
    for node in report.nodes:
        style = STATUS_STYLE.get(node.status, "yellow")
        record = "; ".join(f"{k}: {v}" for k, v in node.records.items())
        table.add_row(
            node.node,
            str(node.batch or "-"),
            f"[{style}]{node.status}[/{style}] {escape(node.message)}",
            *(escape(cell(node)) for cell in columns.values()),
            escape(record),
        )
    console.print(table)
    style = "green" if report.ok else "red"
    console.print(f"[{style}]{escape(report.reason)}[/{style}]")
