"""``run_triton_stage``: render + manifests + checks for the ``triton`` stage of ``rackctl up``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from bootstrap.triton.stage import run_triton_stage
from tests.triton.conftest import make_spec


def test_stage_renders_checks_and_reports_json(tmp_path: Path):
    inventory = SimpleNamespace(models=[make_spec(name="a"), make_spec(name="b", tensor_parallelism=2)])
    result = run_triton_stage(inventory, tmp_path, load_check=False)
    json.dumps(result)  # JSON-able
    assert result["ok"] is True
    assert [m["gpus"] for m in result["manifests"]] == [1, 2]
    assert (tmp_path / "b" / "k8s" / "deployment.yaml").is_file()
    assert all(c["problems"] == [] for c in result["checks"])


def test_stage_refuses_a_model_whose_files_were_never_delivered(tmp_path: Path):
    """A model with source_dir and no delivered version: the stage's check names the field and the command
    (it would deploy a Deployment pointing at files not on the nodes)."""
    source = tmp_path / "build-host" / "m"
    source.mkdir(parents=True)
    spec = make_spec(name="a", trtllm_version="26.07", engine_dir=None, source_dir=str(source))
    result = run_triton_stage(SimpleNamespace(models=[spec]), tmp_path / "triton", load_check=False)
    assert result["ok"] is False
    [problem] = result["checks"][0]["problems"]
    assert problem["path"] == "models[a].source_dir"
    assert problem["fix"] == "run `rackctl triton deliver --model a`, then render again"
