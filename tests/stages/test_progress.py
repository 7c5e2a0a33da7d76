"""``rackctl up``'s progress (RichProgress): each ended Ansible task shown, piped or on a terminal, in 80 columns."""

from __future__ import annotations

import io

from rich.console import Console

from bootstrap.stages.progress import RichProgress

LONG = "Configure containerd (systemd cgroups, registry hosts, drop-in imports) and more words than fit"


def test_piped_output_prints_a_line_per_ended_task_and_node_cut_to_80_columns() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    with RichProgress(console) as progress:
        progress.stage_started("network", ["gpu-01", "gpu-02"])
        progress.task_done("network", "gpu-01", "Update the apt cache", "ok", 1)
        progress.task_done("network", "gpu-02", LONG, "changed", 1)
        progress.task_done("network", "gpu-01", "Apply the netplan", "failed", 2)
        progress.node_done("network", "gpu-01", False, "Apply the netplan: it failed")
    lines = out.getvalue().splitlines()
    assert "  network gpu-01 #1 ok: Update the apt cache" in lines
    assert "  network gpu-01 #2 failed: Apply the netplan" in lines
    (cut,) = [line for line in lines if "gpu-02 #1 changed" in line]
    assert cut.endswith("…") and len(cut) == 80
    assert all(len(line) <= 80 for line in lines), lines


def test_on_a_terminal_the_stage_bar_names_the_latest_task_instead_of_a_line_each() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True)
    with RichProgress(console) as progress:
        progress.stage_started("network", ["gpu-01"])
        progress.task_done("network", "gpu-01", LONG, "ok", 7)
        (bar,) = progress._progress.tasks
        assert bar.description.startswith("network: gpu-01 #7 Configure") and len(bar.description) == 40
        progress.stage_finished("network", True)
        assert bar.description == "[green]network[/green]"  # the stage's own name again once it ends
    assert "#7 ok:" not in out.getvalue()  # no line per task on a terminal
