"""A failed ``rackctl up`` fits the terminal and says each node's error once: not in the progress lines, the
stage's cell and the run's summary as well, only below the table (nodes sharing an error together), with the
run's summary naming the failed nodes; the ``--json`` document keeps every message whole."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli.conftest import ROOT, loopback_inventory, rackctl
from tests.sshnode import free_port

NODES = ("head-01", "cp-02", "cp-03", "gpu-l40s-01", "gpu-xe9680-01")


@pytest.mark.parametrize("columns", [80, 120])
def test_a_failed_up_says_each_nodes_error_once_and_fits(tmp_path: Path, columns: int) -> None:
    port = free_port()
    inventory = loopback_inventory(tmp_path, port)  # no BMC answers: preflight fails on every node
    args = ("up", "-i", str(inventory), "--state-dir", str(tmp_path / "state"), "--stages", "preflight,discover")
    proc = rackctl(*args, "--yes", COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)
    everything = proc.stdout + proc.stderr
    addresses = [f"(https://127.0.0.1:{p})" for p in (port, 2, 3, 4, 5)]  # each node's own fix names its address
    for address in addresses:
        assert everything.count(address) == 1, (address, everything)
    for node in NODES:
        assert re.search(rf"(^|[\s,]){re.escape(node)}[\s,=:]", proc.stdout), node  # whole, never cut
        assert f"preflight {node} failed\n" in proc.stderr  # the progress says which node failed, not why
    (stage_row,) = [line for line in lines if line.startswith("│ preflight")]
    assert "failed on 5 node(s), below" in stage_row
    summary = " ".join(" ".join(lines[-3:]).split())
    assert "stage 'preflight' failed on head-01, cp-02, cp-03, gpu-l40s-01, gpu-xe9680-01; the run stopped" in summary

    data = json.loads(rackctl(*args, "--json", "--yes").stdout)  # the JSON keeps every message
    assert all(address in data["message"] for address in addresses[:4])
    assert all(data["stages"][0]["nodes"][node]["ok"] is False for node in NODES)


def test_a_failed_discover_says_each_error_and_the_tls_warning_once(tmp_path: Path) -> None:
    inventory = loopback_inventory(tmp_path, free_port())
    args = ("discover", "-i", str(inventory), "--state-dir", str(tmp_path / "state"), "--limit", "cp-02,gpu-*")
    proc = rackctl(*args, COLUMNS="80", TERM="xterm")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line.split("│") for line in lines if "│" in line]
    assert [cells[0].strip() for cells in rows] == ["cp-02", "gpu-l40s-01", "gpu-xe9680-01"]  # whole
    assert (proc.stdout + proc.stderr).count("cannot reach the BMC") == 3  # once per node, in its row
    assert proc.stderr.count("TLS verification is off") == 1
    summary = " ".join(" ".join(lines[len(rows) + 2 :]).split())
    assert summary.startswith("stage 'discover' failed on cp-02, gpu-l40s-01, gpu-xe9680-01; the run stopped")


@pytest.mark.parametrize("columns", [80, 120])
def test_a_run_that_only_rendered_says_each_stages_why_once(tmp_path: Path, columns: int) -> None:
    state = tmp_path / "state"
    args = ("up", "-i", str(ROOT / "inventory" / "examples" / "dvd-inference.yml"), "--state-dir", str(state))
    proc = rackctl(*args, "--stages", "kubernetes,nvidia,triton", "--yes", COLUMNS=str(columns), TERM="xterm")
    assert proc.returncode == 5, proc.stderr  # rendered + validated, not applied
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    rows = [line for line in lines if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["kubernetes", "nvidia", "triton"]  # a line each
    everything = "".join((proc.stdout + proc.stderr).split())  # wrapping aside
    for stage in ("cluster", "nvidia", "triton"):
        assert everything.count(f"artefacts:{state / stage}") == 1, stage  # each stage's why and where, once
    assert "kubernetes: rendered + validated, not applied (why: `rackctl journal show NODE`)" in proc.stderr
