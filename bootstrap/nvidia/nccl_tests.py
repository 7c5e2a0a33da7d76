"""Read the output of NVIDIA nccl-tests (``all_reduce_perf``) and judge it against a bus-bandwidth threshold.

The format is the one ``src/util.cu`` of https://github.com/NVIDIA/nccl-tests prints (``writeDeviceReport``,
``writeResultHeader``, ``writeBenchmarkLine*``, ``writeResultFooter``; read at v2.19.6) and ``README.md`` /
``doc/PERFORMANCE.md`` document: ``#`` comment lines (one ``#  Rank  N Group ... device ...`` line per GPU),
one table row per message size (``size count type redop root`` then ``time algbw busbw #wrong`` out-of-place
and in-place), and a footer::

    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 123.456

Bandwidths are GB/s. "Bus bandwidth" is the figure comparable with the hardware's link speed
(``doc/PERFORMANCE.md``); the average is over every size the run scanned.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>\S+)", re.MULTILINE)
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\d+)", re.MULTILINE)
_RANK_RE = re.compile(r"^#\s+Rank\s+\d+\s", re.MULTILINE)
#: out-of-place ``busbw`` is the 8th field of a table row (size count type redop root time algbw busbw ...)
_BUSBW_FIELD = 7


class NcclOutputError(ValueError):
    """The text is not nccl-tests output rackctl can judge (the message says what is missing)."""


@dataclass(frozen=True)
class NcclRow:
    """One message size of the table: its out-of-place bus bandwidth (GB/s)."""

    size_bytes: int
    busbw: float


@dataclass
class NcclResult:
    """What one nccl-tests run reported."""

    avg_busbw: float
    out_of_bounds: int | None
    ranks: int
    rows: list[NcclRow] = field(default_factory=list)

    @property
    def peak(self) -> NcclRow | None:
        return max(self.rows, key=lambda r: r.busbw) if self.rows else None


def _row(line: str) -> NcclRow | None:
    fields = line.split()
    if len(fields) <= _BUSBW_FIELD or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    try:
        return NcclRow(int(fields[0]), float(fields[_BUSBW_FIELD]))
    except ValueError:
        return None


def parse(text: str) -> NcclResult:
    """The footer's average bus bandwidth and out-of-bounds count, the ranks and the table's rows."""
    avg = _AVG_RE.search(text)
    if avg is None:
        raise NcclOutputError("no '# Avg bus bandwidth' line: the run did not finish, or this is not nccl-tests output")
    try:
        value = float(avg["value"])
    except ValueError:
        raise NcclOutputError(f"'# Avg bus bandwidth : {avg['value']}' is not a number") from None
    oob = _OOB_RE.search(text)
    rows = [row for line in text.splitlines() if not line.lstrip().startswith("#") and (row := _row(line))]
    return NcclResult(
        avg_busbw=value,
        out_of_bounds=int(oob["count"]) if oob else None,
        ranks=len(_RANK_RE.findall(text)),
        rows=rows,
    )


def judge(result: NcclResult, *, min_busbw: float, gpus: int) -> tuple[bool, str]:
    """Whether a run passes: no out-of-bounds values, every GPU a rank, average bus bandwidth ≥ ``min_busbw``."""
    problems = []
    if result.out_of_bounds is None:
        problems.append("no '# Out of bounds values' line (results unchecked)")
    elif result.out_of_bounds:
        problems.append(f"{result.out_of_bounds} out-of-bounds values (wrong results)")
    if result.ranks and result.ranks != gpus:
        problems.append(f"ran on {result.ranks} GPUs, the node has {gpus}")
    if math.isnan(result.avg_busbw) or result.avg_busbw < min_busbw:
        problems.append(f"average bus bandwidth {result.avg_busbw:g} GB/s is below the threshold {min_busbw:g} GB/s")
    peak = result.peak
    facts = f"average bus bandwidth {result.avg_busbw:g} GB/s (threshold {min_busbw:g} GB/s)"
    if peak is not None:
        facts += f", peak {peak.busbw:g} GB/s at {peak.size_bytes} B"
    facts += f", {result.ranks or '?'} ranks"
    if problems:
        return False, "; ".join(problems) + f" [{facts}]"
    return True, f"{facts}, 0 out-of-bounds values"
