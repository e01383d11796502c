"""Poisson arrival schedules: determinism per seed, mean rate, shape."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.loadgen.arrivals import mean_rate_per_s, poisson_offsets_ns


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), rate=st.floats(0.05, 5000.0), n=st.integers(2, 300))
def test_same_seed_same_schedule(seed: int, rate: float, n: int) -> None:
    a = poisson_offsets_ns(n, rate, np.random.default_rng(seed))
    b = poisson_offsets_ns(n, rate, np.random.default_rng(seed))
    assert a.dtype == np.int64
    assert len(a) == n
    assert a[0] == 0
    assert np.array_equal(a, b)
    assert np.all(np.diff(a) >= 0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rate=st.floats(0.1, 10000.0))
def test_mean_rate_close_to_configured(seed: int, rate: float) -> None:
    n = 40_001
    offsets = poisson_offsets_ns(n, rate, np.random.default_rng(seed))
    # 40,000 exponential gaps: relative std of the mean is 0.5 %; 3 % is > 6 sigma
    assert mean_rate_per_s(offsets) == pytest.approx(rate, rel=0.03)
    gaps = np.diff(offsets)
    # exponential gaps: coefficient of variation ~1 (a fixed-interval schedule would give 0)
    assert 0.9 < gaps.std() / gaps.mean() < 1.1


def test_different_seeds_differ() -> None:
    a = poisson_offsets_ns(100, 10.0, np.random.default_rng(1))
    b = poisson_offsets_ns(100, 10.0, np.random.default_rng(2))
    assert not np.array_equal(a, b)


def test_edge_cases() -> None:
    assert len(poisson_offsets_ns(0, 1.0, np.random.default_rng(0))) == 0
    assert poisson_offsets_ns(1, 1.0, np.random.default_rng(0)).tolist() == [0]
    with pytest.raises(ValueError, match="rate"):
        poisson_offsets_ns(10, 0.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match=">= 0"):
        poisson_offsets_ns(-1, 1.0, np.random.default_rng(0))
