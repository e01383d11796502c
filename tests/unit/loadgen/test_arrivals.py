"""Poisson arrival schedules: determinism per seed, mean rate, shape."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.kernel.arrivals import mean_rate_per_s, poisson_offsets_ns


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


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), rate=st.floats(0.05, 5000.0), cv=st.floats(0.1, 8.0), n=st.integers(2, 300))
def test_gamma_same_seed_same_schedule(seed: int, rate: float, cv: float, n: int) -> None:
    from cluster.kernel.arrivals import gamma_offsets_ns

    a = gamma_offsets_ns(n, rate, cv, np.random.default_rng(seed))
    assert a.dtype == np.int64 and len(a) == n and a[0] == 0
    assert np.array_equal(a, gamma_offsets_ns(n, rate, cv, np.random.default_rng(seed)))
    assert np.all(np.diff(a) >= 0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rate=st.floats(0.1, 10000.0), cv=st.floats(0.2, 3.0))
def test_gamma_mean_rate_and_burstiness_are_the_declared_ones(seed: int, rate: float, cv: float) -> None:
    from cluster.kernel.arrivals import gamma_offsets_ns

    n = 40_001
    offsets = gamma_offsets_ns(n, rate, cv, np.random.default_rng(seed))
    # 40,000 gaps of relative std cv: the mean's relative error is cv/200 (at most 1.5 %); 6 sigma
    assert mean_rate_per_s(offsets) == pytest.approx(rate, rel=max(0.01, 6 * cv / 200))
    gaps = np.diff(offsets).astype(float)
    # the coefficient of variation of the gaps is the declared one (sub-ns gaps at high rates round: small slack)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_gamma_arrivals_in_the_spec_and_run_keys(tmp_path: object) -> None:
    from pydantic import ValidationError

    from cluster.plan.runs import load_points
    from cluster.kernel.runs import LoadPoint
    from cluster.config.load import LoadSpec
    from cluster.config.loader import parse_spec_text

    with pytest.raises(ValidationError, match="gamma arrivals need arrival_cv"):
        LoadSpec.model_validate({"request_rate": [2.0], "arrival": "gamma"})
    with pytest.raises(ValidationError, match="arrival_cv is for arrival: gamma"):
        LoadSpec.model_validate({"request_rate": [2.0], "arrival_cv": 2.0})
    text = ("version: 1\nname: e\nmodel: {path: sim://m, engine: sim}\nvariants: [{name: b}]\n"
            "workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 4}]\nload: {request_rate: [2.0]%s}\n")
    pts = load_points(parse_spec_text(text % ", arrival: gamma, arrival_cv: 2.5"))
    assert pts == [LoadPoint("rate", 2.0, None, 2.5)] and pts[0].label == "r2 gamma cv 2.5"
    # a Poisson point hashes as it did before gamma existed (resumable datasets keep their run keys)
    assert load_points(parse_spec_text(text % ""))[0].identity() == {"kind": "rate", "value": 2.0,
                                                                     "max_concurrency": None}
