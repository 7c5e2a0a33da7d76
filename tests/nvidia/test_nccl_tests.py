"""The nccl-tests output parser and its verdict, against a recorded ``all_reduce_perf`` output in nccl-tests'
documented format (fixtures/README.md says where the format comes from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.nvidia import nccl_tests

RECORDED = (Path(__file__).parent / "fixtures" / "nccl-tests-all-reduce-xe9680.txt").read_text()


def test_parse_reads_the_footer_ranks_and_rows() -> None:
    result = nccl_tests.parse(RECORDED)
    assert (result.avg_busbw, result.out_of_bounds, result.ranks) == (409.062, 0, 8)
    assert [r.size_bytes for r in result.rows] == [2**29, 2**30, 2**31, 2**32, 2**33]
    assert result.rows[0].busbw == 352.40
    assert result.peak == nccl_tests.NcclRow(2**33, 441.81)


def test_judge_passes_above_the_threshold_and_fails_below() -> None:
    result = nccl_tests.parse(RECORDED)
    ok, message = nccl_tests.judge(result, min_busbw=300, gpus=8)
    assert ok
    assert message == (
        "average bus bandwidth 409.062 GB/s (threshold 300 GB/s), peak 441.81 GB/s at 8589934592 B, 8 ranks, "
        "0 out-of-bounds values"
    )
    ok, message = nccl_tests.judge(result, min_busbw=450, gpus=8)
    assert not ok
    assert message.startswith("average bus bandwidth 409.062 GB/s is below the threshold 450 GB/s [")


def test_judge_fails_on_wrong_results_and_missing_gpus() -> None:
    broken = RECORDED.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED")
    ok, message = nccl_tests.judge(nccl_tests.parse(broken), min_busbw=300, gpus=8)
    assert not ok and message.startswith("12 out-of-bounds values (wrong results)")
    ok, message = nccl_tests.judge(nccl_tests.parse(RECORDED), min_busbw=300, gpus=4)
    assert not ok and message.startswith("ran on 8 GPUs, the node has 4")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("# nThread 1 nGpus 8\nNCCL WARN Cuda failure 'system not yet initialized'\n", "no '# Avg bus bandwidth' line"),
        (RECORDED.replace("409.062", "n/a"), "'# Avg bus bandwidth : n/a' is not a number"),
    ],
)
def test_output_without_a_usable_footer_is_refused(text: str, why: str) -> None:
    with pytest.raises(nccl_tests.NcclOutputError, match=why):
        nccl_tests.parse(text)
