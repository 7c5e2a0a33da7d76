"""Render each declared model's Triton repository from rackctl's own templates.

Output, per model, under ``<out>/<model name>/``: ``model_repository/`` (what Triton loads) and
``rackctl-model.json`` (the declared spec, read back by ``rackctl triton check``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from bootstrap.errors import InvalidInput, Problem
from bootstrap.fsutil import atomic_write_text, replace_tree
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.inventory.trtllm import version_info
from bootstrap.triton.weights_version import annotation as weights_annotation

TEMPLATES = Path(__file__).parent / "templates"
REPOSITORY_DIR = "model_repository"
SPEC_FILE = "rackctl-model.json"
#: Anything fill_template-style or jinja-style left in an output is a bug: refuse to write it.
PLACEHOLDER = re.compile(r"\$\{[^}]*\}|\{\{|\{%")

IFB_MODELS = ("ensemble", "preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_bls")
#: Python files copied as they are, per layout: (template path, path in the repository).
STATIC_FILES = {
    "inflight_batcher_llm": (
        ("inflight_batcher_llm/preprocessing/model.py", "preprocessing/1/model.py"),
        ("inflight_batcher_llm/rackctl_tokenizer.py", "preprocessing/1/rackctl_tokenizer.py"),
        ("inflight_batcher_llm/postprocessing/model.py", "postprocessing/1/model.py"),
        ("inflight_batcher_llm/rackctl_tokenizer.py", "postprocessing/1/rackctl_tokenizer.py"),
        ("inflight_batcher_llm/tensorrt_llm_bls/model.py", "tensorrt_llm_bls/1/model.py"),
    ),
    "llmapi": (("llmapi/tensorrt_llm/model.py", "tensorrt_llm/1/model.py"),),
}
#: Empty version directories Triton needs to find a version (the engine is read from gpt_model_path).
EMPTY_VERSION_DIRS = {"inflight_batcher_llm": ("ensemble/1", "tensorrt_llm/1"), "llmapi": ()}
#: The LLM-API model's ``tensorrt_llm.LLM()`` arguments: beside its ``model.py``, which reads them from its own
#: directory (upstream's ``llmapi/tensorrt_llm/1/model.yaml``)
LLMAPI_ARGS = "tensorrt_llm/1/model.yaml"


@dataclass(frozen=True)
class RenderedModel:
    """One model's repository as relative path -> text, plus the directories to create."""

    name: str
    files: dict[str, str]
    dirs: tuple[str, ...]


@cache
def environment() -> jinja2.Environment:
    """The jinja2 environment of rackctl's templates: a missing value is an error, never blank."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
        autoescape=False,  # noqa: S701 - renders protobuf text and YAML, never HTML
    )


def _flag(value: bool) -> str:
    return "true" if value else "false"


def trtllm_parameters(spec: ModelSpec) -> dict[str, str]:
    """Every parameter the chosen TensorRT-LLM version's backend reads, each with an explicit value."""
    kv = spec.kv_cache
    values = {
        "max_beam_width": str(spec.max_beam_width),
        "gpt_model_type": spec.batching_strategy,
        "gpt_model_path": spec.engine_dir or "",
        "max_tokens_in_paged_kv_cache": str(kv.max_tokens),
        "max_attention_window_size": str(kv.max_attention_window),
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": str(kv.free_gpu_mem_fraction),
        "exclude_input_in_output": _flag(spec.exclude_input_in_output),
        "enable_kv_cache_reuse": _flag(kv.enable_reuse),
        "normalize_log_probs": "true",
        "enable_chunked_context": "false",
        "decoding_mode": "top_k_top_p" if spec.max_beam_width == 1 else "beam_search",
        "enable_trt_overlap": "false",
        "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        "lora_cache_optimal_adapter_size": "8",
        "lora_cache_max_adapter_size": "64",
        "lora_cache_gpu_memory_fraction": "0.05",
        "lora_cache_host_memory_bytes": "1073741824",
        "gpu_weights_percent": "1.0",
        "cancellation_check_period_ms": "100",
        "stats_check_period_ms": "100",
        "iter_stats_max_iterations": "1000",
        "request_stats_max_iterations": "0",
        "kv_cache_host_memory_bytes": "0",
        "kv_cache_onboard_blocks": "true",
        "multi_block_mode": "true",
        "enable_context_fmha_fp32_acc": "false",
    }
    names = version_info(spec.trtllm_version).parameters
    missing = [n for n in names if n not in values]
    if missing:  # a version table entry without a value: a rackctl bug, never a blank parameter
        raise KeyError(f"no value for TensorRT-LLM parameters {missing}")
    return {name: values[name] for name in names}


