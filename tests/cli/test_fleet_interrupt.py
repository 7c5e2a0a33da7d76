"""Ctrl-C stops a fleet command at once: a real SIGINT to ``rackctl power off`` against emulated iDRACs.

One node answers fast, the others slowly (3 s a request). The SIGINT is sent as soon as the fast node's
power action reached its BMC; the slow nodes are then still at their first request. The command must exit
130 within a couple of seconds with its JSON result, the slow nodes must still be on (their power action
never sent), and no session may be left open on any BMC.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import ROOT, inventory_on_rack, rackctl_env
from tests.redfish.rf_lab import NODES, api, make_spec

FAST = "head-01"
SLOW_MS = 3000


@pytest.fixture(scope="module")
def rack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The sample inventory's five nodes, all powered on."""
    specs = [replace(make_spec(*n, index=i), power_state="On") for i, n in enumerate(NODES)]
    emulated = api.EmulatedRack(specs, tmp_path_factory.mktemp("rack"), processes=1)
    endpoints = emulated.start()
    try:
        yield emulated, {s.name: s for s in specs}, {e.name: e for e in endpoints}
    finally:
        emulated.stop()


def _power_posted(emulated: Any, name: str) -> bool:
    return any(r["method"] == "POST" and r["path"].endswith("Reset") for r in emulated.request_log(name))


def test_sigint_stops_power_off_at_once(rack: Any, tmp_path: Path) -> None:
    emulated, specs, endpoints = rack
    slow = [name for name in specs if name != FAST]
    emulated.set_latency(FAST, 20)
    for name in slow:
        emulated.set_latency(name, SLOW_MS)
    inventory, env = inventory_on_rack(tmp_path, specs, endpoints)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bootstrap", "power", "off", "-i", str(inventory), "--json"],
        cwd=ROOT,
        env=rackctl_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        limit = time.monotonic() + 60
        while not _power_posted(emulated, FAST):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < limit, "the fast node never got its power action"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for name in specs:
            emulated.set_latency(name, 0)

    assert proc.returncode == 130, err
    assert took < 3.0, f"exit took {took:.1f} s after SIGINT"
    doc = json.loads(out)
    assert doc["ok"] is False and doc["exit_code"] == 130 and "interrupted" in doc["error"]
    assert "Traceback" not in err
    cut = {n["name"]: n for n in doc["nodes"]}
    for name in slow:
        assert cut[name]["ok"] is False and cut[name]["error"]["kind"] == "cancelled", cut[name]
    time.sleep(SLOW_MS / 1000 + 0.5)  # requests cut on our side are still answered late by the BMC
    for name in slow:
        assert emulated.state(name)["power_state"] == "On", f"{name} was powered off after Ctrl-C"
        assert not _power_posted(emulated, name)
    for name in specs:
        assert emulated.open_sessions(name) == 0, f"session left open on {name}"
    for name in specs:
        assert specs[name].password not in out + err
