"""Reading benchmark exports (GenAI-Perf, AIPerf, perf_analyzer) and picking the best load meeting a target.

The sample files in ``data/`` are hand-written in the tools' documented formats (see data/README.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.errors import InvalidInput
from bootstrap.sizing.benchmarks import best_point, percentile, read_points

DATA = Path(__file__).parent / "data"


def test_genai_perf_sweep_reads_every_concurrency() -> None:
    points = read_points(DATA / "genai_perf_sweep.json", "benchmark")
    assert [p.load for p in points] == ["concurrency 8", "concurrency 16", "concurrency 32", "concurrency 64"]
    assert [p.requests_per_second for p in points] == [3.2, 5.9, 9.75, 12.1]
    assert points[2].first_token_ms == 470.0 and points[2].latency_ms == 3600.0  # the p99s


@pytest.mark.parametrize(
    ("ttft", "latency", "load"),
    [
        (500, None, "concurrency 32"),  # 64 has p99 TTFT 910 ms
        (470, None, "concurrency 32"),  # at the limit is within it
        (469.9, None, "concurrency 16"),
        (1000, 3000, "concurrency 16"),  # the latency target binds
        (None, None, "concurrency 64"),  # no target: the highest throughput
    ],
)
def test_best_point_is_the_highest_load_meeting_the_target(
    ttft: float | None, latency: float | None, load: str
) -> None:
    best = best_point(read_points(DATA / "genai_perf_sweep.json", "benchmark"), ttft, latency)
    assert best is not None and best.load == load


def test_no_point_meets_the_target() -> None:
    assert best_point(read_points(DATA / "genai_perf_sweep.json", "benchmark"), 100, None) is None


def test_aiperf_load_from_loadgen_and_max_when_no_p99() -> None:
    (point,) = read_points(DATA / "aiperf_concurrency_32.json", "benchmark")
    assert point.load == "concurrency 32"
    assert point.first_token_ms == pytest.approx(470.0 * 1.1)  # the max, not the avg
    assert point.latency_ms == 3600.0


def test_perf_analyzer_throughput_and_latencies_from_timestamps() -> None:
    low, high = read_points(DATA / "perf_analyzer_profile.json", "benchmark")
    # 20 requests every 250 ms, each answered in 750 ms: 20 / (19 x 0.25 + 0.75) s.
    assert low.load == "concurrency 4"
    assert low.requests_per_second == pytest.approx(20 / 5.5)
    assert low.first_token_ms == pytest.approx(100.0) and low.latency_ms == pytest.approx(750.0)
    assert high.requests_per_second == pytest.approx(8.0)
    assert high.first_token_ms == pytest.approx(400.0) and high.latency_ms == pytest.approx(1100.0)


def test_nearest_rank_percentile() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.99) == 99.0 and percentile(values, 0.5) == 50.0 and percentile([7.0], 0.99) == 7.0


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", ["benchmark", "GenAI-Perf"]),
        ('{"time_to_first_token": {"unit": "ms", "avg": 3}}', ["request_throughput", "genai-perf profile"]),
        ('{"experiments": []}', ["no experiments"]),
        ('{"experiments": [{"experiment": {"mode": "concurrency", "value": 1}, "requests": []}]}', ["finished"]),
    ],
)
def test_bad_exports_name_the_file_and_the_fix(tmp_path: Path, content: str, words: list[str]) -> None:
    path = tmp_path / "export.json"
    path.write_text(content)
    with pytest.raises(InvalidInput) as info:
        read_points(path, "models[0].measured[0].benchmark")
    (problem,) = info.value.problems
    assert problem.path == "models[0].measured[0].benchmark" and problem.fix
    text = str(info.value) + str(problem)
    assert str(path) in text
    for word in words:
        assert word in text
