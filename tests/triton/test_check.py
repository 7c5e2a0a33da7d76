"""``rackctl triton check``: a clean repository passes; each broken one names model, field and fix."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bootstrap.cli import cli
from bootstrap.triton.check import check_model_dir
from bootstrap.triton.manifests import write_manifests
from tests.triton.conftest import write_engine_config

REPO = "model_repository"


def _engine(path_map: dict[str, Path], spec, **kw) -> None:
    write_engine_config(path_map["/models"] / spec.engine_dir.removeprefix("/models/"), **kw)


def _problems(model_dir: Path, path_map: dict[str, Path]) -> list[str]:
    return [str(p) for p in check_model_dir(model_dir, path_map=path_map).problems]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _only(problems: list[str], *words: str) -> None:
    assert len(problems) == 1, problems
    for word in words:
        assert word in problems[0], problems[0]


def test_clean_repository_with_engine_and_manifests_passes(rendered, tmp_path):
    model_dir, spec, path_map = rendered(tensor_parallelism=2)
    _engine(path_map, spec, tp=2)
    write_manifests([spec], model_dir.parent)
    result = check_model_dir(model_dir, path_map=path_map)
    assert result.problems == []
    assert set(result.checked) >= {"protobuf", "ensemble", "engine", "manifests"}


def test_unparsable_enum_is_reported_by_tritons_protobuf(rendered):
    model_dir, spec, path_map = rendered()
    _engine(path_map, spec)
    _edit(model_dir / REPO / "postprocessing/config.pbtxt", "TYPE_INT32", "TYPE_INT33")
    _only(_problems(model_dir, path_map), "models[llama3-8b].postprocessing/config.pbtxt", "TYPE_INT33", "fix")


def test_unfilled_placeholder_is_reported(rendered):
    model_dir, spec, path_map = rendered()
    _engine(path_map, spec)
    _edit(model_dir / REPO / "tensorrt_llm/config.pbtxt", '"guaranteed_no_evict"', '"${batch_scheduler_policy}"')
    _only(_problems(model_dir, path_map), "tensorrt_llm.parameters.batch_scheduler_policy", "unfilled")


def test_ensemble_wiring_to_a_missing_output(rendered):
    model_dir, spec, path_map = rendered()
    _engine(path_map, spec)
    _edit(model_dir / REPO / "ensemble/config.pbtxt", 'key: "OUT_PAD_ID"', 'key: "OUT_PAD"')
    problems = _problems(model_dir, path_map)
    assert any("output_map[OUT_PAD]" in p and "has no output 'OUT_PAD'" in p for p in problems), problems


def test_ensemble_required_input_not_fed(rendered):
    model_dir, spec, path_map = rendered()
    _engine(path_map, spec)
    _edit(
        model_dir / REPO / "ensemble/config.pbtxt",
        'input_map { key: "input_lengths" value: "_input_lengths" }',
        "",
    )
    problems = _problems(model_dir, path_map)
    assert any("required input 'input_lengths' of tensorrt_llm is not fed" in p for p in problems), problems


def test_ensemble_batch_larger_than_a_composing_model(rendered):
    model_dir, spec, path_map = rendered()
    _engine(path_map, spec)
    _edit(model_dir / REPO / "postprocessing/config.pbtxt", "max_batch_size: 64", "max_batch_size: 8")
    _only(_problems(model_dir, path_map), "ensemble.max_batch_size", "exceeds postprocessing's 8", "fix")


def test_streaming_without_decoupled_mode(rendered):
    model_dir, spec, path_map = rendered(streaming=True)
    _engine(path_map, spec)
    _edit(model_dir / REPO / "tensorrt_llm/config.pbtxt", "decoupled: true", "decoupled: false")
    _only(_problems(model_dir, path_map), "tensorrt_llm.model_transaction_policy.decoupled", "streaming")


def test_engine_tp_pp_disagree(rendered):
    model_dir, spec, path_map = rendered(tensor_parallelism=2)
    _engine(path_map, spec, tp=4)
    _only(_problems(model_dir, path_map), "models[llama3-8b].tensor_parallelism", "built with TP=4 PP=1")


def test_engine_max_batch_smaller_than_declared(rendered):
    model_dir, spec, path_map = rendered(max_batch_size=128)
    _engine(path_map, spec, max_batch=64)
    _only(_problems(model_dir, path_map), "models[llama3-8b].max_batch_size", "exceeds the engine's 64")


def test_kv_cache_reuse_needs_paged_context_fmha(rendered):
    model_dir, spec, path_map = rendered(kv_cache={"enable_reuse": True})
    _engine(path_map, spec, paged_context_fmha=False)
    _only(_problems(model_dir, path_map), "kv_cache.enable_reuse", "paged context FMHA")
    _engine(path_map, spec, paged_context_fmha=True)
    assert _problems(model_dir, path_map) == []


def test_engine_dir_without_config_json(rendered):
    model_dir, _spec, path_map = rendered()
    _only(_problems(model_dir, path_map), "gpt_model_path", "holds no config.json", "--path-map")
    assert check_model_dir(model_dir, path_map=path_map, skip_engine=True).problems == []


def test_gpu_request_and_world_size_must_equal_tp_x_pp(rendered):
    model_dir, spec, path_map = rendered(tensor_parallelism=2, pipeline_parallelism=2)
    _engine(path_map, spec, tp=2, pp=2)
    write_manifests([spec], model_dir.parent)
    deployment = model_dir / "k8s" / "deployment.yaml"
    _edit(deployment, "nvidia.com/gpu: '4'", "nvidia.com/gpu: '2'")
    _edit(deployment, "--world_size=4", "--world_size=1")
    problems = _problems(model_dir, path_map)
    assert len(problems) == 2, problems
    assert any("requests 2 GPUs but TP x PP = 4" in p for p in problems)
    assert any("launch world size 1 but TP x PP = 4" in p for p in problems)


def test_cli_check_exit_codes_and_json(rendered):
    model_dir, spec, path_map = rendered()
    args = [
        "triton",
        "check",
        str(model_dir.parent),
        "--json",
        "--path-map",
        f"/models={path_map['/models']}",
    ]
    failed = CliRunner().invoke(cli, args)
    assert failed.exit_code == 1
    data = json.loads(failed.output)
    assert data["ok"] is False and data["models"][0]["problems"][0]["fix"]
    _engine(path_map, spec)
    passed = CliRunner().invoke(cli, args)
    assert passed.exit_code == 0, passed.output
    bad = CliRunner().invoke(cli, ["triton", "check", str(model_dir), "--path-map", "nonsense", "--json"])
    assert bad.exit_code == 2 and "POD_PREFIX=LOCAL_DIR" in bad.output
