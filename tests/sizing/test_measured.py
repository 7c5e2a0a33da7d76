"""Sizing from the operator's own measurements: models, lengths and precisions the guide never measured."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bootstrap.errors import InvalidInput
from bootstrap.sizing.capacity import REQUESTS_PER_S, Arithmetic, exact
from bootstrap.sizing.planner import size
from bootstrap.sizing.poisson import poisson_quantile
from bootstrap.sizing.requirements import load_requirements, parse_requirements

EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "sizing"


def one(model: dict, servers: list[str] | None = None):
    return size(parse_requirements({"models": [model], "candidate_servers": servers}))


def rag(peak: float, rps: float = 12.3, server: str = "xe9680", **extra) -> dict:
    """A model the guide never measured, with a 3500-token prompt, measured on one server."""
    measurement = {"server": server, "requests_per_second": rps, "first_token_ms": 180, "source": "test"}
    return {
        "model": "acme-llama-3.1-8b-rag",
        "precision": "bf16",
        "input_tokens": 3500,
        "output_tokens": 250,
        "peak_requests_per_second": peak,
        "measurements": [measurement],
        **extra,
    }


def chosen(result, model: int = 0):
    return result.recommended.fits[model].chosen


@pytest.mark.parametrize(
    ("peak", "servers"),
    [(36.8, 3), (36.9, 3), (36.900001, 4), (24.6, 2), (24.61, 3), (12.3, 1), (0.1, 1)],
)
def test_servers_at_and_just_above_capacity_times_servers(peak: float, servers: int) -> None:
    # 12.3 req/s per XE9680 (8 instances at TP=1): 3 servers carry exactly 36.9 req/s.
    result = one(rag(peak), ["xe9680"])
    calc = chosen(result).arithmetic
    assert calc.per_server == Fraction("12.3")
    assert calc.servers_for_peak == servers
    assert result.recommended.placement.servers_needed == servers
    assert calc.per_server * servers >= calc.peak > calc.per_server * (servers - 1)


def test_exact_where_floats_would_buy_one_server_too_many() -> None:
    # 2.1 / 0.3 is 7.000000000000001 in floats: ceil would say 8 servers.
    assert math.ceil(2.1 / 0.3) == 8
    model = rag(2.1, rps=0.3, server="r760xa-l40s-2")
    model["measurements"][0]["tensor_parallel"] = 2  # one instance per server
    result = one(model, ["r760xa-l40s-2"])
    assert chosen(result).arithmetic.servers_for_peak == 7
    assert result.recommended.placement.servers_needed == 7


@given(
    cents=st.integers(min_value=1, max_value=100_000),
    servers=st.integers(min_value=1, max_value=40),
    per_server_instances=st.sampled_from([1, 2, 4, 8]),
)
def test_arithmetic_is_exact_at_every_boundary(cents: int, servers: int, per_server_instances: int) -> None:
    capacity = Decimal(cents) / 100  # a per-server figure as an operator writes it
    at_peak = float(capacity * servers)

    def calc(peak: float) -> Arithmetic:
        return Arithmetic(
            REQUESTS_PER_S, exact(float(capacity)) / per_server_instances, per_server_instances, exact(peak), "test"
        )

    assert calc(at_peak).servers_for_peak == servers
    assert calc(at_peak).headroom == 0
    assert calc(float(capacity * servers + Decimal("0.001"))).servers_for_peak == servers + 1
    assert calc(at_peak).instances == servers * per_server_instances


def test_arithmetic_is_shown_in_json() -> None:
    data = one(rag(30, redundancy=1), ["xe9680"]).as_dict()
    calc = data["options"][0]["models"][0]["chosen"]["arithmetic"]
    assert calc["capacity_per_server"] == 12.3 and calc["instances_per_server"] == 8
    assert calc["capacity_per_instance"] == 1.5375
    assert calc["peak"] == 30 and calc["servers_for_peak"] == 3
    assert calc["redundancy"] == 1 and calc["spare_instances"] == 8
    assert calc["instances"] == 28 and calc["servers_alone"] == 4
    assert calc["headroom"] == pytest.approx(28 * 1.5375 - 30)
    assert any("ceil(30 / 12.3) = 3" in step for step in calc["steps"])
    assert data["recommended"]["servers_needed"] == 4  # N+1
    assert "operator measurements for acme-llama-3.1-8b-rag" in data["source"]


def test_concurrency_and_tokens_per_second_give_requests_per_second() -> None:
    model = rag(30)
    model["measurements"] = [{"server": "xe8640", "tensor_parallel": 2, "concurrency": 24, "output_tokens_per_s": 3000}]
    calc = chosen(one(model, ["xe8640"])).arithmetic
    assert calc.per_server == 12  # 3000 tokens/s / 250 tokens per answer
    assert calc.instances_per_server == 2 and calc.servers_for_peak == 3 and calc.instances == 5


def test_concurrent_users_against_measured_concurrency() -> None:
    model = rag(1) | {"peak_requests_per_second": None, "concurrent_users": 100}
    model["measurements"][0]["concurrency"] = 24
    calc = chosen(one(model, ["xe9680"])).arithmetic
    assert calc.unit == "concurrent requests"
    assert calc.per_server == 24 and calc.servers_for_peak == 5


def test_mean_rate_becomes_a_poisson_peak() -> None:
    model = rag(1) | {"peak_requests_per_second": None, "requests_per_second": 20, "peak_percentile": 0.99}
    calc = chosen(one(model, ["xe9680"])).arithmetic
    assert calc.peak == poisson_quantile(0.99, 20) > 20
    assert "Poisson p99" in calc.peak_from


def test_long_prompt_of_a_guide_model_uses_the_measurement_and_says_why_not_elsewhere() -> None:
    model = rag(19, rps=9.5) | {"model": "llama-2-13b", "precision": "fp8"}
    result = one(model)
    assert result.recommended.server == "xe9680"
    assert result.recommended.placement.servers_needed == 2
    xe8640 = next(o for o in result.options if o.server == "xe8640")
    assert "input_tokens 3500 is beyond the guide's measured range (2048)" in " ".join(xe8640.why_not())


def test_long_prompt_without_measurement_is_refused_with_the_fix() -> None:
    with pytest.raises(InvalidInput) as info:
        one({"model": "llama-2-13b", "precision": "fp8", "input_tokens": 3500})
    problem = info.value.problems[0]
    assert problem.path == "models[0].input_tokens" and "3500" in problem.message
    assert "measurements" in problem.fix


def test_measurement_wins_over_the_guide_and_the_output_says_so() -> None:
    # The guide: 128 users / 64 per instance = 2 instances of 13B FP8 on an XE9680. Measured: 32 per server.
    model = {
        "model": "llama-2-13b",
        "precision": "fp8",
        "concurrent_users": 128,
        "measurements": [{"server": "xe9680", "concurrency": 32, "requests_per_second": 10, "source": "lab run"}],
    }
    result = one(model, ["xe9680", "xe8640"])
    assert result.recommended.server == "xe8640"  # the guide's 1 x XE8640 beats the measured 4 x XE9680
    fit = result.options[0].fits[0]
    assert fit.chosen.instances == 32 and fit.guide.instances == 2
    assert "disagree" in fit.overrides() and "measurement wins" in fit.overrides()
    assert any("measurement wins" in n and n.startswith("xe9680") for n in result.notes)
    data = result.as_dict()
    by_server = {o["server"]: o["models"][0] for o in data["options"]}
    assert by_server["xe9680"]["measurement_wins"] and by_server["xe9680"]["guide"]["instances"] == 2
    assert by_server["xe8640"]["measurement_wins"] is None  # not measured there: the guide's figures
    assert by_server["xe8640"]["chosen"]["figures"] == "design guide Tables 11-15"


def test_mixed_fleet_of_measured_and_guide_models() -> None:
    result = size(
        parse_requirements(
            {"models": [rag(24.6), {"model": "mistral-7b", "precision": "fp8", "concurrent_users": 128}]}
        )
    )
    rec = result.recommended
    assert rec.server == "xe9680"  # the only server the new model was measured on
    counts = [(i.model, i.tensor_parallel) for n in rec.placement.nodes for i in n.instances]
    assert counts.count(("acme-llama-3.1-8b-rag", 1)) == 16 and counts.count(("mistral-7b", 1)) == 2
    assert rec.placement.servers_needed == 3  # 18 single-GPU instances on 8-GPU servers
    assert "design guide" in result.source and "operator measurements" in result.source
    others = [o for o in result.options if o.server != "xe9680"]
    assert all(not o.feasible for o in others)
    assert "no measurement on xe8640" in " ".join(next(o for o in others if o.server == "xe8640").why_not())


def test_measured_latency_over_the_target_is_not_used() -> None:
    result = one(rag(10, max_first_token_ms=100), ["xe9680"])
    assert result.recommended is None
    assert "measured first token 180 ms > max_first_token_ms 100" in result.options[0].why_not()[0]


def test_instance_wider_than_the_server_is_refused() -> None:
    model = rag(10, server="r760xa-l40s-2")
    model["measurements"][0] |= {"tensor_parallel": 2, "pipeline_parallel": 2}
    result = one(model, ["r760xa-l40s-2"])
    assert "4 GPUs per instance > 2 GPUs" in result.options[0].why_not()[0]


def test_pipeline_parallel_instances_are_placed_on_tp_x_pp_gpus() -> None:
    model = rag(12.3)
    model["measurements"][0] |= {"tensor_parallel": 2, "pipeline_parallel": 2}
    placement = one(model, ["xe9680"]).recommended.placement
    widths = [(len(i.gpus), i.pipeline_parallel) for n in placement.nodes for i in n.instances]
    assert widths == [(4, 2), (4, 2)]


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (
            {"measurements": [{"server": "r750", "requests_per_second": 1}]},
            "models[0].measurements[0].server",
            ["r750", "xe9680"],
        ),
        ({"measurements": [{"server": "xe9680"}]}, "models[0].measurements[0]", ["requests_per_second", "benchmark"]),
        (
            {"measurements": [{"server": "xe9680", "requests_per_second": -1}]},
            "models[0].measurements[0].requests_per_second",
            ["-1"],
        ),
        (
            {"measurements": [{"server": "xe9680", "requests_per_second": 1, "input_tokens": 128}]},
            "models[0]",
            ["measured at input_tokens=128", "3500"],
        ),
        (
            {"measurements": [{"server": "xe9680", "requests_per_second": 1, "gpus": 8}]},
            "models[0].measurements[0].gpus",
            ["tensor_parallel"],
        ),
        ({"requests_per_second": 3}, "models[0]", ["not both", "peak_requests_per_second"]),
        ({"input_tokens": 0}, "models[0].input_tokens", ["0"]),
        ({"redundancy": -1}, "models[0].redundancy", ["-1", "N+1"]),
    ],
)
def test_bad_measurements_name_field_value_and_fix(change: dict, path: str, words: list[str]) -> None:
    with pytest.raises(InvalidInput) as info:
        one(rag(10) | change)
    problems = info.value.problems
    assert [p.path for p in problems] == [path]
    assert problems[0].fix
    for word in words:
        assert word in str(problems[0])


def test_unknown_model_without_measurements_points_at_them() -> None:
    with pytest.raises(InvalidInput) as info:
        one({"model": "acme-rag", "precision": "bf16"})
    assert info.value.problems[0].path == "models[0].model"
    assert "measurements" in info.value.problems[0].fix


def test_duplicate_keys_in_a_requirements_file_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "req.yaml"
    path.write_text("models:\n  - model: mistral\n    precision: fp8\n    precision: awq\n")
    with pytest.raises(InvalidInput) as info:
        load_requirements(path)
    problem = info.value.problems[0]
    assert "duplicate key 'precision'" in problem.message and problem.line == 4


def test_measured_example_file_reproduces_its_comment() -> None:
    result = size(load_requirements(EXAMPLES / "measured-rag.yaml"))
    assert result.recommended.server == "xe9680"
    assert result.recommended.placement.servers_needed == 4
    assert chosen(result).arithmetic.servers_for_peak == 3


def test_mixed_fleet_of_server_types_when_no_single_one_fits() -> None:
    chat = rag(24.6) | {"model": "acme-chat-70b", "input_tokens": 512}
    chat["measurements"][0] |= {"tensor_parallel": 4}  # 2 instances per XE9680: 12.3 req/s per server
    summarise = rag(10, rps=2.5, server="r760xa-l40s-4") | {"model": "acme-summarise-8b"}
    result = size(parse_requirements({"models": [chat, summarise]}))
    assert result.recommended is None and result.ok
    fleet = {p.server: p for p in result.fleet}
    assert set(fleet) == {"xe9680", "r760xa-l40s-4"}
    assert fleet["xe9680"].servers_needed == 2  # ceil(24.6 / 12.3)
    assert fleet["r760xa-l40s-4"].servers_needed == 4  # ceil(10 / 2.5)
    data = result.as_dict()
    assert data["ok"] is True and data["recommended"] is None and len(data["mixed_fleet"]) == 2


def test_mixed_fleet_needs_every_model_to_fit_somewhere() -> None:
    summarise = rag(10, server="r760xa-l40s-4") | {"model": "acme-summarise-8b"}
    too_slow = rag(10, max_first_token_ms=100)
    result = size(parse_requirements({"models": [summarise, too_slow]}))
    assert not result.ok and result.mixed is None


def test_unread_benchmark_is_a_reason_not_a_crash() -> None:
    model = rag(10)
    model["measurements"] = [{"server": "xe9680", "benchmark": "export.json"}]
    result = one(model, ["xe9680"])
    assert not result.ok and "benchmark export.json not read" in result.options[0].why_not()[0]
