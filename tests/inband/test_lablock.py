"""The lab lock is taken unless an ancestor (``flock LOCK pytest ...``) holds it: no waiting on oneself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import sys; from pathlib import Path; from tests.inband.lablock import held_by_ancestor, lab_lock\n"
    "path = Path(sys.argv[1]); held = held_by_ancestor(path)\n"
    "with lab_lock(path): print(held)\n"
)


def _probe(lock: Path, *wrapper: str) -> str:
    argv = [*wrapper, sys.executable, "-c", PROBE, str(lock)]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30, cwd=ROOT).stdout.strip()


def test_taken_when_free_and_not_waited_for_under_an_ancestors_flock(tmp_path: Path) -> None:
    lock = tmp_path / "lab.lock"
    lock.touch()
    assert _probe(lock) == "False"  # nobody holds it: taken here
    assert _probe(lock, "flock", str(lock)) == "True"  # held by the parent flock: used, not waited on
