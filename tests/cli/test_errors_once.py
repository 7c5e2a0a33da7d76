"""An error shared by several nodes is said once: five nodes using one credentials entry whose password
variable is empty give one problem, on stderr and in the ``--json`` document, for every command that reads
the BMCs."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import ROOT, rackctl

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
