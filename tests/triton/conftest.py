"""Shared helpers of the Triton tests: specs, rendered repositories and TRT-LLM engine config.json files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton.render import render_all


def make_spec(**overrides: Any) -> ModelSpec:
    data: dict[str, Any] = {
        "name": "llama3-8b",
        "trtllm_version": "0.14.0",
        "hf_model_dir": "/models/hf/llama3-8b",
        "engine_dir": "/models/engines/llama3-8b",
    }
    data.update(overrides)
    return ModelSpec.model_validate(data)


def write_engine_config(
    engine_dir: Path, *, tp: int = 1, pp: int = 1, max_batch: int = 64, paged_context_fmha: bool = False
) -> Path:
    """A TensorRT-LLM (>= 0.8) engine config.json with the fields rackctl reads."""
    engine_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "version": "0.14.0",
        "pretrained_config": {"architecture": "LlamaForCausalLM", "mapping": {"tp_size": tp, "pp_size": pp}},
        "build_config": {
            "max_batch_size": max_batch,
            "max_beam_width": 1,
            "plugin_config": {"use_paged_context_fmha": paged_context_fmha, "paged_kv_cache": True},
        },
    }
    path = engine_dir / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def rendered(tmp_path: Path):
    """Render one model under tmp_path/out; returns (model_dir, spec, path_map to a local engine)."""

    def _render(**overrides: Any) -> tuple[Path, ModelSpec, dict[str, Path]]:
        spec = make_spec(**overrides)
        out = tmp_path / "out"
        render_all([spec], out)
        return out / spec.name, spec, {"/models": tmp_path / "volume"}

    return _render
