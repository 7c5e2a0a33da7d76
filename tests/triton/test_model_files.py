"""A model directory is checked against the declared TP/PP, precision, GPU and release before any copy."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bootstrap.triton.model_files import check_files, weight_bytes
from tests.triton.conftest import make_spec


def hf_checkpoint(
    directory: Path, *, heads: int = 32, layers: int = 40, quant: str | None = None, weights_gb: float = 0.0
) -> Path:
    """A Hugging Face checkpoint directory: config.json, tokenizer files and (sparse) safetensors shards."""
    directory.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": heads}
    config |= {"num_hidden_layers": layers, "torch_dtype": "float16"}
    if quant:
        config["quantization_config"] = {"quant_method": quant}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "tokenizer.json").write_text('{"model": {}}')
    for i in range(2):
        shard = directory / f"model-0000{i + 1}-of-00002.safetensors"
        with shard.open("wb") as out:
            out.write(os.urandom(1024))
            out.truncate(max(1024, int(weights_gb * 1e9 / 2)))
    return directory


def engine_dir(directory: Path, *, tp: int = 1, pp: int = 1, version: str = "0.14.0") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = {"version": version, "pretrained_config": {"mapping": {"tp_size": tp, "pp_size": pp}}}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "rank0.engine").write_bytes(b"\0" * 64)
    return directory


def llmapi(**kw: Any):
    return make_spec(layout="llmapi", trtllm_version="26.07", engine_dir=None, **kw)


def _fields(problems) -> list[str]:
    return [p.path for p in problems]


def test_a_fitting_checkpoint_passes(tmp_path: Path):
    assert check_files(llmapi(tensor_parallelism=2), hf_checkpoint(tmp_path / "m")) == []


@pytest.mark.parametrize(
    ("spec_kw", "ckpt_kw", "field", "words"),
    [
        ({"tensor_parallelism": 3}, {}, "tensor_parallelism", "does not divide the model's 32 attention heads"),
        ({"pipeline_parallelism": 8}, {"layers": 4}, "pipeline_parallelism", "exceeds the model's 4 layers"),
        ({"precision": "FP16"}, {"quant": "fp8"}, "precision", "the files are FP8-quantized"),
        ({"precision": "FP8"}, {}, "precision", "the files are not quantized"),
        (
            {"deployment": {"gpu_product": "NVIDIA-L40S"}},
            {"weights_gb": 60},
            "tensor_parallelism",
            "more than the 48 GB of NVIDIA-L40S",
        ),
        ({"precision": "NVFP4"}, {"quant": "nvfp4"}, "precision", "NVFP4 weights need a Blackwell GPU"),
    ],
)
def test_files_that_do_not_fit_are_refused_naming_the_field(tmp_path: Path, spec_kw, ckpt_kw, field, words):
    problems = check_files(llmapi(**spec_kw), hf_checkpoint(tmp_path / "m", **ckpt_kw))
    assert _fields(problems) == [f"models[llama3-8b].{field}"], problems
    assert words in problems[0].message and problems[0].fix


def test_the_same_weights_fit_over_two_gpus(tmp_path: Path):
    ckpt = hf_checkpoint(tmp_path / "m", weights_gb=60)
    assert weight_bytes(ckpt) >= 60e9  # sparse: the size counts, not the blocks
    spec = llmapi(tensor_parallelism=2, deployment={"gpu_product": "NVIDIA-L40S"})
    assert check_files(spec, ckpt) == []


def test_engines_are_checked_for_layout_mapping_and_release(tmp_path: Path):
    engine = engine_dir(tmp_path / "e", tp=2, version="0.14.0")
    assert check_files(make_spec(tensor_parallelism=2), engine) == []
    assert _fields(check_files(make_spec(), engine)) == ["models[llama3-8b].tensor_parallelism"]
    wrong = check_files(make_spec(tensor_parallelism=2, trtllm_version="0.16.0"), engine)
    assert _fields(wrong) == ["models[llama3-8b].trtllm_version"] and "0.14.0" in wrong[0].message
    assert _fields(check_files(llmapi(tensor_parallelism=2), engine)) == ["models[llama3-8b].layout"]
    ckpt = hf_checkpoint(tmp_path / "m")
    assert _fields(check_files(make_spec(), ckpt)) == ["models[llama3-8b].layout"]


def test_weights_in_two_formats_count_once(tmp_path: Path):
    """A repository shipping safetensors and the same weights as pytorch_model.bin: the loader reads the
    safetensors, so 30 GB of each fits one 48 GB L40S; the .bin alone counts where there are no safetensors."""
    ckpt = hf_checkpoint(tmp_path / "m", weights_gb=30)
    with (ckpt / "pytorch_model.bin").open("wb") as out:
        out.truncate(int(30e9))
    spec = llmapi(deployment={"gpu_product": "NVIDIA-L40S"})
    assert weight_bytes(ckpt) < 31e9 and check_files(spec, ckpt) == []
    for shard in ckpt.glob("*.safetensors"):
        shard.unlink()
    assert weight_bytes(ckpt) == int(30e9)


def test_a_model_optimizer_checkpoint_says_its_quantization_beside_config_json(tmp_path: Path):
    ckpt = hf_checkpoint(tmp_path / "m")
    (ckpt / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    assert check_files(llmapi(precision="FP8"), ckpt) == []
    [problem] = check_files(llmapi(precision="FP16"), ckpt)
    assert problem.path == "models[llama3-8b].precision" and "the files are FP8-quantized" in problem.message


def test_a_directory_without_config_json_is_refused(tmp_path: Path):
    (tmp_path / "m").mkdir()
    [problem] = check_files(llmapi(), tmp_path / "m")
    assert problem.path == "models[llama3-8b].source_dir" and "no config.json" in problem.message
    [missing] = check_files(llmapi(), tmp_path / "absent")
    assert "is not a directory" in missing.message
