"""``rackctl status`` fits the terminal: one line per node at 80 and 120 columns, hostnames whole, and why a
value is missing, or a value too long for its cell, written once below the table (the same BMC error is not
repeated in three columns of every node)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from bootstrap.cli.day2_cmds import show_status
from bootstrap.day2.status import degraded, ok, unavailable
from tests.cli.conftest import loopback_inventory, rackctl
from tests.sshnode import free_port

NODES = ("head-01", "cp-02", "cp-03", "gpu-l40s-01", "gpu-xe9680-01")
ROW = re.compile(r"[│ ]*(head|cp|gpu)-")


def _rows(lines: list[str]) -> list[str]:
    """The table's lines that start a node's row; any other line of the table is a folded cell."""
    return [line for line in lines if ROW.match(line)]


def _table(lines: list[str]) -> list[str]:
    """The table's lines between its header and the first line written below it."""
    start = next(i for i, line in enumerate(lines) if "node" in line) + 1
    end = next((i for i, line in enumerate(lines) if re.match(r"\[\d+\] |degraded data", line)), len(lines))
    return [line for line in lines[start:end] if line.strip("━┡╇┩└─┴┘ ")]


@pytest.mark.parametrize("columns", [80, 120])
def test_status_is_one_line_per_node_with_each_reason_once(tmp_path: Path, columns: int) -> None:
    inventory = loopback_inventory(tmp_path, free_port())  # no BMC answers: power, health, firmware degraded
    args = ("status", "-i", str(inventory), "--state-dir", str(tmp_path / "state"))
    proc = rackctl(*args, COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 1, proc.stderr  # degraded data
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    rows = _rows(lines)
    assert _table(lines) == rows  # no cell folded onto a second line
    assert [ROW.sub(lambda m: m.group(1) + "-", row).split()[0].strip("│") for row in rows] == list(NODES)
    reasons = [line for line in lines if re.match(r"\[\d+\] ", line)]
    assert len([r for r in reasons if "BMC not answering" in r]) == 1
    assert proc.stdout.count("cannot reach the BMC") == 1  # once, though power, health and firmware lack it
    wide = rackctl(*args, "--wide", COLUMNS="1000", TERM="xterm")
    assert wide.stdout.count("cannot reach the BMC") >= 3 * len(NODES)  # --wide: inside every cell


def _answering_rack() -> dict:
    """What ``collect`` returns for a rack whose BMCs and API answer, with values as long as a site's."""
    at_baseline = ok("BIOS 1.6.5, iDRAC 7.10.30.00 (at baseline)", "baseline", refer=False)  # as firmware_cell
    rows = []
    for name in NODES:
        gpu = name.startswith("gpu-")
        row = {
            "node": name, "role": "worker" if gpu else "control-plane", "model": "R660",
            "power": ok("On"), "health": ok("Warning" if name == "cp-03" else "OK"),
            "lifecycle": ok("provisioning" if name == "cp-02" else "ready"),
            "firmware": ok("below baseline: BIOS 1.5.2 < 1.6.5; iDRAC 7.00.00.171 < 7.10.30.00", "below")
            if name == "gpu-xe9680-01" else at_baseline,
            "driver": ok("580.95.05" if gpu else "no GPUs"),
            "kubernetes": ok("NotReady, cordoned", "cordoned") if name == "gpu-l40s-01" else ok("Ready"),
            "gpus": ok(8 if gpu else 0),
        }  # fmt: skip
        rows.append({k: (v.as_dict() if hasattr(v, "as_dict") else v) for k, v in row.items()})
    rows[0]["driver"] = unavailable("not deployed: the nvidia stage has not run on this node").as_dict()
    rows[1]["power"] = degraded("BMC not answering (timeout): no answer in 30 s").as_dict()
    return {"ok": False, "nodes": rows, "degraded": ["cp-02"], "kubernetes": {"deployed": True, "reason": ""}}


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_long_values_become_a_word_and_are_written_whole_below(columns: int) -> None:
    out = Console(file=io.StringIO(), width=columns, color_system=None)
    show_status(_answering_rack(), out=out)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert _table(lines) == _rows(lines) and len(_rows(lines)) == len(NODES)  # a line per node
    flat = " ".join(text.split())
    for whole in (
        "below baseline: BIOS 1.5.2 < 1.6.5; iDRAC 7.00.00.171 < 7.10.30.00",
        "NotReady, cordoned",
        "no answer in 30 s",
    ):
        assert flat.count(whole) == 1, (whole, text)  # each whole, once: in its cell or below it
    assert "provisioning" in flat and flat.count("580.95.05") == 2  # short values whole in their cells
    below = [line for line in lines if re.match(r"\[\d+\] ", line)]
    refs = {ref for row in _rows(lines) for ref in re.findall(r"\[(\d+)\]", row)}
    assert refs == {line[1 : line.index("]")] for line in below}  # every reference explained, nothing else
    if columns == 200:  # room enough: boxed, each value whole in its cell
        assert "┃ firmware" in text and "below baseline" in _rows(lines)[-1]
        assert flat.count("BIOS 1.6.5, iDRAC 7.10.30.00 (at baseline)") == 4
    else:  # a word in the cell, the value whole below where the word alone would hide something
        assert "below [" in _rows(lines)[-1] and "cordoned [" in _rows(lines)[3]
        assert "BIOS 1.6.5" not in text and all(" baseline " in row for row in _rows(lines)[:4])
