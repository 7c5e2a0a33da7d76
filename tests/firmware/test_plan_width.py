"""``rackctl firmware plan`` fits the terminal: hostnames whole, a node whose firmware could not be read
marked in the table and its error written once below it (nodes sharing an error together), at 80 and 120
columns; against the emulated iDRACs every row fits too."""

from __future__ import annotations

from pathlib import Path

import pytest
from fwlab import FwLab

from tests.cli.conftest import loopback_inventory, rackctl
from tests.sshnode import free_port

NODES = ("head-01", "cp-02", "cp-03", "gpu-l40s-01", "gpu-xe9680-01")


def _fits(text: str, columns: int) -> list[str]:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)
    return lines


@pytest.mark.parametrize("columns", [80, 120])
def test_unreadable_nodes_are_marked_and_their_error_said_once(tmp_path: Path, columns: int) -> None:
    inventory = loopback_inventory(tmp_path, free_port())  # no BMC answers
    args = ("firmware", "plan", "-i", str(inventory), "--state-dir", str(tmp_path / "state"))
    proc = rackctl(*args, COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 1, proc.stderr
    lines = _fits(proc.stdout, columns)
    rows = [line for line in lines if "not read" in line and "│" in line]
    assert sorted(row.split("│")[1].strip() for row in rows) == sorted(NODES)  # a row each, hostname whole
    assert (proc.stdout + proc.stderr).count("cannot reach the BMC") == 1  # once, for the five nodes
    said = " ".join(" ".join(line for line in lines if "│" not in line).split())
    assert f"not read {', '.join(NODES)}: cannot reach the BMC" in said


def test_a_plan_against_emulated_idracs_fits_80_columns(fwlab: FwLab, tmp_path: Path) -> None:
    args = ("firmware", "plan", "-i", str(fwlab.inventory), "--state-dir", str(tmp_path / "state"))
    proc = rackctl(*args, COLUMNS="80", TERM="xterm")
    assert proc.returncode == 0, proc.stderr
    lines = _fits(proc.stdout, 80)
    rows = [line.split("│") for line in lines if "│" in line and "batch" not in line]
    assert {cells[1].strip() for cells in rows if cells[1].strip()} == set(fwlab.order)  # every hostname whole
    assert "…" not in proc.stdout
