"""On a fresh clone, before `rackctl lab up`, the commands that only read the inventory succeed.

``inventory/lab.yml`` names a CA bundle and password files that `lab up` creates; whether they exist is an
environment check (preflight), never part of validating the file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``inventory/lab.yml`` copied where the files it references do not exist; its path."""
    inventory = tmp_path / "inventory" / "lab.yml"
    inventory.parent.mkdir()
    shutil.copy(REPO / "inventory" / "lab.yml", inventory)
    assert not (tmp_path / ".lab").exists()
    for name in ("RACKCTL_BMC_PASSWORD", "RACKCTL_INVENTORY", "RACKCTL_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return inventory


@pytest.mark.parametrize(
    "command",
    [
        ["validate"],
        ["plan", "--state-dir", "{tmp}/state"],
        ["inventory", "render", "--state-dir", "{tmp}/state"],
        ["triton", "render", "--out", "{tmp}/triton"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_reading_commands_pass_before_lab_up(fresh_clone: Path, command: list[str]) -> None:
    tmp = fresh_clone.parent.parent
    args = [part.format(tmp=tmp) for part in command] + ["-i", str(fresh_clone), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True
    assert not (tmp / ".lab").exists()  # nothing was created to make them pass
