"""Unit tests for cluster.kernel.stats: determinism, degenerate data, ratios, multiple comparisons, warnings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cluster.kernel import stats
from cluster.kernel.stats import (
    VERDICT_FASTER,
    VERDICT_INSUFFICIENT,
    VERDICT_NO_DIFFERENCE,
    VERDICT_SLOWER,
    RatioEstimate,
    adjust_family,
    bonferroni_level,
    expansion_factor,
    hierarchical_bootstrap,
    holm_adjust,
    quality_warnings,
    ratio_estimate,
    run_level_bootstrap,
    t_quantile,
)


def _runs(seed: int, k: int = 5, n: int = 200, sizes: list[int] | None = None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = sizes or [n] * k
    return [rng.lognormal(math.log(0.05) + rng.normal(0, 0.05), 0.3, size=s) for s in sizes]


def test_same_seed_same_answer_different_seed_different_answer() -> None:
    runs = _runs(1)
    a = hierarchical_bootstrap(runs, "p99", 500, rng=np.random.default_rng(3))
    b = hierarchical_bootstrap(runs, "p99", 500, rng=np.random.default_rng(3))
    c = hierarchical_bootstrap(runs, "p99", 500, rng=np.random.default_rng(4))
    assert a == b
    assert (a.lo, a.hi) != (c.lo, c.hi)
    assert a.point == c.point == pytest.approx(np.quantile(np.concatenate(runs), 0.99))


@pytest.mark.parametrize("stat", ["mean", "p50", "p90", "p99"])
def test_all_equal_values_give_zero_width_interval(stat: str) -> None:
    runs = [np.full(120, 0.25) for _ in range(5)]
    e = hierarchical_bootstrap(runs, stat, 300, rng=np.random.default_rng(0))
    assert e.point == e.lo == e.hi == pytest.approx(0.25)
    assert (e.n_runs, e.n_requests) == (5, 600)


def test_constant_unequal_runs_and_zero_values_are_handled() -> None:
    e = hierarchical_bootstrap([np.zeros(3), np.zeros(7)], "p90", 200, rng=np.random.default_rng(0))
    assert e.point == e.lo == e.hi == 0.0


@pytest.mark.parametrize("sizes", [None, [150, 200, 260, 90, 200]])
def test_named_quantile_matches_callable_path(sizes: list[int] | None) -> None:
    # the vectorised (equal and padded) quantile code must agree with numpy on each resample
    runs = _runs(2, sizes=sizes)

    def p99(x: np.ndarray) -> float:
        return float(np.quantile(x, 0.99))

    named = hierarchical_bootstrap(runs, "p99", 300, rng=np.random.default_rng(9))
    called = hierarchical_bootstrap(runs, p99, 300, rng=np.random.default_rng(9))
    assert (named.point, named.lo, named.hi) == pytest.approx((called.point, called.lo, called.hi), rel=1e-12)


def test_mean_with_unequal_runs_matches_callable_path() -> None:
    runs = _runs(5, sizes=[10, 40, 25])
    named = hierarchical_bootstrap(runs, "mean", 300, rng=np.random.default_rng(1))
    called = hierarchical_bootstrap(runs, lambda x: float(np.mean(x)), 300, rng=np.random.default_rng(1))
    assert (named.lo, named.hi) == pytest.approx((called.lo, called.hi), rel=1e-12)
    assert named.point == pytest.approx(np.mean(np.concatenate(runs)))


def test_chunked_replicates_give_a_sane_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(3)
    whole = hierarchical_bootstrap(runs, "mean", 2000, rng=np.random.default_rng(0))
    monkeypatch.setattr(stats, "_MAX_CHUNK_ELEMS", 1000 * 7)  # 7 replicates per chunk
    chunked = hierarchical_bootstrap(runs, "mean", 2000, rng=np.random.default_rng(0))
    assert chunked.point == whole.point
    assert chunked.lo == pytest.approx(whole.lo, rel=0.01)
    assert chunked.hi == pytest.approx(whole.hi, rel=0.01)


def test_interval_contains_point_and_narrows_with_repeats() -> None:
    few = hierarchical_bootstrap(_runs(4, k=2), "mean", 1000, rng=np.random.default_rng(0))
    many = hierarchical_bootstrap(_runs(4, k=10), "mean", 1000, rng=np.random.default_rng(0))
    for e in (few, many):
        assert e.lo < e.point < e.hi
    assert (few.hi - few.lo) / few.point > 3 * (many.hi - many.lo) / many.point


def test_single_run_gives_no_interval() -> None:
    e = hierarchical_bootstrap([np.arange(1.0, 101.0)], "mean", rng=np.random.default_rng(0))
    assert e.point == pytest.approx(50.5)
    assert math.isnan(e.lo) and math.isnan(e.hi)
    assert e.n_runs == 1 and "single run" in e.method


@pytest.mark.parametrize(
    ("runs", "message"),
    [([], "at least one run"), ([np.array([1.0]), np.array([])], r"runs\[1\]: run has no values"),
     ([np.array([1.0, np.nan])], "must be finite")],
)
def test_bad_input_raises_clear_error(runs: list[np.ndarray], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        hierarchical_bootstrap(runs, "mean", rng=np.random.default_rng(0))


def test_unknown_stat_is_rejected() -> None:
    with pytest.raises(ValueError, match="stat: unknown statistic 'p77'"):
        hierarchical_bootstrap([np.ones(3)], "p77", rng=np.random.default_rng(0))


def test_run_level_bootstrap_is_one_value_per_run() -> None:
    e = run_level_bootstrap([10.0, 11.0, 9.0, 10.5, 9.5], rng=np.random.default_rng(0))
    assert e.point == pytest.approx(10.0)
    assert e.n_runs == 5 and e.n_requests == 5
    # expanded interval is close to the t interval mean +- t_4 * s / sqrt(5) = 10 +- 0.98
    assert e.lo == pytest.approx(9.02, abs=0.2)
    assert e.hi == pytest.approx(10.98, abs=0.2)
    flat = run_level_bootstrap([3.0, 3.0, 3.0], rng=np.random.default_rng(0))
    assert flat.lo == flat.hi == 3.0
    with pytest.raises(ValueError, match="at least one run"):
        run_level_bootstrap([], rng=np.random.default_rng(0))


def test_t_quantiles_match_tables() -> None:
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert t_quantile(0.975, 9) == pytest.approx(2.2622, abs=1e-4)
    assert t_quantile(0.995, 30) == pytest.approx(2.7500, abs=1e-4)
    assert t_quantile(0.975, 4.9) == t_quantile(0.975, 4)  # fractional df floored: conservative
    assert expansion_factor(5, 0.95) == pytest.approx(math.sqrt(5 / 4) * 2.7764 / 1.95996, rel=1e-4)


def test_ratio_of_identical_inputs_is_not_significant() -> None:
    runs = _runs(6)
    r = ratio_estimate(runs, runs, "p99", 1000, higher_is_better=False, rng=np.random.default_rng(0))
    assert r.point == 1.0
    assert r.lo < 1.0 < r.hi
    assert not r.significant and r.verdict == VERDICT_NO_DIFFERENCE
    assert r.p_value == 1.0
    flat = [np.full(50, 2.0)] * 3
    rf = ratio_estimate(flat, flat, "mean", 200, higher_is_better=True, rng=np.random.default_rng(0))
    assert (rf.point, rf.lo, rf.hi, rf.significant) == (1.0, 1.0, 1.0, False)


def test_ratio_direction_and_verdicts() -> None:
    a = _runs(7)
    b = [x * 0.5 for x in a]  # half the latency
    lat = ratio_estimate(a, b, "mean", 1000, higher_is_better=False, rng=np.random.default_rng(0))
    assert lat.point == pytest.approx(2.0)
    assert lat.lo > 1.0 and lat.significant and lat.verdict == VERDICT_FASTER
    assert lat.p_value < 0.01
    tput = ratio_estimate(a, b, "mean", 1000, higher_is_better=True, rng=np.random.default_rng(0))
    assert tput.point == pytest.approx(0.5)
    assert tput.hi < 1.0 and tput.verdict == VERDICT_SLOWER


def test_paired_ratio_removes_shared_repeat_effects() -> None:
    rng = np.random.default_rng(11)
    shared = [rng.normal(0, 0.3) for _ in range(5)]  # same prompts/schedule per repeat: large shared effect
    a = [np.exp(s + rng.normal(0, 0.05, 100)) for s in shared]
    b = [np.exp(s + math.log(0.9) + rng.normal(0, 0.05, 100)) for s in shared]
    paired = ratio_estimate(a, b, "mean", 1000, higher_is_better=False, rng=np.random.default_rng(0), paired=True)
    unpaired = ratio_estimate(a, b, "mean", 1000, higher_is_better=False, rng=np.random.default_rng(0))
    assert paired.verdict == VERDICT_FASTER
    assert (paired.hi - paired.lo) < 0.25 * (unpaired.hi - unpaired.lo)
    with pytest.raises(ValueError, match="paired: needs the same number of repeats"):
        ratio_estimate(a, b[:4], "mean", higher_is_better=False, rng=np.random.default_rng(0), paired=True)


def test_ratio_with_one_run_is_insufficient() -> None:
    r = ratio_estimate([np.ones(10)], _runs(1), "mean", higher_is_better=False, rng=np.random.default_rng(0))
    assert math.isnan(r.lo) and math.isnan(r.hi) and math.isnan(r.p_value)
    assert not r.significant and r.verdict == VERDICT_INSUFFICIENT


def test_ratio_rejects_non_positive_statistics() -> None:
    with pytest.raises(ValueError, match="positive values"):
        ratio_estimate([np.zeros(5)] * 3, [np.ones(5)] * 3, "mean", higher_is_better=True, rng=np.random.default_rng(0))


def test_holm_adjust_known_values() -> None:
    adj = holm_adjust([0.01, 0.04, 0.03, 0.005, math.nan])
    assert adj[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(adj[4])
    assert holm_adjust([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert bonferroni_level(0.95, 5) == pytest.approx(0.99)


def test_adjust_family_demotes_marginal_wins() -> None:
    def est(p: float, verdict: str) -> RatioEstimate:
        return RatioEstimate(1.1, 1.01, 1.2, True, verdict, p, 5, 5, "test")

    strong, marginal, other = adjust_family(
        [est(0.001, VERDICT_FASTER), est(0.04, VERDICT_FASTER), est(0.045, VERDICT_SLOWER)])
    assert strong.significant and strong.verdict == VERDICT_FASTER and strong.p_adjusted == pytest.approx(0.003)
    assert not marginal.significant and marginal.verdict == VERDICT_NO_DIFFERENCE
    assert marginal.p_adjusted == pytest.approx(0.08) and other.p_adjusted == pytest.approx(0.08)
    alone, = adjust_family([est(0.04, VERDICT_FASTER)])
    assert alone.significant and alone.p_adjusted == pytest.approx(0.04)
    # a 0.04 becomes 0.04*2 = 0.08 > 0.05 once it shares the family with a second 0.04
    _, second = adjust_family([est(0.04, VERDICT_FASTER), est(0.04, VERDICT_SLOWER)])
    assert second.p_adjusted == pytest.approx(0.08) and not second.significant


def test_quality_warnings() -> None:
    assert quality_warnings(_runs(8), "mean") == []
    one = quality_warnings(_runs(8, k=1), "mean")
    assert len(one) == 1 and "cannot be estimated" in one[0]
    two = quality_warnings(_runs(8, k=2), "mean")
    assert any("very wide" in w for w in two)
    short = quality_warnings(_runs(8, n=50), "p99")
    assert any("needs at least 100 per run" in w for w in short)
    assert not any("needs at least" in w for w in quality_warnings(_runs(8, n=50), "p90"))
    noisy = quality_warnings([np.full(20, 1.0), np.full(20, 1.5), np.full(20, 0.7)], "mean")
    assert any("run-to-run CV" in w for w in noisy)


def test_a_log_interval_arm_past_a_float_is_unbounded_not_an_overflow() -> None:
    """_p_value's bisection asks for levels near 1 at one degree of freedom; with a wide replicate spread the upper
    arm passes exp's range. It raised OverflowError ('math range error'), which ended `sglbench run` of
    experiments/thinking-sim.yaml in its per-category summary with exit 70."""
    import math

    import numpy as np

    from cluster.kernel.stats import _interval, _p_value

    lo, hi = _interval(1.5, np.array([0.5, 1.2, 1.5, 3.0, 50.0]), 2, 1 - 1e-6, 1.0, True)
    assert 0 <= lo < 1.5 and hi == math.inf
    assert 0 < _p_value(1.0001, np.array([1.0001] * 1999 + [1e9]), 2, 1.0, 2000) <= 1.0
