"""ModelSpec rules: every cross-field error names the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from bootstrap.cli import cli
from tests.triton.conftest import make_spec


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"engine_dir": None}, ["engine_dir is required", "fix:"]),
        ({"layout": "llmapi", "trtllm_version": "0.14.0"}, ["layout 'llmapi' needs TensorRT-LLM >= 1.0"]),
        ({"trtllm_version": "0.7.1"}, ["trtllm_version '0.7.1' is not supported", "0.14.0"]),
        ({"batching_strategy": "V1"}, ["batching_strategy 'V1' is not available", "0.14.0"]),
        (
            {"kv_cache": {"max_tokens": 100, "max_attention_window": 200}},
            ["kv_cache.max_attention_window 200"],
        ),
        ({"tensor_parallelism": 8, "pipeline_parallelism": 2}, ["= 16 exceeds the 8 GPUs"]),
        (
            {"deployment": {"storage": {"kind": "nfs"}}},
            ["storage.nfs_server and storage.nfs_path are required"],
        ),
        ({"hf_model_dir": 'models/"x'}, ["hf_model_dir"]),
        ({"unknown_knob": 1}, ["unknown_knob"]),
        ({"hf_model_dir": "/models/../etc/x"}, ["hf_model_dir /models/../etc/x has a '.' or '..' segment", "fix:"]),
        ({"deployment": {"storage": {"node_dir": "/srv/./m"}}}, ["node_dir /srv/./m has a '.' or '..' segment"]),
        ({"deployment": {"storage": {"node_dir": "/"}}}, ["node_dir / is a system directory", "/mnt/nvme/"]),
        ({"deployment": {"storage": {"node_dir": "/etc/models"}}}, ["node_dir /etc/models is a system directory"]),
        (
            {"deployment": {"storage": {"kind": "nfs", "nfs_server": "ps", "nfs_path": "ifs/m"}}},
            ["nfs_path ifs/m is not absolute", "fix:"],
        ),
        ({"source_dir": "/srv/m"}, ["source_dir is delivered to hf_model_dir for layout llmapi only"]),
        (
            {
                "layout": "llmapi",
                "engine_dir": None,
                "trtllm_version": "26.07",
                "source_dir": "/srv/m",
                "deployment": {"storage": {"kind": "nfs", "nfs_server": "ps", "nfs_path": "/ifs"}},
            },
            ["rackctl never writes to an NFS export"],
        ),
    ],
)
def test_invalid_specs_are_refused_with_the_field(overrides, words):
    with pytest.raises(ValidationError) as info:
        make_spec(**overrides)
    text = str(info.value)
    for word in words:
        assert word in text


def test_valid_spec_derives_world_size_and_tokenizer():
    spec = make_spec(tensor_parallelism=4, pipeline_parallelism=2)
    assert spec.world_size == 8
    assert spec.tokenizer_path == "/models/hf/llama3-8b"
    assert make_spec(tokenizer_dir="/models/tok").tokenizer_path == "/models/tok"


def test_models_file_error_names_field_value_and_fix(tmp_path: Path):
    models = tmp_path / "models.yml"
    models.write_text(
        "models:\n  - name: llama\n    trtllm_version: '0.14.0'\n    hf_model_dir: /models/m\n"
        "    engine_dir: /models/e\n    precision: FP7\n"
    )
    result = CliRunner().invoke(cli, ["triton", "render", "--models", str(models), "--json", "--dry-run"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    errors = json.loads(result.output)["errors"]
    assert errors[0]["path"].startswith("models[0].precision")
    assert "'FP7'" in errors[0]["message"]
    assert "FP8" in errors[0]["fix"]


def test_duplicate_model_names_are_refused(tmp_path: Path):
    models = tmp_path / "models.yml"
    entry = "  - {name: a, trtllm_version: '0.14.0', hf_model_dir: /models/m, engine_dir: /models/e}\n"
    models.write_text("models:\n" + entry + entry)
    result = CliRunner().invoke(cli, ["triton", "render", "--models", str(models), "--json"])
    assert result.exit_code == 2
    assert "used twice" in result.output
