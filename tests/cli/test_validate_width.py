"""``rackctl validate`` and a command's warnings fit the terminal: on one (80 or 120 columns) each problem is
wrapped at its width under the text's first column, words whole; piped, each stays on one line for grep."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.conftest import rackctl

SAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: a terminal for rich, without colours (the bold of a heading stays as an escape code, stripped here)
TERMINAL = {"FORCE_COLOR": "1", "NO_COLOR": "1", "TTY_COMPATIBLE": "1", "TERM": "xterm"}


def _broken(tmp_path: Path) -> Path:
    """The sample with three mistakes whose messages are longer than 80 columns."""
    text = SAMPLE.read_text().replace("    credentials: idrac\n", "    credentials: idracc\n", 1)
    text = text.replace("  name: dvd-inference", "  name: DVD_Inference!", 1)
    text = text.replace("      address: 10.10.0.11\n", "      address: 10.99.0.11\n", 1)
    path = tmp_path / "cluster.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("columns", [80, 120])
def test_each_problem_is_wrapped_at_the_terminals_width_under_its_text(tmp_path: Path, columns: int) -> None:
    proc = rackctl("validate", "-i", str(_broken(tmp_path)), COLUMNS=str(columns), **TERMINAL)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ANSI.sub("", line) for line in proc.stderr.splitlines()]
    too_long = [line for line in lines if len(line) > columns and " " in line.strip()]
    assert not too_long, "\n".join(lines)  # only a word longer than the line (the file's path) is kept whole
    starts = [line for line in lines if line.startswith("  error   ")]
    assert len(starts) == 3, lines  # the defaults' undefined credentials said once, not once per node
    body = lines[next(i for i, line in enumerate(lines) if line.startswith("  error   ")) :]
    assert all(line.startswith(" " * 10) for line in body if not line.startswith("  error   "))
    flat = " ".join(" ".join(lines).split())
    assert "bmc.defaults.credentials (line 45): credentials 'idracc' are not defined under `credentials:`" in flat
    assert "fix: did you mean 'idrac'?" in flat


def test_piped_each_problem_stays_on_one_line(tmp_path: Path) -> None:
    proc = rackctl("validate", "-i", str(_broken(tmp_path)), COLUMNS="80")
    assert proc.returncode == 2
    starts = [line for line in proc.stderr.splitlines() if line.startswith("  error   ")]
    assert len(starts) == 3 and len(proc.stderr.splitlines()) == 4, proc.stderr  # the heading and a line each
    assert any(len(line) > 80 for line in starts)  # whole, for grep and logs
