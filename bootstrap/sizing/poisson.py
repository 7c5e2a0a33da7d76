"""Poisson distribution helpers: the peak of a random (Poisson) arrival process at a percentile."""

from __future__ import annotations

import math

#: Below mean - this many standard deviations the Poisson mass is < 1e-40: summing may start there.
_SKIP_SIGMAS = 14.0


def poisson_cdf(k: int, mean: float) -> float:
    """P(X <= k) for X ~ Poisson(mean)."""
    if mean < 0:
        raise ValueError(f"Poisson mean must be >= 0, got {mean}")
    if k < 0:
        return 0.0
    if mean == 0:
        return 1.0
    start = _start(mean)
    if k < start:
        # Far in the left tail: sum the few terms directly in log space.
        return math.fsum(math.exp(_log_pmf(i, mean)) for i in range(k + 1))
    total, term = 0.0, math.exp(_log_pmf(start, mean))
    for i in range(start, k + 1):
        total += term
        term *= mean / (i + 1)
    return min(total, 1.0)


def poisson_quantile(p: float, mean: float) -> int:
    """Smallest k with P(X <= k) >= p for X ~ Poisson(mean) (the p-th percentile of the peak)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"percentile must be in [0, 1), got {p}")
    if mean < 0 or not math.isfinite(mean):
        raise ValueError(f"Poisson mean must be a finite number >= 0, got {mean}")
    if mean == 0:
        return 0
    k = _start(mean)
    term = math.exp(_log_pmf(k, mean))
    total = term  # the mass below the start is negligible (< 1e-40)
    while total < p:
        term *= mean / (k + 1)
        k += 1
        total += term
        if term == 0.0 and k > mean:  # rounding: the tail is exhausted, the remaining mass is < 1 ulp
            break
    return k


def _start(mean: float) -> int:
    return max(0, math.floor(mean - _SKIP_SIGMAS * math.sqrt(mean) - 1))


def _log_pmf(k: int, mean: float) -> float:
    return k * math.log(mean) - mean - math.lgamma(k + 1)
