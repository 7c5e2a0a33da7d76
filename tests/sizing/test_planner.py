"""Sizing against the design guide: its two worked examples, its tables, and the placement rules."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bootstrap.errors import InvalidInput
from bootstrap.inventory.sizing_spec import ModelRequirement, SizingPlacement, SizingSection
from bootstrap.sizing.planner import ModelFit, evaluate, pack, size
from bootstrap.sizing.poisson import poisson_quantile
from bootstrap.sizing.requirements import load_requirements, parse_requirements
from bootstrap.sizing.tables import DesignGuideTables

EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "sizing"


def instance_counts(placement: SizingPlacement) -> dict[str, int]:
    return dict(Counter(f"{i.model}/{i.precision}" for node in placement.nodes for i in node.instances))


def reqs(*models: dict, servers: list[str] | None = None):
    return parse_requirements({"models": list(models), "candidate_servers": servers})


@pytest.mark.parametrize("scenario", ["scenario-1", "scenario-2"])
def test_guide_examples_are_reproduced(tables: DesignGuideTables, scenario: str) -> None:
    expected = tables.table_16_sizing_examples[scenario]
    number = scenario.split("-")[1]
    result = size(load_requirements(EXAMPLES / f"guide-example-{number}.yaml"))
    placement = result.recommended.placement
    assert placement.server == expected.server
    assert placement.servers_needed == expected.servers
    assert instance_counts(placement) == expected.instances


def test_example_1_holds_among_every_server(tables: DesignGuideTables) -> None:
    # Scenario 1 with no candidate list: the cheapest one-server option is the guide's R760xa 4 x L40S.
    data = load_requirements(EXAMPLES / "guide-example-1.yaml").model_dump()
    data["candidate_servers"] = None
    result = size(parse_requirements(data))
    assert result.recommended.server == "r760xa-l40s-4"
    assert [n.gpus_free for n in result.recommended.placement.nodes] == [0]


def test_example_1_instances_follow_from_batch_64(tables: DesignGuideTables) -> None:
    # "built with a maximum batch size of 64 ... Two instances of each model can serve ... 128 users".
    for users, instances in [(64, 1), (65, 2), (128, 2), (129, 3)]:
        result = size(
            reqs({"model": "mistral", "precision": "fp8", "concurrent_users": users}, servers=["r760xa-l40s-4"])
        )
        assert result.recommended.fits[0].chosen.instances == instances


def test_example_2_by_concurrent_users_matches_table_16(tables: DesignGuideTables) -> None:
    # Table 16's instance counts, asked as 64 concurrent requests per instance (the guide's build).
    result = size(
        reqs(
            {"model": "llama-2-70b", "precision": "fp8", "concurrent_users": 64},
            {"model": "llama-2-13b", "precision": "fp8", "concurrent_users": 64},
            {"model": "llama-2-7b", "precision": "fp8", "concurrent_users": 128},
        )
    )
    assert result.recommended.server == tables.table_16_sizing_examples["scenario-2"].server
    assert instance_counts(result.recommended.placement) == tables.table_16_sizing_examples["scenario-2"].instances


def test_example_2_needs_two_xe8640(tables: DesignGuideTables) -> None:
    # 70B FP8 is "Not supported" on 1 x H100 SXM (Table 13), so it takes TP=2: 2 + 1 + 2 GPUs > 4.
    data = load_requirements(EXAMPLES / "guide-example-2.yaml").model_dump()
    data["candidate_servers"] = ["xe8640"]
    option = size(parse_requirements(data)).recommended
    assert option.fits[0].chosen.tp == 2
    assert option.placement.servers_needed == 2
    assert option.placement.gpus_used == 5


def test_why_70b_fp8_does_not_fit_two_l40s(tables: DesignGuideTables) -> None:
    result = size(reqs({"model": "llama-2-70b", "precision": "fp8"}, servers=["r760xa-l40s-2", "r760xa-l40s-4"]))
    two, four = result.options
    assert not two.feasible
    tp1, tp2 = two.fits[0].tried
    assert "Table 11" in tp1.reasons[0] and "70.06 GB" in tp1.reasons[0] and "48 GB" in tp1.reasons[0]
    assert tp2.reasons == ["Tables 13-15: Not supported"]
    assert four.fits[0].chosen.tp == 4
    assert four.fits[0].chosen.first_token_ms == tables.table_13_first_token_ms_input_128["llama-2-70b/fp8"][2]
    assert result.recommended is four


def test_falcon_180b_runs_only_on_eight_h100_sxm(tables: DesignGuideTables) -> None:
    result = size(reqs({"model": "falcon-180b", "precision": "fp8"}))
    assert [o.server for o in result.options if o.feasible] == ["xe9680"]
    assert result.recommended.fits[0].chosen.tp == 8


def test_not_recommended_cells_are_skipped(tables: DesignGuideTables) -> None:
    # 7B AWQ is "Not recommended" on 4 and 8 H100 SXM; it still fits TP=1 there.
    fit = size(reqs({"model": "llama-2-7b", "precision": "awq"}, servers=["xe9680"])).options[0].fits[0]
    by_tp = {c.tp: c for c in fit.tried}
    assert "Not recommended" in by_tp[4].reasons[0] and "Not recommended" in by_tp[8].reasons[0]
    assert fit.chosen.tp == 1


def test_h100_pcie_keeps_tp_within_nvlink_pairs(tables: DesignGuideTables) -> None:
    result = size(
        reqs({"model": "llama-2-70b", "precision": "fp8", "min_instances": 2}, servers=["r760xa-h100-pcie-4"])
    )
    option = result.recommended
    assert [c.tp for c in option.fits[0].tried] == [1, 2]
    assert [i.gpus for i in option.placement.nodes[0].instances] == [[0, 1], [2, 3]]
    assert any("H100 PCIe is not measured" in n for n in result.notes)


def test_first_token_limit_rejects_slow_configurations(tables: DesignGuideTables) -> None:
    req = {"model": "llama-2-13b", "precision": "fp8", "input_tokens": 2048, "max_first_token_ms": 100}
    result = size(reqs(req, servers=["r760xa-l40s-4", "xe8640"]))
    l40s, xe8640 = result.options
    assert not l40s.feasible and all("max_first_token_ms 100" in c.reasons[0] for c in l40s.fits[0].tried)
    assert xe8640.fits[0].chosen.first_token_ms == tables.table_14_first_token_ms_input_2048["llama-2-13b/fp8"][3]


def test_first_token_is_interpolated_between_tables_13_and_14(tables: DesignGuideTables) -> None:
    spec = tables.servers["xe8640"]
    req = ModelRequirement(model="mistral-7b", precision="fp8", input_tokens=1088)
    got = evaluate(req, "mistral-7b/fp8", spec, 1, tables).first_token_ms
    t13 = tables.table_13_first_token_ms_input_128["mistral-7b/fp8"][3]
    t14 = tables.table_14_first_token_ms_input_2048["mistral-7b/fp8"][3]
    assert got == pytest.approx((t13 + t14) / 2)


def test_requests_per_second_become_a_poisson_peak(tables: DesignGuideTables) -> None:
    req = ModelRequirement(
        model="llama-2-13b", precision="fp8", output_tokens=256, requests_per_second=30, peak_percentile=0.99
    )
    res = evaluate(req, "llama-2-13b/fp8", tables.servers["xe9680"], 1, tables)
    tokens_per_s = tables.table_15_tokens_per_s["llama-2-13b/fp8"][3]
    response_s = (
        tables.table_13_first_token_ms_input_128["llama-2-13b/fp8"][3] + 1000 * 256 * 64 / tokens_per_s
    ) / 1000
    peak = poisson_quantile(0.99, 30 * response_s)
    assert res.peak_concurrency == peak
    assert res.instances == math.ceil(peak / 64)
    assert peak > 30 * response_s  # the 99th percentile is above the Little's-law mean


def test_more_load_never_needs_fewer_servers(tables: DesignGuideTables) -> None:
    counts = [
        size(
            reqs({"model": "llama-2-70b", "precision": "fp8", "requests_per_second": r}, servers=["xe8640"])
        ).recommended.placement.servers_needed
        for r in (1, 5, 20, 80)
    ]
    assert counts == sorted(counts) and counts[-1] > counts[0]


def test_response_limit(tables: DesignGuideTables) -> None:
    # 13B AWQ on one L40S decodes 1876.85/64 ~ 29 tokens/s per request: 2048 tokens take ~70 s.
    req = {"model": "llama-2-13b", "precision": "awq", "output_tokens": 2048, "max_response_ms": 30000}
    option = size(reqs(req, servers=["r760xa-l40s-4"])).options[0]
    assert not option.feasible
    assert "max_response_ms 30000" in option.fits[0].tried[0].reasons[0]


@settings(max_examples=60, deadline=None)
@given(
    server=st.sampled_from(["r760xa-l40s-4", "r760xa-h100-pcie-4", "xe8640", "xe9680"]),
    counts=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 5)), min_size=1, max_size=5),
)
def test_packing_is_aligned_disjoint_and_tight(tables: DesignGuideTables, server: str, counts) -> None:
    spec = tables.servers[server]
    fits = []
    for i, (wanted_tp, n) in enumerate(counts):
        tp = min(wanted_tp, spec.max_tp, spec.gpu_count)
        req = ModelRequirement(model=f"m{i}", precision="fp8", min_instances=n)
        fits.append(_fixed_fit(req, tp, n))
    placement = pack(server, spec, fits)
    wanted_gpus = sum(f.chosen.gpus for f in fits)
    assert placement.gpus_used == wanted_gpus
    # Power-of-two blocks dividing the server: first-fit decreasing is optimal.
    assert placement.servers_needed == math.ceil(wanted_gpus / spec.gpu_count)
    for node in placement.nodes:
        used = [g for inst in node.instances for g in inst.gpus]
        assert len(used) == len(set(used)) and all(0 <= g < spec.gpu_count for g in used)
        for inst in node.instances:
            assert inst.gpus[0] % inst.tensor_parallel == 0 and len(inst.gpus) == inst.tensor_parallel


def _fixed_fit(req: ModelRequirement, tp: int, instances: int) -> ModelFit:
    from bootstrap.sizing.planner import ConfigResult

    config = ConfigResult(tp=tp, first_token_ms=1.0, instances=instances)
    return ModelFit(f"{req.model}/fp8", req, [config])


@pytest.mark.parametrize(
    ("entry", "path", "words"),
    [
        ({"model": "gpt-4", "precision": "fp8"}, "models[0].model", ["gpt-4", "llama-2-13b"]),
        ({"model": "mistral", "precision": "awq"}, "models[0].precision", ["awq", "fp8"]),
        ({"model": "mistral", "precision": "int3"}, "models[0].precision", ["int3", "fp8, awq"]),
        (
            {"model": "mistral", "precision": "fp8", "input_tokens": 4096},
            "models[0].input_tokens",
            ["4096", "2048", "measurements"],
        ),
        (
            {"model": "mistral", "precision": "fp8", "peak_percentile": 1.5},
            "models[0].peak_percentile",
            ["1.5"],
        ),
        ({"model": "mistral", "precision": "fp8", "users": 3}, "models[0].users", ["concurrent_users"]),
        (
            {"model": "mistral", "precision": "fp8", "concurrent_users": 5, "requests_per_second": 2},
            "models[0]",
            ["not both", "5"],
        ),
    ],
)
def test_bad_requirements_name_field_value_and_fix(entry: dict, path: str, words: list[str]) -> None:
    with pytest.raises(InvalidInput) as info:
        size(parse_requirements({"models": [entry]}))
    problems = info.value.problems
    assert [p.path for p in problems] == [path]
    text = str(problems[0])
    assert problems[0].fix
    for word in words:
        assert word in text


def test_unknown_server_is_refused() -> None:
    with pytest.raises(InvalidInput) as info:
        size(reqs({"model": "mistral", "precision": "fp8"}, servers=["xe9680", "r750"]))
    assert info.value.problems[0].path == "candidate_servers[1]"
    assert "'r750'" in info.value.problems[0].message and "xe9680" in info.value.problems[0].fix


def test_placement_round_trips_through_the_inventory_section() -> None:
    result = size(load_requirements(EXAMPLES / "guide-example-2.yaml"))
    section = SizingSection(requirements=result.requirements, placement=result.recommended.placement)
    again = SizingSection.model_validate(section.model_dump(mode="json"))
    assert again == section
    with pytest.raises(ValueError, match="requirements do not list"):
        data = section.model_dump(mode="json")
        data["requirements"]["models"].pop(0)
        SizingSection.model_validate(data)
