"""``rackctl apply --plan`` fits the terminal: a line per node, hostnames whole, a note too long for its cell
cut with a reference and written whole below, once."""

from __future__ import annotations

import re

import pytest

from tests.cli.conftest import ROOT, rackctl

SAMPLE = str(ROOT / "inventory" / "examples" / "dvd-inference.yml")
NODES = ["head-01", "cp-02", "cp-03", "gpu-l40s-01", "gpu-xe9680-01"]


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_apply_plan_is_a_line_per_node(tmp_path, columns: int) -> None:
    proc = rackctl("apply", "--plan", "-i", SAMPLE, "--state-dir", str(tmp_path), COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    rows = [line.split("│") for line in lines if line.startswith("│")]
    assert [cells[1].strip() for cells in rows] == NODES  # a line per node, each hostname whole
    refs = {ref for cells in rows for ref in re.findall(r"… \[(\d+)\]", cells[5])}
    notes = [line for line in lines if re.match(r"\[\d+\] ", line)]
    assert sorted(n.split("]")[0][1:] for n in notes) == sorted(refs)  # each cut note written once below
    if columns >= 80:  # room for the note whole in its cell
        assert all(cells[5].strip() == "every stage, this node alone" for cells in rows) and not notes
    else:
        assert notes == ["[1] every stage, this node alone"]  # the five nodes' note, written once
