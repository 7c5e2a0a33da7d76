"""A read-only or unwritable state directory: refused (exit 2) before any BMC is contacted; a valid journal
on a read-only mount is still read by ``journal show`` and never called corrupt.

The read-only mount is real: a bind mount remounted read-only inside a private mount namespace
(``unshare -m``), so nothing leaks to the host; skipped where namespaces are not allowed.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.errors import InvalidInput
from bootstrap.journal.store import Journal
from bootstrap.stages.runner import ensure_writable_state_dir
from tests.cli.conftest import ROOT, loopback_inventory, rackctl, rackctl_env


def _can_mount_ro(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    script = f"mount --bind {probe} {probe} && mount -o remount,ro,bind {probe} {probe} && ! touch {probe}/x"
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, check=False)
    return result.returncode == 0


def rackctl_on_ro_mount(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run rackctl with ``state_dir`` mounted read-only (in a private mount namespace)."""
    d = shlex.quote(str(state_dir))
    cmd = shlex.join([sys.executable, "-m", "bootstrap", *args])
    script = f"mount --bind {d} {d} && mount -o remount,ro,bind {d} {d} && exec {cmd}"
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        cwd=ROOT,
        env=rackctl_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    """A state directory with a real journal: one run, two nodes."""
    if not _can_mount_ro(tmp_path):
        pytest.skip("read-only bind mounts in a mount namespace are not allowed here")
    state = tmp_path / "state"
    with Journal(state) as journal:
        run = journal.begin_run("up")
        journal.register_nodes(["head-01", "cp-02"], run_id=run)
        journal.finish_run(run, "completed", "done")
    return state


def test_journal_show_reads_a_journal_on_a_read_only_mount(journal_dir):
    proc = rackctl_on_ro_mount(journal_dir, "journal", "show", "--state-dir", str(journal_dir), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted(n["node"] for n in doc["nodes"]) == ["cp-02", "head-01"]
    assert doc["runs"][0]["status"] == "completed"
    assert "move it aside" not in proc.stdout + proc.stderr


def test_up_on_a_read_only_state_dir_exits_2_before_contacting_a_bmc(journal_dir, tmp_path):
    with socket.socket() as bmc:
        bmc.bind(("127.0.0.1", 0))
        bmc.listen(4)
        inv = loopback_inventory(tmp_path, bmc.getsockname()[1])
        proc = rackctl_on_ro_mount(journal_dir, "up", "-i", str(inv), "--state-dir", str(journal_dir), "--json")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout)
        assert "not writable" in doc["error"] and "Read-only file system" in json.dumps(doc)
        assert "Traceback" not in proc.stderr
        bmc.settimeout(0.2)
        with pytest.raises(TimeoutError):
            bmc.accept()  # nobody connected


def test_discover_on_a_read_only_state_dir_exits_2(journal_dir, tmp_path):
    inv = loopback_inventory(tmp_path, 9)
    proc = rackctl_on_ro_mount(journal_dir, "discover", "-i", str(inv), "--state-dir", str(journal_dir))
    assert proc.returncode == 2, proc.stderr
    assert "not writable" in proc.stderr and "Traceback" not in proc.stderr


def test_state_dir_below_a_file_is_refused_with_the_fix(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InvalidInput) as info:
        ensure_writable_state_dir(blocker / "state")
    assert info.value.problems[0].path == "--state-dir" and "writable directory" in info.value.problems[0].fix


def test_up_with_unwritable_state_dir_cli(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    inv = loopback_inventory(tmp_path, 9)
    proc = rackctl("up", "-i", str(inv), "--state-dir", str(blocker / "state"))
    assert proc.returncode == 2 and "not writable" in proc.stderr and "Traceback" not in proc.stderr


def test_a_file_that_is_not_a_journal_is_still_called_unreadable(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "journal.sqlite3").write_bytes(b"not a database at all" * 100)
    with pytest.raises(InvalidInput, match="move it aside"):
        Journal(state, readonly=True)
