"""Length distributions: seeded, within [min, max], the declared mean and spread, prefix-stable; the spec's checks;
and their use by prompt sources (random-id input lengths, per-request max_tokens)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cluster.loadgen.prompt_sources import build_prompt_sequence, build_prompts
from cluster.loadgen.lengths import draw_lengths
from cluster.config.workload import LengthDist, WorkloadSpec


@st.composite
def dists(draw: st.DrawFn) -> LengthDist:
    kind = draw(st.sampled_from(["uniform", "normal", "lognormal"]))
    lo = draw(st.integers(1, 5000))
    hi = draw(st.integers(lo, lo + 20000))
    if kind == "uniform":
        return LengthDist(dist="uniform", min=lo, max=hi)
    mean = draw(st.floats(1.0, 30000.0))
    std = draw(st.floats(0.0, 10000.0))
    return LengthDist(dist=kind, mean=mean, std=std, min=lo, max=hi)


@settings(max_examples=60, deadline=None)
@given(d=dists(), seed=st.integers(0, 2**63 - 1), n=st.integers(0, 400))
def test_same_seed_same_lengths_within_bounds(d: LengthDist, seed: int, n: int) -> None:
    a = draw_lengths(d, n, np.random.default_rng(seed))
    b = draw_lengths(d, n, np.random.default_rng(seed))
    assert a.dtype == np.int64 and len(a) == n
    assert np.array_equal(a, b)
    assert np.all(a >= d.min) and np.all(a <= d.max)
    # the first k draws do not depend on how many are drawn (one draw per request, clipped, never redrawn)
    k = n // 2
    assert np.array_equal(draw_lengths(d, k, np.random.default_rng(seed)), a[:k])


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["normal", "lognormal"]), mean=st.floats(200.0, 4000.0), cv=st.floats(0.05, 0.8),
       seed=st.integers(0, 2**32 - 1))
def test_mean_and_std_are_the_declared_ones_when_bounds_do_not_bite(kind: str, mean: float, cv: float,
                                                                     seed: int) -> None:
    std = mean * cv
    # bounds far out in the tails (lognormal: its right tail is heavy, so 60 std out): clipping is negligible
    d = LengthDist(dist=kind, mean=mean, std=std, min=1, max=int(mean + 60 * std))
    x = draw_lengths(d, 40_000, np.random.default_rng(seed)).astype(float)
    if kind == "normal" and mean - 4 * std < 1:
        return  # the lower clip at 1 would bite
    # 40,000 draws: the standard error of the mean is std/200; 6 of them plus rounding
    assert abs(x.mean() - mean) < 6 * std / 200 + 1
    assert x.std() == pytest.approx(std, rel=0.1, abs=1.0)


@settings(max_examples=20, deadline=None)
@given(lo=st.integers(1, 100), width=st.integers(0, 50), seed=st.integers(0, 2**32 - 1))
def test_uniform_covers_every_value_inclusive(lo: int, width: int, seed: int) -> None:
    d = LengthDist(dist="uniform", min=lo, max=lo + width)
    x = draw_lengths(d, 200 * (width + 1), np.random.default_rng(seed))
    assert set(x.tolist()) == set(range(lo, lo + width + 1))


def test_fixed_count_is_repeated() -> None:
    assert draw_lengths(7, 3, np.random.default_rng(0)).tolist() == [7, 7, 7]


@pytest.mark.parametrize("raw, fragment", [
    ({"dist": "normal", "mean": 100, "min": 1, "max": 200}, "needs 'std'"),
    ({"dist": "uniform", "mean": 100, "min": 1, "max": 200}, "'mean' is not used"),
    ({"dist": "lognormal", "mean": 100, "std": 5, "min": 300, "max": 200}, "max 200 is below min 300"),
    ({"dist": "gamma", "mean": 100, "std": 5, "min": 1, "max": 200}, "'uniform', 'normal' or 'lognormal'"),
])
def test_bad_distributions_are_refused(raw: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        WorkloadSpec.model_validate({"name": "w", "input_tokens": raw, "output_tokens": 8, "num_requests": 4})


def test_random_ids_draw_input_lengths_and_budgets(tmp_path: pathlib.Path) -> None:
    wl = WorkloadSpec.model_validate({
        "name": "w", "num_requests": 50, "input_tokens": {"dist": "lognormal", "mean": 64, "std": 30, "min": 8,
                                                          "max": 256},
        "output_tokens": {"dist": "normal", "mean": 32, "std": 8, "min": 4, "max": 64}})
    ps = build_prompts(wl, 50, 5, tmp_path)
    lens = [len(p.input_ids or ()) for p in ps]
    assert all(8 <= k <= 256 for k in lens) and len(set(lens)) > 10
    assert all(p.max_tokens is not None and 4 <= p.max_tokens <= 64 for p in ps)
    assert build_prompt_sequence(wl, 50, 5, tmp_path) == ps  # the array form is only for fixed lengths
    assert wl.input_tokens_max() == 256 and wl.input_tokens_nominal() == 64 and wl.output_tokens_nominal() == 32
    # the output budgets come from their own stream: a fixed-output twin sends the very same prompts
    fixed = wl.model_copy(update={"output_tokens": 32})
    assert [p.input_ids for p in build_prompts(fixed, 50, 5, tmp_path)] == [p.input_ids for p in ps]
