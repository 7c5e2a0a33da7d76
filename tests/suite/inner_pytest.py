"""A pytest run inside a test: the suite's own plugins tried on a throwaway tree of test files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_pytest(tree: Path, *args: str, timeout: float = 120, returncode: int = 0) -> subprocess.CompletedProcess[str]:
    """``pytest -q ARGS`` in ``tree`` (its own rootdir, no config), this repository importable; asserts its exit
    status is ``returncode`` (0: every test passed, 1: some failed)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", os.devnull, "--rootdir", str(tree), *args],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == returncode, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc
