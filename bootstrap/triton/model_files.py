"""Whether a model directory fits what the inventory declares, read before anything is copied.

What is read: the directory's ``config.json``. A Hugging Face checkpoint (what the ``llmapi`` layout loads)
declares ``num_attention_heads``, ``num_hidden_layers`` and, when quantized, ``quantization_config``; a
TensorRT-LLM engine (``inflight_batcher_llm``) declares ``version``, ``pretrained_config.mapping`` and its
quantization. The rules (docs/serving.md):

- TP must divide the attention heads, PP must not exceed the layers (checkpoint); an engine's TP/PP must
  equal the declared ones (an engine is built for one mapping).
- The quantization the files carry (``quantization_config`` in config.json, an engine's, or Model
  Optimizer's ``hf_quant_config.json``) must be the declared ``precision``.
- The weights (safetensors where there are any, else ``*.bin``/``*.pt``; engines) split over TP x PP GPUs
  must fit the declared GPU's memory (``deployment.gpu_product``);
  NVFP4 needs a Blackwell GPU, which none of the GPU types rackctl knows is.
- An engine's TensorRT-LLM version must be the declared release (major.minor); a checkpoint carries none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bootstrap.errors import Problem
from bootstrap.inventory.hardware import GPU_TYPES
from bootstrap.inventory.served_models import ModelSpec

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".engine")
#: The other weight formats a Hugging Face repository often ships beside safetensors (the same weights
#: again, or training state); a loader takes the safetensors when there are any.
SAFETENSORS_FIRST = (".bin", ".pt")
#: What NVIDIA's Model Optimizer writes beside config.json: ``{"quantization": {"quant_algo": ...}}``.
MODELOPT_QUANT = "hf_quant_config.json"
#: quantization_config.quant_method / quant_algo -> the inventory's precision.
QUANT_PRECISION = {
    "fp8": "FP8",
    "awq": "AWQ",
    "w4a16_awq": "AWQ",
    "int4_awq": "AWQ",
    "gptq": "GPTQ",
    "nvfp4": "NVFP4",
    "w8a8_sq_per_channel": "W8A8_SQ",
}
#: Declared precisions that name the same files.
SAME_PRECISION = {"INT4_AWQ": "AWQ"}
UNQUANTIZED = ("FP16", "BF16", "FP32")


def _problem(spec: ModelSpec, field: str, message: str, fix: str) -> Problem:
    return Problem(f"models[{spec.name}].{field}", message, fix)


def _read_config(spec: ModelSpec, directory: Path) -> dict[str, Any] | Problem:
    path = directory / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _problem(
            spec, "source_dir", f"{directory} holds no config.json", "point source_dir at the model directory"
        )
    except ValueError as exc:
        return _problem(spec, "source_dir", f"{path} is not JSON: {exc}", "replace the damaged file")
    if not isinstance(data, dict):
        return _problem(spec, "source_dir", f"{path} is not a JSON object", "replace the damaged file")
    return data


def _modelopt_quant(directory: Path) -> dict[str, Any]:
    """The ``quantization`` of a Model Optimizer checkpoint's ``hf_quant_config.json`` ({} when none)."""
    try:
        data = json.loads((directory / MODELOPT_QUANT).read_text())
    except (OSError, ValueError):
        return {}
    quant = data.get("quantization") if isinstance(data, dict) else None
    return quant if isinstance(quant, dict) else {}


def _quant_of(config: dict[str, Any], directory: Path) -> str | None:
    """The precision a checkpoint's or engine's quantization names (None: not quantized or unknown)."""
    quant = (
        config.get("quantization_config")
        or config.get("pretrained_config", {}).get("quantization")
        or _modelopt_quant(directory)
    )
    for key in ("quant_algo", "quant_method"):
        value = quant.get(key)
        if isinstance(value, str) and value.lower() in QUANT_PRECISION:
            return QUANT_PRECISION[value.lower()]
    return None


def weight_bytes(directory: Path) -> int:
    """Bytes of the weights a loader reads under ``directory``: the files by suffix, with ``*.bin`` and
    ``*.pt`` left out where there are safetensors (many repositories ship the same weights in both)."""
    files = [p for p in directory.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES]
    if any(p.suffix == ".safetensors" for p in files):
        files = [p for p in files if p.suffix not in SAFETENSORS_FIRST]
    return sum(p.stat().st_size for p in files)


