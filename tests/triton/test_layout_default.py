"""Current TensorRT-LLM by default: ``llmapi`` unless a release with the engine backend is given an engine;
``inflight_batcher_llm`` refused (via ``rackctl validate``) for a release without that backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from google.protobuf import text_format
from pydantic import ValidationError
from tritonclient.grpc import model_config_pb2

from bootstrap.cli import cli
from bootstrap.inventory.trtllm import CONTAINER_KEYED, ENGINE_VERSIONS, SUPPORTED_VERSIONS, version_info
from tests.triton.conftest import make_spec

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"


def test_the_table_holds_a_release_after_the_engine_backend_was_removed():
    after = [v for v in SUPPORTED_VERSIONS if not version_info(v).engine_backend]
    assert after == ["26.07"]
    assert version_info("26.07").image == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
    assert version_info("26.07").has_llmapi
    assert ENGINE_VERSIONS[-1] == "1.2.1"


@pytest.mark.parametrize(
    ("version", "tag"),
    [
        # Triton's Release Compatibility Matrix (trtllm-python-py3): the first container carrying each release
        ("1.0.0", "25.09"),
        ("1.1.0", "25.12"),
        ("1.2.0", "26.03"),
        ("1.2.1", "26.04"),
        ("0.10.0", "24.06"),  # 24.05 carries 0.9.0
    ],
)
def test_a_release_maps_to_the_container_that_carries_it(version: str, tag: str):
    info = version_info(version)
    assert info.triton_tag == tag
    assert info.image == f"nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"


@pytest.mark.parametrize("version", ["1.0.0", "1.2.0", "1.2.1"])
def test_the_1_0_and_1_2_releases_have_both_layouts(version: str):
    info = version_info(version)
    assert info.has_llmapi and info.engine_backend
    assert version in ENGINE_VERSIONS and version not in CONTAINER_KEYED
    assert make_spec(trtllm_version=version, engine_dir=None).layout == "llmapi"
    assert make_spec(trtllm_version=version, engine_dir="/models/e").layout == "inflight_batcher_llm"


@pytest.mark.parametrize("version", CONTAINER_KEYED)
def test_a_container_keyed_release_defaults_to_llmapi_and_refuses_the_engine_layout(version: str):
    info = version_info(version)
    assert info.triton_tag == version and not info.engine_backend and info.has_llmapi
    assert make_spec(trtllm_version=version, engine_dir=None).layout == "llmapi"
    with pytest.raises(ValidationError) as caught:
        make_spec(trtllm_version=version, layout="inflight_batcher_llm", engine_dir="/models/e")
    [error] = [e for e in caught.value.errors() if e["loc"] == ("layout",)]
    assert f"'inflight_batcher_llm' is not in TensorRT-LLM {version}" in error["msg"]
    assert f"trtllm_version {ENGINE_VERSIONS[-1]} or older" in error["msg"]


@pytest.mark.parametrize(
    ("version", "engine_dir", "layout"),
    [
        ("26.07", None, "llmapi"),  # a release without engines
        ("1.1.0", None, "llmapi"),  # a new inventory on the last release with both
        ("1.1.0", "/models/e", "inflight_batcher_llm"),  # an older inventory keeps its meaning
        ("0.14.0", "/models/e", "inflight_batcher_llm"),  # before 1.0 engines are all there is
    ],
)
def test_default_layout(version: str, engine_dir: str | None, layout: str):
    assert make_spec(trtllm_version=version, engine_dir=engine_dir).layout == layout


def _bad_example(tmp_path: Path, **model: str) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    engine_layout = {"trtllm_version": "26.07", "layout": "inflight_batcher_llm", "engine_dir": "/models/e"}
    data["models"][1] |= model or engine_layout
    data["models"][1] = {k: v for k, v in data["models"][1].items() if v != "(unset)"}
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_validate_refuses_the_engine_layout_on_a_release_without_it(tmp_path: Path):
    result = CliRunner().invoke(cli, ["validate", "-i", str(_bad_example(tmp_path)), "--json"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [error] = json.loads(result.output)["errors"]
    assert error["path"] == "models[1].layout"
    assert "'inflight_batcher_llm'" in error["message"] and "26.07" in error["message"]
    assert "layout: llmapi" in error["fix"] and "1.2.1" in error["fix"]
    text = CliRunner().invoke(cli, ["validate", "-i", str(_bad_example(tmp_path))])
    assert text.exit_code == 2 and "Traceback" not in text.output
    assert "models[1].layout" in text.output


def test_design_example_validates_and_renders_the_llmapi_repository(tmp_path: Path):
    assert CliRunner().invoke(cli, ["validate", "-i", str(EXAMPLE)]).exit_code == 0
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["triton", "render", "-i", str(EXAMPLE), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    models = {m["name"]: m for m in yaml.safe_load(EXAMPLE.read_text())["models"]}
    for name, declared in models.items():
        repo = out / name / "model_repository"
        files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file())
        assert files == ["tensorrt_llm/1/model.py", "tensorrt_llm/1/model.yaml", "tensorrt_llm/config.pbtxt"]
        config = text_format.Parse((repo / "tensorrt_llm/config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        assert config.backend == "python"
        assert config.model_transaction_policy.decoupled == bool(declared.get("streaming"))
        args = yaml.safe_load((repo / "tensorrt_llm/1/model.yaml").read_text())["llm_args"]
        assert args["model"] == declared["hf_model_dir"]
        assert args["tensor_parallel_size"] == declared["tensor_parallelism"]
        assert args["backend"] == "pytorch"


def test_triton_render_refuses_the_engine_layout_and_writes_nothing(tmp_path: Path):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["triton", "render", "-i", str(_bad_example(tmp_path)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "models[1].layout" in result.output and "got 'inflight_batcher_llm'" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("version", "layout", "fix"),
    [
        # an engine inventory moved to a release without engines: not silently switched to the checkpoint
        ("26.07", "(unset)", "keep the engine on trtllm_version 1.2.1 or older"),
        ("26.07", "llmapi", "keep the engine on trtllm_version 1.2.1 or older"),
        ("1.1.0", "llmapi", "set layout: inflight_batcher_llm"),
    ],
)
def test_an_engine_dir_the_llmapi_layout_would_ignore_is_refused(tmp_path: Path, version: str, layout: str, fix: str):
    path = _bad_example(tmp_path, trtllm_version=version, layout=layout, engine_dir="/models/engines/e")
    result = CliRunner().invoke(cli, ["validate", "-i", str(path), "--json"])
    assert result.exit_code == 2, result.output
    [error] = json.loads(result.output)["errors"]
    assert error["path"] == "models[1].engine_dir"
    assert "'/models/engines/e'" in error["message"] and "hf_model_dir" in error["message"]
    assert "drop engine_dir" in error["fix"] and fix in error["fix"]


def test_a_new_inventory_from_init_serves_through_the_llm_api(tmp_path: Path):
    inventory, out = tmp_path / "cluster.yml", tmp_path / "out"
    assert CliRunner().invoke(cli, ["init", "-o", str(inventory)]).exit_code == 0
    models = yaml.safe_load(inventory.read_text())["models"]
    for model in models:  # without the example's explicit layout, the release's default is llmapi too
        model.pop("layout")
    inventory.write_text(yaml.safe_dump({**yaml.safe_load(inventory.read_text()), "models": models}))
    result = CliRunner().invoke(cli, ["triton", "render", "-i", str(inventory), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    for model in models:
        repo = out / model["name"] / "model_repository"
        assert sorted(p.name for p in repo.iterdir()) == ["tensorrt_llm"]
        assert (repo / "tensorrt_llm" / "1" / "model.yaml").is_file()
