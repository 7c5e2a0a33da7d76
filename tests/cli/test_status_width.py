"""``rackctl status`` fits the terminal: one line per node at 120 columns (two at most at 80), hostnames
whole, and why a value is missing written once below the table (the same BMC error is not repeated in three
columns of every node)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.conftest import loopback_inventory, rackctl
from tests.sshnode import free_port

NODES = ("head-01", "cp-02", "cp-03", "gpu-l40s-01", "gpu-xe9680-01")


@pytest.mark.parametrize("columns", [80, 120])
def test_status_is_one_line_per_node_with_each_reason_once(tmp_path: Path, columns: int) -> None:
    inventory = loopback_inventory(tmp_path, free_port())  # no BMC answers: power, health, firmware degraded
    args = ("status", "-i", str(inventory), "--state-dir", str(tmp_path / "state"))
    proc = rackctl(*args, COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 1, proc.stderr  # degraded data
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) <= len(NODES) * (1 if columns >= 120 else 2)  # a line per node (two at most at 80)
    firsts = [line for line in rows if not line.startswith("│  ")]
    assert [row.split("│")[1].strip() for row in firsts] == list(NODES)  # each hostname whole, on one line
    reasons = [line for line in lines if re.match(r"\[\d+\] ", line)]
    assert len([r for r in reasons if "BMC not answering" in r]) == 1
    assert proc.stdout.count("cannot reach the BMC") == 1  # once, though power, health and firmware lack it
    wide = rackctl(*args, "--wide", COLUMNS="1000", TERM="xterm")
    assert wide.stdout.count("cannot reach the BMC") >= 3 * len(NODES)  # --wide: inside every cell