def _mapping_problems(spec: ModelSpec, config: dict[str, Any]) -> list[Problem]:
    tp, pp = spec.tensor_parallelism, spec.pipeline_parallelism
    if "pretrained_config" in config:  # a TensorRT-LLM engine
        mapping = config["pretrained_config"].get("mapping", {})
        built = (mapping.get("tp_size", 1), mapping.get("pp_size", 1))
        if built != (tp, pp):
            return [
                _problem(
                    spec,
                    "tensor_parallelism",
                    f"declared TP={tp} PP={pp} but the engine was built for TP={built[0]} PP={built[1]}",
                    "declare the engine's TP/PP or rebuild the engine",
                )
            ]
        return []
    out = []
    heads, layers = config.get("num_attention_heads"), config.get("num_hidden_layers")
    if isinstance(heads, int) and heads % tp:
        out.append(
            _problem(
                spec,
                "tensor_parallelism",
                f"tensor_parallelism {tp} does not divide the model's {heads} attention heads",
                "use a TP that divides num_attention_heads in config.json",
            )
        )
    if isinstance(layers, int) and layers < pp:
        out.append(
            _problem(
                spec,
                "pipeline_parallelism",
                f"pipeline_parallelism {pp} exceeds the model's {layers} layers",
                f"use at most {layers}",
            )
        )
    return out


def _precision_problems(spec: ModelSpec, config: dict[str, Any], directory: Path) -> list[Problem]:
    found = _quant_of(config, directory)
    declared = SAME_PRECISION.get(spec.precision, spec.precision)
    if found == declared or (found is None and declared in UNQUANTIZED):
        return []
    what = f"{found}-quantized" if found else "not quantized (or quantized in a way rackctl does not read)"
    return [
        _problem(
            spec,
            "precision",
            f"precision {spec.precision} declared but the files are {what}",
            f"declare precision: {found}" if found else "declare the checkpoint's precision",
        )
    ]


def _gpu_problems(spec: ModelSpec, size: int) -> list[Problem]:
    product = spec.deployment.gpu_product
    gpu = next((g for g in GPU_TYPES.values() if g.label == product), None)
    if spec.precision == "NVFP4":
        return [
            _problem(
                spec,
                "precision",
                f"NVFP4 weights need a Blackwell GPU; {product} is not one",
                "use FP8 or FP16 weights on this GPU",
            )
        ]
    if gpu is None:
        return []  # a GPU product rackctl has no memory figure for: the inventory rules name it
    per_gpu = size / spec.world_size
    if per_gpu > gpu.memory_gb * 1e9:
        return [
            _problem(
                spec,
                "tensor_parallelism",
                f"{size / 1e9:.1f} GB of weights over TP x PP = {spec.world_size} GPUs is "
                f"{per_gpu / 1e9:.1f} GB per GPU, more than the {gpu.memory_gb} GB of {product}",
                "raise tensor_parallelism or pipeline_parallelism, or use a smaller precision",
            )
        ]
    return []


def _version_problems(spec: ModelSpec, config: dict[str, Any]) -> list[Problem]:
    engine = "pretrained_config" in config
    if spec.layout == "llmapi" and engine:
        return [
            _problem(
                spec,
                "layout",
                "the directory holds a TensorRT engine, but layout llmapi loads a Hugging Face checkpoint",
                "deliver the checkpoint, or keep the engine on a release with layout inflight_batcher_llm",
            )
        ]
    if spec.layout == "inflight_batcher_llm" and not engine:
        return [
            _problem(
                spec,
                "layout",
                "layout inflight_batcher_llm needs a built TensorRT engine; the directory holds a checkpoint",
                "use layout: llmapi for a checkpoint",
            )
        ]
    built = str(config.get("version", ""))
    if engine and built.split(".")[:2] != spec.trtllm_version.split(".")[:2]:
        return [
            _problem(
                spec,
                "trtllm_version",
                f"the engine was built by TensorRT-LLM {built or '(unknown)'}, declared {spec.trtllm_version}",
                "declare the engine's release or rebuild the engine with the declared one",
            )
        ]
    return []


def check_files(spec: ModelSpec, directory: Path) -> list[Problem]:
    """Every reason ``directory`` does not fit ``spec`` (empty: it fits)."""
    if not directory.is_dir():
        return [_problem(spec, "source_dir", f"{directory} is not a directory", "point source_dir at the model")]
    config = _read_config(spec, directory)
    if isinstance(config, Problem):
        return [config]
    return [
        *_version_problems(spec, config),
        *_mapping_problems(spec, config),
        *_precision_problems(spec, config, directory),
        *_gpu_problems(spec, weight_bytes(directory)),
    ]