def render_model(spec: ModelSpec, *, tensorrt_llm_backend: str = "tensorrtllm") -> RenderedModel:
    """Render one model's repository in memory (no file is written)."""
    env = environment()
    files: dict[str, str] = {}
    context = {"spec": spec, "backend": tensorrt_llm_backend}
    if spec.layout == "inflight_batcher_llm":
        context["parameters"] = trtllm_parameters(spec)
        for model in IFB_MODELS:
            template = env.get_template(f"inflight_batcher_llm/{model}/config.pbtxt.j2")
            files[f"{model}/config.pbtxt"] = template.render(context)
    else:
        for name, target in (("config.pbtxt", "tensorrt_llm/config.pbtxt"), ("model.yaml", LLMAPI_ARGS)):
            template = env.get_template(f"llmapi/tensorrt_llm/{name}.j2")
            files[target] = template.render(context)
    for source, target in STATIC_FILES[spec.layout]:
        files[target] = (TEMPLATES / source).read_text()
    for path, text in files.items():
        if path.endswith((".pbtxt", ".yaml")) and PLACEHOLDER.search(text):
            raise InvalidInput(
                f"model {spec.name}: rendering left a placeholder in {path}",
                problems=[Problem(f"models[{spec.name}]", f"unfilled placeholder in {path}", "report a bug")],
            )
    return RenderedModel(spec.name, files, EMPTY_VERSION_DIRS[spec.layout])


def write_model(rendered: RenderedModel, spec: ModelSpec, model_dir: Path) -> list[Path]:
    """Write a rendered repository (the whole tree swapped in at once) and the spec it came from."""
    repo = replace_tree(model_dir / REPOSITORY_DIR, rendered.files, rendered.dirs)
    written = [repo / rel for rel in rendered.files]
    spec_path = model_dir / SPEC_FILE
    atomic_write_text(spec_path, json.dumps(stored_spec(spec), indent=2) + "\n")
    written.append(spec_path)
    return written


def stored_spec(spec: ModelSpec) -> dict[str, Any]:
    """``spec`` as stored beside its repository: every field, but the replica count of an autoscaled model
    (only its default: the HPA sets the count, and a count beside ``autoscaling`` is refused when read back)."""
    data: dict[str, Any] = spec.model_dump(mode="json")
    if spec.deployment.autoscaling is not None:
        del data["deployment"]["replicas"]
    return data


def render_all(specs: list[ModelSpec], out_dir: Path, *, dry_run: bool = False) -> list[dict]:
    """Render every model under ``out_dir/<name>``; with ``dry_run`` only report what would be written."""
    results = []
    for spec in specs:
        rendered = render_model(spec)
        model_dir = out_dir / spec.name
        paths = [str(model_dir / REPOSITORY_DIR / rel) for rel in rendered.files]
        paths.append(str(model_dir / SPEC_FILE))
        if not dry_run:
            write_model(rendered, spec, model_dir)
        results.append(
            {
                "model": spec.name,
                "layout": spec.layout,
                "dir": str(model_dir),
                "files": paths,
                "weights_version": weights_annotation(spec),
            }
        )
    return results


def load_written_spec(model_dir: Path) -> ModelSpec:
    """Read back the spec ``render`` stored next to a repository."""
    path = model_dir / SPEC_FILE
    try:
        return ModelSpec.model_validate_json(path.read_text())
    except FileNotFoundError as exc:
        raise InvalidInput(
            f"{model_dir} is not a rackctl-rendered model (no {SPEC_FILE})",
            problems=[Problem(str(model_dir), f"missing {SPEC_FILE}", "run `rackctl triton render` first")],
        ) from exc
