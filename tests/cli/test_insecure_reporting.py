"""Talking to a BMC without TLS verification is said once per run: stderr, ``--json`` and the journal.

Real ``rackctl`` subprocesses against loopback BMC addresses that refuse connections (the commands try
them, fail per node, and must still report how they would have connected).
"""

from __future__ import annotations

import json

from bootstrap.journal.store import Journal
from tests.cli.conftest import loopback_inventory, rackctl

WARNING = "TLS verification is off"


def test_bmc_status_json_lists_the_warning_once(tmp_path):
    inv = loopback_inventory(tmp_path, 9, insecure=True)
    proc = rackctl("bmc", "status", "-i", str(inv), "--limit", "head-01", "--json")
    doc = json.loads(proc.stdout)
    assert len(doc["warnings"]) == 1 and WARNING in doc["warnings"][0]
    assert "head-01" in doc["warnings"][0] and "insecure: true" in doc["warnings"][0]
    assert WARNING not in proc.stderr


def test_bmc_status_text_warns_once_on_stderr(tmp_path):
    inv = loopback_inventory(tmp_path, 9, insecure=True)
    proc = rackctl("bmc", "status", "-i", str(inv), "--limit", "head-01")
    assert proc.stderr.count(WARNING) == 1, proc.stderr


def test_verified_bmcs_give_no_warning(tmp_path):
    inv = loopback_inventory(tmp_path, 9, insecure=False)
    proc = rackctl("bmc", "status", "-i", str(inv), "--limit", "head-01", "--json")
    assert "warnings" not in json.loads(proc.stdout)
    assert WARNING not in proc.stderr


def test_up_insecure_flag_is_reported_in_json_and_journal(tmp_path):
    inv = loopback_inventory(tmp_path, 9, insecure=False)
    state = tmp_path / "state"
    proc = rackctl("up", "--stages", "preflight", "--insecure", "-i", str(inv), "--state-dir", str(state), "--json")
    doc = json.loads(proc.stdout)
    assert len(doc["warnings"]) == 1 and WARNING in doc["warnings"][0] and "--insecure" in doc["warnings"][0]
    with Journal(state, readonly=True) as journal:
        run = journal.runs()[0]
    assert "--insecure" in run.command and WARNING in run.message


def test_up_with_insecure_inventory_warns_once_on_stderr(tmp_path):
    inv = loopback_inventory(tmp_path, 9, insecure=True)
    proc = rackctl("up", "--stages", "preflight", "-i", str(inv), "--state-dir", str(tmp_path / "s"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count(WARNING) == 1, proc.stderr
    assert "insecure: true in the inventory" in proc.stderr


def test_up_verified_has_no_warning(tmp_path):
    inv = loopback_inventory(tmp_path, 9, insecure=False)
    proc = rackctl("up", "--stages", "preflight", "-i", str(inv), "--state-dir", str(tmp_path / "s"), "--json")
    assert json.loads(proc.stdout)["warnings"] == []
