"""Importing benchmark exports: GenAI-Perf / AIPerf profile JSON and perf_analyzer's profile export.

The files in ``data/`` are hand-written in the tools' documented layouts (see ``data/README.md``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from bootstrap.errors import InvalidInput
from bootstrap.sizing.benchmarks import load_points, percentile
from bootstrap.sizing.planner import size
from bootstrap.sizing.requirements import load_requirements

DATA = Path(__file__).resolve().parent / "data"


def requirements(tmp_path: Path, benchmark: str | list[str], **model) -> Path:
    """A requirements file next to copies of the benchmark files, naming them relatively."""
    for name in [benchmark] if isinstance(benchmark, str) else benchmark:
        if (DATA / name).exists():
            shutil.copy(DATA / name, tmp_path / name)
    entry = {
        "model": "acme-llama-3.1-8b-rag",
        "precision": "bf16",
        "input_tokens": 3500,
        "output_tokens": 250,
        "peak_requests_per_second": 40,
        "measurements": [{"server": "xe9680", "benchmark": benchmark, **model.pop("measurement", {})}],
        **model,
    }
    path = tmp_path / "req.yaml"
    path.write_text(yaml.safe_dump({"models": [entry], "candidate_servers": ["xe9680"]}))
    return path


@pytest.mark.parametrize(
    ("ttft", "rps", "load"),
    [(200, 12.3, "concurrency 8"), (100, 1.9, "concurrency 1"), (None, 30.1, "concurrency 32")],
)
def test_genai_perf_sweep_takes_the_highest_load_meeting_the_target(
    tmp_path: Path, ttft: float | None, rps: float, load: str
) -> None:
    reqs = load_requirements(requirements(tmp_path, "genai_perf_rag_sweep.json", max_first_token_ms=ttft))
    m = reqs.models[0].measurements[0]
    assert m.benchmark is None and m.requests_per_second == rps
    assert load in m.source and "GenAI-Perf genai_perf_rag_sweep.json" in m.source
    calc = size(reqs).recommended.fits[0].chosen.arithmetic
    assert calc.per_server == pytest.approx(rps)


def test_statistic_chooses_which_latency_meets_the_target(tmp_path: Path) -> None:
    # concurrency 8: TTFT avg 150 ms, p99 180 ms; target 160 ms.
    p99 = load_requirements(requirements(tmp_path, "genai_perf_rag_sweep.json", max_first_token_ms=160))
    avg = load_requirements(
        requirements(tmp_path, "genai_perf_rag_sweep.json", max_first_token_ms=160, measurement={"statistic": "avg"})
    )
    assert p99.models[0].measurements[0].requests_per_second == 1.9
    assert avg.models[0].measurements[0].requests_per_second == 12.3


def test_nested_input_config_and_seconds_are_read(tmp_path: Path) -> None:
    m = load_requirements(requirements(tmp_path, "genai_perf_rag_c16.json")).models[0].measurements[0]
    assert m.concurrency == 16
    assert m.first_token_ms == pytest.approx(230.0) and m.latency_ms == pytest.approx(5400.0)
    assert m.output_tokens_per_s == 5145.5


def test_several_files_are_one_sweep(tmp_path: Path) -> None:
    files = ["genai_perf_rag_sweep.json", "genai_perf_rag_c16.json"]
    m = load_requirements(requirements(tmp_path, files, max_first_token_ms=250)).models[0].measurements[0]
    assert m.requests_per_second == 20.5 and m.concurrency == 16


@pytest.mark.parametrize(("ttft", "rps", "concurrency"), [(100, 2.0, 1), (200, 8.0, 4)])
def test_perf_analyzer_export_gives_throughput_and_latencies(
    tmp_path: Path, ttft: float, rps: float, concurrency: int
) -> None:
    reqs = load_requirements(requirements(tmp_path, "perf_analyzer_export.json", max_first_token_ms=ttft))
    m = reqs.models[0].measurements[0]
    assert m.requests_per_second == pytest.approx(rps) and m.concurrency == concurrency
    assert m.first_token_ms == pytest.approx(50.0 if concurrency == 1 else 150.0)
    assert m.latency_ms == pytest.approx(400.0 if concurrency == 1 else 900.0)


def test_perf_analyzer_counts_only_requests_finished_in_the_window(tmp_path: Path) -> None:
    data = json.loads((DATA / "perf_analyzer_export.json").read_text())
    data["experiments"][0]["window_boundaries"] = [0, 1_000_000_000]  # 2 of 4 requests end within 1 s
    path = tmp_path / "pa.json"
    path.write_text(json.dumps(data))
    assert load_points(path, "p99")[0].requests_per_second == pytest.approx(2.0)


def test_no_point_meets_the_target(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as info:
        load_requirements(requirements(tmp_path, "genai_perf_rag_sweep.json", max_first_token_ms=50))
    problem = info.value.problems[0]
    assert problem.path == "models[0].measurements[0].benchmark"
    assert "concurrency 1: TTFT 91.0 ms" in problem.message and "lower load" in problem.fix


def test_other_token_lengths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as info:
        load_requirements(requirements(tmp_path, "genai_perf_rag_sweep.json", input_tokens=2048))
    assert "averages input_tokens 3498.6, the requirement is 2048" in info.value.problems[0].message


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, ["no such regular file"]),
        ("not json", ["not JSON"]),
        ('{"request_throughput": {"avg": 1}, "request_throughput": {"avg": 2}}', ["duplicate key"]),
        ('{"time_to_first_token": {"unit": "ms", "avg": 3}}', ["request_throughput"]),
        ('{"experiments": [{"experiment": {"mode": "concurrency", "value": 1}, "requests": []}]}', ["no request"]),
        ('{"request_throughput": {"avg": 2}, "time_to_first_token": {"unit": "fortnights", "avg": 3}}', ["fortnights"]),
    ],
)
def test_unusable_files_name_the_measurement_and_the_file(
    tmp_path: Path, content: str | None, words: list[str]
) -> None:
    if content is not None:
        (tmp_path / "export.json").write_text(content)
    with pytest.raises(InvalidInput) as info:
        load_requirements(requirements(tmp_path, "export.json"))
    problem = info.value.problems[0]
    assert problem.path == "models[0].measurements[0].benchmark" and "export.json" in problem.message
    for word in words:
        assert word in problem.message


def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], "p50") == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], "avg") == 2.5
    assert percentile([10.0], "p99") == 10.0


def test_aiperf_export(tmp_path: Path) -> None:
    reqs = load_requirements(
        requirements(tmp_path, "aiperf_export.json", max_first_token_ms=900, measurement={"statistic": "p99"})
    )
    m = reqs.models[0].measurements[0]
    assert (m.requests_per_second, m.concurrency, m.first_token_ms) == (9.9, 12, 812.4)
    assert m.source.startswith("AIPerf aiperf_export.json: concurrency 12")
    with pytest.raises(InvalidInput):  # p99 TTFT 812.4 ms misses an 800 ms target
        load_requirements(requirements(tmp_path, "aiperf_export.json", max_first_token_ms=800))
