"""Poisson quantile used for peak concurrency: known values and an independent direct-sum oracle."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bootstrap.sizing.poisson import poisson_cdf, poisson_quantile


def direct_cdf(k: int, mean: float) -> float:
    """Textbook sum of e^-m m^i / i! (independent of the implementation's log/recurrence path)."""
    return math.fsum(math.exp(-mean) * mean**i / math.factorial(i) for i in range(k + 1))


@pytest.mark.parametrize(
    ("mean", "p", "expected"),
    [
        # Values of standard Poisson tables (e.g. R's qpois).
        (10, 0.95, 15),
        (100, 0.99, 124),
        (1, 0.5, 1),
        (0.1, 0.9, 0),
        (4, 0.99, 9),
        (20, 0.999, 35),
        (0, 0.99, 0),
    ],
)
def test_known_quantiles(mean: float, p: float, expected: int) -> None:
    assert poisson_quantile(p, mean) == expected


def test_known_cdf_values() -> None:
    assert poisson_cdf(14, 10) == pytest.approx(0.916541527, rel=1e-8)
    assert poisson_cdf(15, 10) == pytest.approx(0.951259597, rel=1e-8)
    assert poisson_cdf(-1, 3) == 0.0


@settings(max_examples=200, deadline=None)
@given(mean=st.floats(0.01, 60), p=st.floats(0.0, 0.9999))
def test_quantile_is_the_smallest_k_reaching_p(mean: float, p: float) -> None:
    k = poisson_quantile(p, mean)
    assume(abs(direct_cdf(k, mean) - p) > 1e-9 and (k == 0 or abs(direct_cdf(k - 1, mean) - p) > 1e-9))
    assert direct_cdf(k, mean) >= p
    assert k == 0 or direct_cdf(k - 1, mean) < p


@settings(max_examples=50, deadline=None)
@given(mean=st.floats(1e3, 1e7), p=st.sampled_from([0.9, 0.99, 0.999]))
def test_large_means_follow_the_normal_approximation(mean: float, p: float) -> None:
    # Cornish-Fisher: mean + z*sqrt(mean) + (z^2 - 1)/6, accurate to well under 2 for these means.
    z = {0.9: 1.2815515655, 0.99: 2.3263478740, 0.999: 3.0902323062}[p]
    approx = mean + z * math.sqrt(mean) + (z * z - 1) / 6
    assert abs(poisson_quantile(p, mean) - approx) < 2


@pytest.mark.parametrize(("p", "mean"), [(1.0, 5), (-0.1, 5), (0.5, -1), (0.5, math.inf)])
def test_bad_arguments(p: float, mean: float) -> None:
    with pytest.raises(ValueError):
        poisson_quantile(p, mean)
