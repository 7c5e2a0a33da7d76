"""``--out`` defaults follow ``--state-dir`` (and ``$RACKCTL_STATE_DIR``): one place for a run's files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bootstrap.cli import cli


def test_triton_render_and_check_default_to_the_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = tmp_path / "models.yml"
    models.write_text(
        "models:\n  - {name: a, trtllm_version: '0.14.0', hf_model_dir: /models/m, engine_dir: /models/e}\n"
    )
    state = tmp_path / "state"
    done = CliRunner().invoke(cli, ["triton", "render", "--models", str(models), "--state-dir", str(state), "--json"])
    assert done.exit_code == 0, done.output
    assert (state / "triton" / "a" / "model_repository").is_dir()
    monkeypatch.setenv("RACKCTL_STATE_DIR", str(state))  # DIRECTORY defaults to <state-dir>/triton too
    checked = CliRunner().invoke(cli, ["triton", "check", "--skip-engine", "--json"])
    assert [m["model"] for m in json.loads(checked.output)["models"]] == ["a"]


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="apt-cache is not on this machine")
def test_image_ramdisk_out_defaults_to_where_provision_looks(tmp_path: Path) -> None:
    from bootstrap.stages.provision import artefacts_for

    res = CliRunner().invoke(cli, ["image", "ramdisk", "--dry-run", "--state-dir", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    out = Path(json.loads(res.output)["out"])
    assert out == tmp_path / "artefacts" == artefacts_for(tmp_path).kernel.parent
