"""Sizing from the operator's measurements: models and lengths the guide lacks, exact arithmetic, N+1."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bootstrap.errors import InvalidInput
from bootstrap.sizing.planner import size
from bootstrap.sizing.poisson import poisson_quantile
from bootstrap.sizing.requirements import load_requirements, parse_requirements

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "sizing"


def measured_model(measurements: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    base = {"model": "qwen2.5-32b-instruct", "precision": "fp8", "input_tokens": 3500, "output_tokens": 256}
    return {**base, **fields, "measured": measurements}


def chosen(result: Any, server: str, model: int = 0) -> dict[str, Any]:
    option = next(o for o in result.as_dict()["options"] if o["server"] == server)
    return option["models"][model]["chosen"]


def test_unknown_model_and_long_prompt_sized_from_the_measurement() -> None:
    req = parse_requirements(
        {
            "models": [
                measured_model(
                    [{"server": "xe9680", "tensor_parallel": 2, "requests_per_second": 6.5}],
                    peak_requests_per_second=30,
                )
            ],
            "candidate_servers": ["xe9680"],
        }
    )
    result = size(req)
    data = chosen(result, "xe9680")
    assert data["basis"] == "measured"
    assert data["per_server"] == 6.5 and data["peak"] == 30.0
    assert data["servers_for_peak"] == 5 == math.ceil(30 / 6.5) and data["servers"] == 5
    assert data["headroom"] == pytest.approx(5 * 6.5 - 30)
    assert data["instances"] == 20  # 4 TP=2 instances per 8-GPU server
    assert "ceil(30 / 6.5 requests/s per server) = 5" in data["formula"]
    placement = result.recommended.placement
    assert placement.servers_needed == 5 and placement.gpus_used == 40


@pytest.mark.parametrize(
    ("capacity", "peak", "servers"),
    [
        (0.1, 0.3, 3),  # 3 x 0.1 == 0.3 exactly (floats would say 0.30000000000000004)
        (0.1, 1.1, 11),  # 1.1 / 0.1 is 11.000000000000002 in floats: still 11
        (0.1, 1.1000001, 12),  # just above: one more
        (10, 30, 3),  # capacity x servers at the peak
        (10, 29.999, 3),  # just below the peak needs as many
        (10, 30.001, 4),
        (7, 1, 1),
    ],
)
def test_arithmetic_is_exact_at_the_boundaries(capacity: float, peak: float, servers: int) -> None:
    req = parse_requirements(
        {
            "models": [
                measured_model([{"server": "xe8640", "requests_per_second": capacity}], peak_requests_per_second=peak)
            ],
            "candidate_servers": ["xe8640"],
        }
    )
    data = chosen(size(req), "xe8640")
    assert data["servers"] == servers
    assert data["headroom"] >= 0


def test_redundancy_adds_spare_servers_and_shows_them() -> None:
    def servers(redundancy: int) -> dict[str, Any]:
        model = measured_model(
            [{"server": "xe8640", "requests_per_second": 10}], peak_requests_per_second=30, redundancy=redundancy
        )
        return chosen(size(parse_requirements({"models": [model], "candidate_servers": ["xe8640"]})), "xe8640")

    plain, n_plus_1 = servers(0), servers(1)
    assert (plain["servers"], n_plus_1["servers"]) == (3, 4)
    assert n_plus_1["redundancy"] == 1 and n_plus_1["headroom"] == 0.0  # headroom without the spare
    assert "+ 1 spare = 4 server(s)" in n_plus_1["formula"]


def test_tokens_per_second_at_a_concurrency_gives_requests_per_second() -> None:
    model = measured_model(
        [{"server": "r760xa-l40s-4", "concurrency": 16, "output_tokens_per_s": 1024}], peak_requests_per_second=9
    )
    data = chosen(
        size(parse_requirements({"models": [model], "candidate_servers": ["r760xa-l40s-4"]})), "r760xa-l40s-4"
    )
    assert data["per_server"] == 4.0  # 1024 tokens/s / 256 tokens per answer
    assert data["servers"] == 3 and "1024 tokens/s / 256" in data["capacity_source"]


def test_concurrent_users_use_the_measured_concurrency() -> None:
    model = measured_model([{"server": "xe9680", "concurrency": 48, "output_tokens_per_s": 4096}], concurrent_users=100)
    data = chosen(size(parse_requirements({"models": [model], "candidate_servers": ["xe9680"]})), "xe9680")
    assert data["unit"] == "concurrent requests" and data["servers"] == 3  # ceil(100 / 48)


def test_mean_rate_peak_is_the_poisson_percentile_of_one_second() -> None:
    model = measured_model(
        [{"server": "xe9680", "requests_per_second": 10}], requests_per_second=40, peak_percentile=0.99
    )
    data = chosen(size(parse_requirements({"models": [model], "candidate_servers": ["xe9680"]})), "xe9680")
    peak = poisson_quantile(0.99, 40)
    assert peak > 40 and data["peak"] == peak and data["servers"] == math.ceil(peak / 10)


def test_measurement_wins_over_the_guide_and_says_so() -> None:
    guide_only = size(
        parse_requirements(
            {
                "models": [{"model": "llama-2-13b", "precision": "fp8", "concurrent_users": 128}],
                "candidate_servers": ["xe9680"],
            }
        )
    )
    assert chosen(guide_only, "xe9680")["basis"] == "design guide"
    result = size(
        parse_requirements(
            {
                "models": [
                    {
                        "model": "llama-2-13b",
                        "precision": "fp8",
                        "peak_requests_per_second": 50,
                        "measured": [{"server": "xe9680", "requests_per_second": 20}],
                    }
                ],
                "candidate_servers": ["xe9680"],
            }
        )
    )
    data = chosen(result, "xe9680")
    assert data["basis"] == "measured" and data["servers"] == 3
    assert any("llama-2-13b fp8 on xe9680: the measurement is used, not the design guide" in n for n in result.notes)


def test_mixed_fleet_guide_and_measured_models_share_the_placement() -> None:
    result = size(load_requirements(EXAMPLES / "measured-rag.yaml"))
    assert result.recommended is not None and result.recommended.server == "xe9680"
    placement = result.recommended.placement
    # 13B from the guide: 2 instances (128 users / 64) on one server; the 8B: ceil(45 / 12.5) + 1 = 5 servers.
    assert placement.servers_needed == 6
    by_model: dict[str, int] = {}
    for node in placement.nodes:
        for inst in node.instances:
            by_model[inst.model] = by_model.get(inst.model, 0) + 1
    assert by_model == {"llama-2-13b": 2, "llama-3.1-8b-instruct": 40}
    l40s = chosen(result, "r760xa-l40s-4")
    assert l40s["servers"] == 13  # ceil(45 / 4) + 1


def test_measurement_at_other_lengths_is_not_used() -> None:
    model = measured_model(
        [{"server": "xe9680", "requests_per_second": 10, "input_tokens": 2048}], peak_requests_per_second=5
    )
    result = size(parse_requirements({"models": [model], "candidate_servers": ["xe9680"]}))
    assert result.recommended is None
    (line,) = result.options[0].why_not()
    assert "2048/256" in line and "3500/256" in line


def test_measured_latency_over_the_target_does_not_fit() -> None:
    model = measured_model(
        [{"server": "xe9680", "requests_per_second": 10, "first_token_ms": 800}],
        peak_requests_per_second=5,
        max_first_token_ms=500,
    )
    result = size(parse_requirements({"models": [model], "candidate_servers": ["xe9680"]}))
    assert result.recommended is None and "measured 800 ms > max_first_token_ms 500" in result.options[0].why_not()[0]


def test_benchmark_export_picks_the_best_load_meeting_the_target(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "sweep.json").write_text((DATA / "genai_perf_sweep.json").read_text())
    req_file = tmp_path / "req.yaml"
    req_file.write_text(
        "models:\n"
        "  - model: llama-3.1-8b-instruct\n    precision: fp8\n    input_tokens: 3500\n    output_tokens: 256\n"
        "    max_first_token_ms: 500\n    peak_requests_per_second: 39\n"
        "    measured:\n      - server: xe9680\n        benchmark: bench/sweep.json   # relative to this file\n"
        "candidate_servers: [xe9680]\n"
    )
    data = chosen(size(load_requirements(req_file)), "xe9680")
    assert data["per_server"] == 9.75 and data["servers"] == 4  # 4 x 9.75 == 39: exactly at the peak
    assert "concurrency 32" in data["capacity_source"]


def test_benchmark_with_no_load_meeting_the_target_explains(tmp_path: Path) -> None:
    model = measured_model(
        [{"server": "xe9680", "benchmark": str(DATA / "perf_analyzer_profile.json")}],
        peak_requests_per_second=5,
        max_first_token_ms=50,
    )
    result = size(parse_requirements({"models": [model], "candidate_servers": ["xe9680"]}))
    assert result.recommended is None
    assert "no load in" in result.options[0].why_not()[0] and "concurrency 16" in result.options[0].why_not()[0]


@pytest.mark.parametrize(
    ("model", "path", "words"),
    [
        (measured_model([{"server": "r750", "requests_per_second": 1}]), "models[0].measured[0].server", ["r750"]),
        (
            measured_model(
                [{"server": "xe9680", "requests_per_second": 1, "output_tokens_per_s": 5, "concurrency": 2}]
            ),
            "models[0].measured[0]",
            ["exactly one", "requests_per_second, output_tokens_per_s"],
        ),
        (
            measured_model([{"server": "xe9680", "output_tokens_per_s": 5}]),
            "models[0].measured[0]",
            ["concurrency"],
        ),
        (
            measured_model([{"server": "xe9680", "requests_per_second": 0}]),
            "models[0].measured[0].requests_per_second",
            ["0"],
        ),
        (
            measured_model([{"server": "xe9680", "rps": 3}]),
            "models[0].measured[0].rps",
            ["requests_per_second"],
        ),
        (measured_model([], input_tokens=0), "models[0].input_tokens", ["0"]),
        (
            {"model": "mistral", "precision": "fp8", "input_tokens": 3500},
            "models[0].input_tokens",
            ["3500", "measured"],
        ),
        ({"model": "qwen", "precision": "fp8"}, "models[0].model", ["qwen", "measured"]),
    ],
)
def test_bad_measurements_name_field_value_and_fix(model: dict[str, Any], path: str, words: list[str]) -> None:
    with pytest.raises(InvalidInput) as info:
        size(parse_requirements({"models": [model]}))
    problems = info.value.problems
    assert [p.path for p in problems] == [path]
    assert problems[0].fix
    text = str(problems[0])
    for word in words:
        assert word in text


def test_duplicate_keys_are_refused_with_the_line(tmp_path: Path) -> None:
    path = tmp_path / "req.yaml"
    path.write_text("models:\n  - model: mistral\n    precision: fp8\n    precision: awq\n")
    with pytest.raises(InvalidInput) as info:
        load_requirements(path)
    (problem,) = info.value.problems
    assert "duplicate key 'precision'" in problem.message and problem.line == 4


def test_validation_problems_carry_the_line(tmp_path: Path) -> None:
    path = tmp_path / "req.yaml"
    path.write_text("models:\n  - model: mistral\n    precision: fp8\n    concurrent_users: -1\n")
    with pytest.raises(InvalidInput) as info:
        load_requirements(path)
    (problem,) = info.value.problems
    assert problem.path == "models[0].concurrent_users" and problem.line == 4


def test_json_shows_the_arithmetic() -> None:
    result = size(load_requirements(EXAMPLES / "measured-rag.yaml"))
    text = json.dumps(result.as_dict())
    for key in ("per_server", "peak", "servers_for_peak", "redundancy", "headroom", "formula"):
        assert f'"{key}"' in text
