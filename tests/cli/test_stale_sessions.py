"""A rackctl killed with SIGKILL leaves its iDRAC session open; the next run closes it (the session ledger).

A real ``rackctl bmc status`` runs against an emulated iDRAC answering slowly. It is SIGKILLed once the
emulator holds its session. The session must still be open then (nothing could log out) and be recorded in
``<state-dir>/redfish-sessions/`` (URI and user, never the token). The next ``rackctl bmc status`` with the
same state dir DELETEs that session with basic auth before logging in, and leaves the BMC with as many
sessions as before the first run and an empty ledger.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.cli.conftest import ROOT, rackctl, rackctl_env
from tests.redfish.rf_lab import NODES, api, make_spec

SAMPLE = ROOT / "inventory" / "examples" / "dvd-inference.yml"
NODE = "head-01"
SLOW_MS = 1500


@pytest.fixture(scope="module")
def rack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    spec = replace(make_spec(*NODES[0], index=0), power_state="On")
    assert spec.name == NODE
    emulated = api.EmulatedRack([spec], tmp_path_factory.mktemp("rack"), processes=1)
    (endpoint,) = emulated.start()
    try:
        yield emulated, spec, endpoint
    finally:
        emulated.stop()


def _inventory(tmp_path: Path, spec: Any, endpoint: Any) -> tuple[Path, dict[str, str]]:
    """The sample inventory with ``head-01`` on the emulated iDRAC (the other nodes are never contacted)."""
    yaml = YAML()
    data = yaml.load(SAMPLE.read_text())
    data["cluster"]["lab"] = True
    data["credentials"] = {"lab": {"username": "root", "password_env": "RF_PW_HEAD"}}
    for node in data["nodes"]:
        node["bmc"]["credentials"] = "lab"
        if node["hostname"] == NODE:
            node["bmc"]["address"] = endpoint.url
            node["bmc"]["fingerprint"] = endpoint.fingerprint
    out = StringIO()
    yaml.dump(data, out)
    path = tmp_path / "cluster.yml"
    path.write_text(out.getvalue())
    return path, {"RF_PW_HEAD": spec.password}


def _ledger_entries(state_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (state_dir / "redfish-sessions").rglob("*.json")]


def test_sigkilled_run_leaves_a_session_the_next_run_closes(rack: Any, tmp_path: Path) -> None:
    emulated, spec, endpoint = rack
    before = emulated.open_sessions(NODE)
    inventory, env = _inventory(tmp_path, spec, endpoint)
    state_dir = tmp_path / "state"
    args = ["bmc", "status", "-i", str(inventory), "--state-dir", str(state_dir), "--limit", NODE, "--json"]
    emulated.set_latency(NODE, SLOW_MS)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bootstrap", *args],
        cwd=ROOT,
        env=rackctl_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        limit = time.monotonic() + 60
        while not (emulated.open_sessions(NODE) > before and _ledger_entries(state_dir)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < limit, "rackctl never logged in"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        emulated.set_latency(NODE, 0)
    assert proc.returncode == -signal.SIGKILL

    # The killed run could not log out: its session is open, and recorded (URI and user, no token).
    assert emulated.open_sessions(NODE) == before + 1
    (entry,) = _ledger_entries(state_dir)
    assert entry["username"] == "root" and entry["uri"].startswith("/redfish/v1/SessionService/Sessions/")
    stale_uri = entry["uri"]
    ledger_text = "".join(p.read_text() for p in (state_dir / "redfish-sessions").rglob("*.json"))
    assert spec.password not in ledger_text and "token" not in ledger_text.lower()
    logged_before = len(emulated.request_log(NODE))

    done = rackctl(*args, **env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True
    (read,) = json.loads(done.stdout)["nodes"]  # what the BMC said (redfish_tools.status): its identity
    assert read["value"]["service_tag"] == spec.service_tag and read["value"]["power"] in ("On", "Off"), read
    assert read["value"]["model"].endswith(spec.model) and read["value"]["idrac_version"], read
    assert read["value"]["lc"]["ready"] is True and read["value"]["pending_jobs"] == [], read

    assert emulated.open_sessions(NODE) == before, "the stale session (or the new one) is still open"
    assert _ledger_entries(state_dir) == []
    later = emulated.request_log(NODE)[logged_before:]
    deletes = [r for r in later if r["method"] == "DELETE" and r["path"].rstrip("/") == stale_uri.rstrip("/")]
    assert deletes and deletes[0]["status"] in {200, 204} and deletes[0]["auth"] == "basic", later
    first_login = next(i for i, r in enumerate(later) if r["method"] == "POST" and r["path"].endswith("/Sessions"))
    assert later.index(deletes[0]) < first_login, "the stale session is closed before the new login"
    assert "closed 1 session(s) left open by an earlier run" in done.stderr
