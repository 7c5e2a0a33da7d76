"""``rackctl journal show`` fits the terminal: timestamps whole, never cut, at 80 and 120 columns; a run's
long message written once below the runs table instead of folded into a narrow cell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bootstrap.journal.states import NodeState
from bootstrap.journal.store import Journal
from tests.cli.conftest import rackctl

NODES = ("head-01", "cp-02", "cp-03", "gpu-l40s-01", "gpu-xe9680-01")
MESSAGE = (
    "stage network failed on gpu-xe9680-01: task 'Install the container runtime' could not reach the "
    "head node's mirror at 10.10.0.21:8080 (connection refused); the other nodes finished"
)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    with Journal(tmp_path) as journal:
        journal.register_nodes(list(NODES))
        run = journal.begin_run("up --stages preflight,discover,firmware,bios,provision,os-check,network")
        journal.transition("gpu-xe9680-01", NodeState.FAILED, "network: the mirror did not answer", run_id=run)
        journal.finish_run(run, "failed", MESSAGE)
    return tmp_path


def _cut_only_with_a_reference(lines: list[str]) -> None:
    """A cell cut short ends ``… [n]`` and ``[n]`` is written whole below its table, never itself cut."""
    refs = [ref for line in lines if line.startswith("│") for ref in re.findall(r"… \[(\d+)\]", line)]
    assert sum(line.count("…") for line in lines if line.startswith("│")) == len(refs)
    notes = [line for line in lines if re.match(r"\[\d+\] ", line)]
    for ref in refs:
        assert any(note.startswith(f"[{ref}] ") for note in notes), ref
    assert "…" not in "".join(notes)


@pytest.mark.parametrize("columns", [80, 120])
def test_journal_show_fits_and_cuts_no_timestamp(state: Path, columns: int) -> None:
    proc = rackctl("journal", "show", "--state-dir", str(state), COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    _cut_only_with_a_reference(lines)
    stamps = re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", proc.stdout)  # UTC, to the second
    assert len(stamps) >= len(NODES) + 2  # each node's since, the run's start and end, whole
    node_rows = [line for line in lines if re.match(r"│ (head|cp|gpu)-", line)]
    assert sorted(row.split("│")[1].strip() for row in node_rows) == sorted(NODES)  # a line per node, whole
    assert len([line for line in lines if re.match(r"│ 1 ", line)]) == 1  # a line per run
    assert "up --stages preflight,discover,firmware,bios,provision,os-check,network" in proc.stdout  # whole
    below = " ".join(line for line in lines if not line.startswith(("│", "┃", "┏", "┡", "└")))
    assert " ".join(MESSAGE.split()) in " ".join(below.split())  # the message whole, once
    assert proc.stdout.count("connection refused") == 1


@pytest.mark.parametrize("columns", [80, 120])
def test_one_nodes_history_is_a_line_per_transition_with_causes_whole_below(state: Path, columns: int) -> None:
    proc = rackctl("journal", "show", "gpu-xe9680-01", "--state-dir", str(state), COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    _cut_only_with_a_reference(lines)
    rows = [line for line in lines if re.match(r"│ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ │", line)]
    assert len(rows) == 2  # registered, then failed: a line each
    assert "registered → failed" in proc.stdout
    assert "network: the mirror did not answer" in " ".join(" ".join(lines).split())  # the cause, whole
