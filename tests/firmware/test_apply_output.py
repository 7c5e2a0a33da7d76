"""``rackctl firmware apply`` in a terminal: a node whose update failed is named failed in the progress
lines and its error said once, below the report's table (not in the progress line as well); the report a
line per node at 80 columns, nodes with the same message and records sharing one note."""

from __future__ import annotations

from pathlib import Path

from fwlab import api, start_lab

from tests.cli.conftest import rackctl


def test_a_failed_nodes_error_is_said_once(tmp_path: Path) -> None:
    lab = start_lab(tmp_path, 4)  # three control planes, one worker
    try:
        worker = lab.order[3]
        lab.rack.set_faults(worker, api.FaultSpec(fail_update_components=("BIOS",), fail_update_count=1))
        args = ("firmware", "apply", "-i", str(lab.inventory), "--state-dir", str(tmp_path / "state"), "--poll", "0.1")
        proc = rackctl(*args, COLUMNS="80", TERM="xterm", timeout=300)
    finally:
        lab.rack.stop()
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line.split("│") for line in lines if "│" in line]
    assert [cells[0].strip() for cells in rows] == lab.order  # a line per node, hostnames whole
    assert len({cells[2].strip() for cells in rows[:3]}) == 1  # the three done nodes share one note
    failed = [line for line in proc.stderr.splitlines() if line.startswith("failed ")]
    assert [line.split() for line in failed] == [["failed", worker]]  # which node, not why
    everything = " ".join((proc.stdout + proc.stderr).split())
    assert everything.count("Failed") == 1, proc.stdout  # the BIOS job's failure, in the report only
