"""``rackctl plan`` fits the terminal: at 80 and 120 columns no line is wider, nodes doing the same share a
row, each action on one line (cut to the room left with a reference) and written whole below the table (each
once) instead of folded into a narrow cell, hostnames whole, and ``--wide`` still gives one row per node."""

from __future__ import annotations

import re

import pytest

from tests.cli.conftest import ROOT, rackctl

SAMPLE = str(ROOT / "inventory" / "examples" / "dvd-inference.yml")
NODES = ("head-01", "cp-02", "cp-03", "gpu-l40s-01", "gpu-xe9680-01")


@pytest.mark.parametrize("columns", [80, 120])
def test_plan_fits_the_terminal_and_says_each_long_action_once(columns: int, tmp_path) -> None:
    args = ("plan", "-i", SAMPLE, "--state-dir", str(tmp_path))
    proc = rackctl(*args, COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    wide = rackctl(*args, "--wide", COLUMNS=str(columns), TERM="xterm")
    assert wide.returncode == 0, wide.stderr
    rows = [line for line in lines if re.match(r"│ [a-z]", line)]
    wide_rows = [line for line in wide.stdout.splitlines() if re.match(r"│ [a-z]", line)]
    assert len(rows) < 0.6 * len(wide_rows)  # nodes doing the same share a row
    assert len(lines) < 200  # 485 lines at 80 columns when long actions were folded into narrow cells
    body = [line.split("│")[1:-1] for line in lines if line.startswith("│")]
    continued = [cells for cells in body if not cells[0].strip()]
    assert all(not cells[2].strip() and not cells[3].strip() for cells in continued), continued  # actions: 1 line
    assert all(cells[1].strip() for cells in continued)  # only a list of nodes folds, at its commas
    hostnames = {n.strip(" ,") for cells in body for n in cells[1].split(",")} - {"", "(all)", "all 5"}
    assert hostnames == set(NODES)  # each whole
    assert "│ preflight  │ all 5" in proc.stdout
    for node in NODES:
        assert node in wide.stdout
    refs = [ref for line in lines if line.startswith("│") for ref in re.findall(r"\[(\d+)\]", line)]
    notes = [line.split("]", 1)[0][1:] for line in lines if re.match(r"\[\d+\] ", line)]
    assert refs and sorted(set(refs), key=int) == notes  # each long action referenced, written out once below
    assert "…" not in "".join(line for line in lines if re.match(r"\[\d+\] ", line))
