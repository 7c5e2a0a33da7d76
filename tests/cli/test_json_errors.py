"""``--json`` gives one JSON document on stdout for click's usage errors and for Ctrl-C.

Real ``rackctl`` subprocesses; the interrupt is a real SIGINT sent to a process waiting on a BMC that
accepts connections and never answers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.cli.conftest import ROOT, SilentBmc, loopback_inventory, rackctl, rackctl_env


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["validate", "--bogus", "--json"], "No such option '--bogus'"),
        (["journal", "mark", "n1", "nonsense", "--cause", "x", "--json"], "'nonsense' is not one of"),
        (["--json", "journal", "mark"], "--json"),
        (["journal", "mark", "--json"], "Missing argument"),
        (["nosuch", "--json"], "No such command 'nosuch'"),
    ],
)
def test_usage_errors_are_one_json_document(args, words):
    proc = rackctl(*args)
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2
    assert words in doc["error"]
    assert "Traceback" not in proc.stderr


def test_usage_error_without_json_stays_text():
    proc = rackctl("validate", "--bogus")
    assert proc.returncode == 2
    assert proc.stdout == "" and "No such option" in proc.stderr


def test_invalid_input_json_carries_the_exit_code(tmp_path):
    proc = rackctl("journal", "show", "--state-dir", str(tmp_path / "none"), "--json")
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2 and "no journal" in doc["error"]


def _interrupt(args: list[str], tmp_path, silent_bmc: SilentBmc) -> tuple[int, str, str]:
    """Start ``rackctl ARGS --json`` against a BMC that never answers, then send it a real SIGINT once it
    waits for that BMC's answer (it connected and sent its first bytes)."""
    inv = loopback_inventory(tmp_path, silent_bmc.port)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bootstrap", *args, "-i", str(inv), "--limit", "head-01", "--json"],
        cwd=ROOT,
        env=rackctl_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert silent_bmc.wait_for_request(), "the client closed its connection without a byte"
    except TimeoutError:
        proc.kill()
        raise AssertionError(f"rackctl never sent the silent BMC a request: {proc.communicate()}") from None
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_sigint_with_json_is_one_json_document_and_exit_130(tmp_path, silent_bmc):
    code, out, err = _interrupt(["bmc", "status"], tmp_path, silent_bmc)
    assert code == 130, err
    doc = json.loads(out)
    assert doc["ok"] is False and doc["exit_code"] == 130 and "interrupted" in doc["error"]
    assert "Traceback" not in err


def test_sigint_during_up_with_json_is_one_json_document(tmp_path, silent_bmc):
    state = tmp_path / "state"
    code, out, err = _interrupt(
        ["up", "--stages", "preflight,discover", "--state-dir", str(state)], tmp_path, silent_bmc
    )
    assert code == 130, err
    doc = json.loads(out)
    assert doc["ok"] is False and doc["exit_code"] == 130 and "interrupted" in doc["error"]
    assert "Traceback" not in err
