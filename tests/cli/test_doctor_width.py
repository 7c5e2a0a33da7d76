"""``rackctl doctor`` on a narrow terminal: every install command appears whole, on one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

LONG = (
    "apt-get install --no-install-recommends rackctl-no-such-tool-with-a-long-name "
    "rackctl-no-such-companion-package && rackctl-no-such-tool --version"
)
SCRIPT = f"""
import sys
from bootstrap import doctor
from bootstrap.doctor import Check
doctor.CHECKS = (*doctor.CHECKS, Check("rackctl-no-such-tool", "command", "testing doctor", "lab", {LONG!r}))
from bootstrap.cli import cli
sys.argv = ["rackctl", "doctor", "--require", "lab"]
cli()
"""


def test_install_commands_are_whole_at_60_columns() -> None:
    env = {**os.environ, "COLUMNS": "60", "PYTHONPATH": str(REPO), "TERM": "xterm"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False
    )
    assert proc.returncode == 3, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines() if line.startswith("│")) <= 60  # the table fits
    assert f"  rackctl-no-such-tool: {LONG}" in proc.stdout.splitlines()
    assert "…" not in proc.stdout  # nothing cut with an ellipsis
