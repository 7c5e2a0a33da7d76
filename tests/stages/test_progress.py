"""``rackctl up``'s progress (RichProgress): each Ansible task shown, piped or on a terminal, in 80 columns."""

from __future__ import annotations

import io
import re

from rich.console import Console

from bootstrap.stages.progress import RichProgress

LONG = "Configure containerd (systemd cgroups, registry hosts, drop-in imports) and more words than fit"
STAMPED = re.compile(r"^  \[\d+:\d\d\] (?P<rest>.*)$")


def test_piped_output_prints_a_stamped_line_per_ended_task_and_node_cut_to_80_columns() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    with RichProgress(console) as progress:
        progress.stage_started("network", ["gpu-01", "gpu-02"])
        progress.task_started("network", "gpu-01", "Update the apt cache", 0)  # piped: nothing until it ends
        progress.task_done("network", "gpu-01", "Update the apt cache", "ok", 1)
        progress.task_done("network", "gpu-02", LONG, "changed", 1)
        progress.task_done("network", "gpu-01", "Apply the netplan", "failed", 2)
        progress.node_done("network", "gpu-01", False, "Apply the netplan: it failed")
    lines = out.getvalue().splitlines()
    tasks = [m["rest"] for line in lines if (m := STAMPED.match(line))]
    assert tasks[0] == "network gpu-01 #1 ok: Update the apt cache"
    assert tasks[2] == "network gpu-01 #2 failed: Apply the netplan"
    assert tasks[1].startswith("network gpu-02 #1 changed: Configure") and tasks[1].endswith("…")
    assert len(tasks) == 3 and all(len(line) <= 80 for line in lines), lines
    assert max(len(line) for line in lines) == 80  # the long one cut at the width, not wrapped


def test_on_a_terminal_each_node_has_a_row_naming_its_running_task_and_count() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True)
    with RichProgress(console) as progress:
        progress.stage_started("network", ["gpu-01", "gpu-02"])
        progress.task_started("network", "gpu-01", LONG, 6)
        progress.task_started("network", "gpu-02", "Update the apt cache", 0)
        stage, gpu01, gpu02 = progress._progress.tasks
        assert stage.description == "network"
        assert gpu01.description.startswith("  gpu-01: Configure") and len(gpu01.description) == 40
        assert (gpu01.completed, gpu02.description, gpu02.completed) == (6, "  gpu-02: Update the apt cache", 0)
        progress.task_done("network", "gpu-01", LONG, "ok", 7)
        assert gpu01.completed == 7  # the count moves as the task ends; the next start renames the row
        progress.node_done("network", "gpu-01", True)
        assert [t.description for t in progress._progress.tasks] == ["network", "  gpu-02: Update the apt cache"]
        progress.stage_finished("network", True)
        assert [t.description for t in progress._progress.tasks] == ["[green]network[/green]"]
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "#7 ok:" not in shown  # no line per task on a terminal
    assert all(len(line) <= 80 for line in shown.splitlines())


def test_a_stage_that_applied_nothing_drops_its_nodes_rows_too() -> None:
    console = Console(file=io.StringIO(), width=80, force_terminal=True)
    with RichProgress(console) as progress:
        progress.stage_started("kubernetes", ["cp-01"])
        progress.task_started("kubernetes", "cp-01", "Render kubeadm's config", 0)
        progress.stage_not_applied("kubernetes", "rendered and validated, not applied")
        assert [t.description for t in progress._progress.tasks] == ["[yellow]kubernetes (not applied)[/yellow]"]
