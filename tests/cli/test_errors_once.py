"""An error shared by several nodes is said once: five nodes using one credentials entry whose password
variable is empty give one problem, on stderr and in the ``--json`` document, for every command that reads
the BMCs."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import ROOT, loopback_inventory, rackctl
from tests.sshnode import free_port

SAMPLE = str(ROOT / "inventory" / "examples" / "dvd-inference.yml")


@pytest.mark.parametrize("command", [("status",), ("firmware", "plan"), ("bmc", "status")])
def test_a_credential_shared_by_every_node_is_reported_once(tmp_path, command: tuple[str, ...]) -> None:
    args = (*command, "-i", SAMPLE, "--state-dir", str(tmp_path))
    proc = rackctl(*args, RACKCTL_BMC_PASSWORD="", COLUMNS="80")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("credentials.idrac.password_env: environment variable RACKCTL_BMC_PASSWORD") == 1
    assert "Traceback" not in proc.stderr
    data = json.loads(rackctl(*args, "--json", RACKCTL_BMC_PASSWORD="").stdout)
    assert [e["path"] for e in data["errors"]] == ["credentials.idrac.password_env"]
    assert "RACKCTL_BMC_PASSWORD" in data["errors"][0]["fix"]


def test_a_bmc_that_does_not_answer_is_reported_once_per_node(tmp_path) -> None:
    """The progress line names the node that failed; its error, kind and MessageId are in the table only."""
    inventory = loopback_inventory(tmp_path, free_port())
    args = ("bmc", "status", "-i", str(inventory), "--state-dir", str(tmp_path / "s"), "--limit", "cp-02,gpu-*")
    proc = rackctl(*args, COLUMNS="80", TERM="xterm")
    assert proc.returncode == 1, proc.stderr
    nodes = ["cp-02", "gpu-l40s-01", "gpu-xe9680-01"]
    failed = sorted(line.split() for line in proc.stderr.splitlines() if line.strip().startswith("fail "))
    assert failed == [["fail", node] for node in nodes]
    assert (proc.stdout + proc.stderr).count("cannot reach the BMC") == 3  # once per node, in its row
    rows = [line.split("│") for line in proc.stdout.splitlines() if "│" in line]
    assert sorted(cells[0].strip() for cells in rows) == nodes
    assert all("(transport)" in cells[1] for cells in rows)
