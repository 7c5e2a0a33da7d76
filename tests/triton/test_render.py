"""Rendering: Triton's own protobuf parses every file, every version's parameters all have values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from bootstrap.cli import cli
from bootstrap.inventory.trtllm import ENGINE_VERSIONS, version_info
from bootstrap.triton.render import SPEC_FILE, load_written_spec, render_model, write_model
from tests.triton.conftest import make_spec


def _configs(spec) -> dict[str, model_config_pb2.ModelConfig]:
    files = render_model(spec).files
    return {
        path.split("/")[0]: text_format.Parse(text, model_config_pb2.ModelConfig())
        for path, text in files.items()
        if path.endswith("config.pbtxt")
    }


@pytest.mark.parametrize("version", ENGINE_VERSIONS)
def test_every_version_renders_its_full_parameter_set(version: str):
    configs = _configs(make_spec(trtllm_version=version))
    assert set(configs) == {"ensemble", "preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_bls"}
    params = configs["tensorrt_llm"].parameters
    assert set(params) == set(version_info(version).parameters)
    assert all(p.string_value and "$" not in p.string_value for p in params.values())
    assert params["gpt_model_path"].string_value == "/models/engines/llama3-8b"


def test_parameter_sets_differ_between_versions():
    old = _configs(make_spec(trtllm_version="0.8.0"))["tensorrt_llm"].parameters
    new = _configs(make_spec(trtllm_version="0.14.0"))["tensorrt_llm"].parameters
    assert "enable_trt_overlap" in old and "enable_trt_overlap" not in new
    assert "multi_block_mode" in new and "executor_worker_path" not in old


def test_declared_values_reach_the_configs():
    spec = make_spec(max_batch_size=32, streaming=True, kv_cache={"enable_reuse": True, "free_gpu_mem_fraction": 0.9})
    configs = _configs(spec)
    assert {c.max_batch_size for c in configs.values()} == {32}
    assert configs["tensorrt_llm"].model_transaction_policy.decoupled
    assert configs["tensorrt_llm_bls"].model_transaction_policy.decoupled
    params = configs["tensorrt_llm"].parameters
    assert params["enable_kv_cache_reuse"].string_value == "true"
    assert params["kv_cache_free_gpu_mem_fraction"].string_value == "0.9"
    assert not _configs(make_spec())["tensorrt_llm"].model_transaction_policy.decoupled


def test_llmapi_layout_renders_llm_arguments():
    import yaml

    spec = make_spec(layout="llmapi", trtllm_version="1.1.0", engine_dir=None, tensor_parallelism=2)
    files = render_model(spec).files
    assert set(files) == {"tensorrt_llm/config.pbtxt", "tensorrt_llm/1/model.yaml", "tensorrt_llm/1/model.py"}
    config = text_format.Parse(files["tensorrt_llm/config.pbtxt"], model_config_pb2.ModelConfig())
    assert config.backend == "python"
    args = yaml.safe_load(files["tensorrt_llm/1/model.yaml"])["llm_args"]
    assert args["tensor_parallel_size"] == 2
    assert args["model"] == "/models/hf/llama3-8b"


def test_cli_render_dry_run_writes_nothing_then_writes(tmp_path: Path):
    models = tmp_path / "models.yml"
    models.write_text(
        "models:\n  - {name: a, trtllm_version: '0.14.0', hf_model_dir: /models/m, engine_dir: /models/e}\n"
    )
    out = tmp_path / "out"
    args = ["triton", "render", "--models", str(models), "--out", str(out), "--json"]
    dry = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["dry_run"] is True
    assert not out.exists()
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    files = json.loads(done.output)["models"][0]["files"]
    assert all(Path(f).is_file() for f in files)
    assert (out / "a" / "model_repository" / "tensorrt_llm" / "1").is_dir()


@pytest.mark.parametrize("autoscaling", [None, {"min_replicas": 1, "max_replicas": 3}])
def test_the_spec_stored_beside_a_repository_reads_back_as_the_same_spec(tmp_path: Path, autoscaling):
    """What ``triton render`` and the triton stage store beside each repository is read back by ``triton
    check`` and the stage's own check: an autoscaled model too (its replica count, which the HPA owns, is not
    stored: the first run on a real cluster crashed reading it back)."""
    spec = make_spec(deployment={"gpu_product": "NVIDIA-L40S", "autoscaling": autoscaling})
    write_model(render_model(spec), spec, tmp_path / spec.name)
    again = load_written_spec(tmp_path / spec.name)
    assert again == spec
    stored = json.loads((tmp_path / spec.name / SPEC_FILE).read_text())
    assert ("replicas" in stored["deployment"]) == (autoscaling is None)
