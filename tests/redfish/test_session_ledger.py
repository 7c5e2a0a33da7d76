"""The session ledger against an emulated iDRAC: recorded at login, removed at logout, and the sessions of a
process that is gone closed by the next login or by ``close_stale_sessions``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from rf_lab import FAST, Lab

from redfish_tools import session_ledger
from redfish_tools.connection import BmcConnection, close_stale_sessions

NAME = "spare-1"


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def _entries(ledger: Path) -> list[Path]:
    return sorted(ledger.rglob("*.json"))


def _orphan(lab: Lab, ledger: Path, *, pid: int) -> str:
    """A session left open on the BMC and recorded in the ledger as opened by ``pid``."""
    conn = BmcConnection(lab.target(NAME), replace(FAST, session_ledger=ledger))
    conn.open()
    uri = conn._session_uri
    assert uri
    conn._session_uri = None  # "killed": close() cannot log out
    conn.close()
    (path,) = [p for p in _entries(ledger) if json.loads(p.read_text())["uri"] == uri]
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": pid}))
    return uri


def test_entry_written_at_login_and_removed_at_logout(lab: Lab, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    with BmcConnection(lab.target(NAME), replace(FAST, session_ledger=ledger)) as conn:
        (path,) = _entries(ledger)
        entry = json.loads(path.read_text())
        assert entry["uri"] == conn._session_uri and entry["username"] == lab.target(NAME).username
        assert conn._token and conn._token not in path.read_text()
        assert lab.specs[NAME].password not in path.read_text()
    assert _entries(ledger) == []
    assert lab.rack.open_sessions(NAME) == 0


def test_next_login_closes_a_dead_process_session(lab: Lab, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    _orphan(lab, ledger, pid=_dead_pid())
    assert lab.rack.open_sessions(NAME) == 1
    with BmcConnection(lab.target(NAME), replace(FAST, session_ledger=ledger)):
        assert lab.rack.open_sessions(NAME) == 1  # only ours
    assert lab.rack.open_sessions(NAME) == 0
    assert _entries(ledger) == []


def test_close_stale_sessions_skips_live_processes_and_drops_gone_sessions(lab: Lab, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    target = lab.target(NAME)
    live = _orphan(lab, ledger, pid=os.getpid())  # this process: maybe still in use
    dead = _orphan(lab, ledger, pid=_dead_pid())
    session_ledger.record(ledger, target.url, "/redfish/v1/SessionService/Sessions/999999", target.username)
    gone = max(_entries(ledger), key=lambda p: "999999" in p.read_text())
    gone.write_text(json.dumps({**json.loads(gone.read_text()), "pid": _dead_pid()}))
    assert lab.rack.open_sessions(NAME) == 2

    assert close_stale_sessions(target, ledger, FAST) == 2  # the dead one, and the one the BMC lost (404)
    assert lab.rack.open_sessions(NAME) == 1
    (left,) = _entries(ledger)
    assert json.loads(left.read_text())["uri"] == live
    assert dead != live
    assert close_stale_sessions(target, ledger, FAST) == 0
    # clean up the "live" one by hand
    with BmcConnection(target, FAST) as conn:
        conn.delete(live)
    assert lab.rack.open_sessions(NAME) == 0
