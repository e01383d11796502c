"""Simulation: hierarchical intervals cover a known truth on restarted, correlated runs; request-level ones do not.

Run as a script for the tables in docs/statistics.md:  python tests/unit/kernel/test_stats_coverage.py
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pytest

from cluster.kernel.stats import DEFAULT_REPEATS, hierarchical_bootstrap, ratio_estimate

TRIALS = 200
N_BOOT = 1000
SPEEDUP = 1.25


@dataclass(frozen=True)
class Process:
    """Latency of request j in repeat r: base_s * exp(u_r + e_rj), u_r ~ N(0, run_sd^2) once per server start,
    e_r an AR(1) series with coefficient phi and stationary sd req_sd (neighbouring requests share load)."""

    base_s: float = 0.050
    run_sd: float = 0.08
    req_sd: float = 0.25
    phi: float = 0.8

    def true_mean_s(self) -> float:
        return self.base_s * math.exp((self.run_sd**2 + self.req_sd**2) / 2)

    def true_quantile_s(self, q: float) -> float:
        return self.base_s * math.exp(NormalDist().inv_cdf(q) * math.hypot(self.run_sd, self.req_sd))

    def scaled(self, factor: float) -> Process:
        return Process(self.base_s * factor, self.run_sd, self.req_sd, self.phi)


def simulate(p: Process, rng: np.random.Generator, trials: int, repeats: int, n_requests: int) -> np.ndarray:
    """Latencies in seconds, shape (trials, repeats, n_requests)."""
    offsets = rng.normal(0.0, p.run_sd, size=(trials, repeats, 1))
    shocks = rng.normal(0.0, p.req_sd * math.sqrt(1 - p.phi**2), size=(trials, repeats, n_requests))
    e = np.empty_like(shocks)
    e[..., 0] = rng.normal(0.0, p.req_sd, size=(trials, repeats))
    for j in range(1, n_requests):
        e[..., j] = p.phi * e[..., j - 1] + shocks[..., j]
    return p.base_s * np.exp(offsets + e)


def request_level_interval(values: np.ndarray, stat: str, rng: np.random.Generator, n_boot: int) -> tuple[float, float]:
    """The wrong method: pool every request as if independent and take a plain percentile interval."""
    idx = rng.integers(0, values.size, size=(n_boot, values.size))
    res = values[idx]
    reps = res.mean(axis=1) if stat == "mean" else np.quantile(res, 0.99, axis=1)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return float(lo), float(hi)


def coverage_study(p: Process, trials: int, repeats: int, n_requests: int, n_boot: int, seed: int) -> dict[str, float]:
    """Fractions over trials: interval covers truth (mean, p99, speedup), A/A not significant, naive coverage."""
    rng = np.random.default_rng(seed)
    a = simulate(p, rng, trials, repeats, n_requests)
    a2 = simulate(p, rng, trials, repeats, n_requests)
    b = simulate(p.scaled(1 / SPEEDUP), rng, trials, repeats, n_requests)
    truth_mean, truth_p99 = p.true_mean_s(), p.true_quantile_s(0.99)
    hits = {k: 0 for k in ("mean", "p99", "speedup_mean", "speedup_p99", "aa_not_significant",
                           "naive_mean", "naive_p99")}
    width = ratio_width = 0.0
    for t in range(trials):
        em = hierarchical_bootstrap(list(a[t]), "mean", n_boot, rng=rng)
        hits["mean"] += em.lo <= truth_mean <= em.hi
        width += (em.hi - em.lo) / 2 / em.point
        ep = hierarchical_bootstrap(list(a[t]), "p99", n_boot, rng=rng)
        hits["p99"] += ep.lo <= truth_p99 <= ep.hi
        rm = ratio_estimate(list(a[t]), list(b[t]), "mean", n_boot, higher_is_better=False, rng=rng)
        hits["speedup_mean"] += rm.lo <= SPEEDUP <= rm.hi
        ratio_width += math.log(rm.hi / rm.lo) / 2
        rp = ratio_estimate(list(a[t]), list(b[t]), "p99", n_boot, higher_is_better=False, rng=rng)
        hits["speedup_p99"] += rp.lo <= SPEEDUP <= rp.hi
        aa = ratio_estimate(list(a[t]), list(a2[t]), "mean", n_boot, higher_is_better=False, rng=rng)
        hits["aa_not_significant"] += not aa.significant
        lo, hi = request_level_interval(a[t].ravel(), "mean", rng, n_boot)
        hits["naive_mean"] += lo <= truth_mean <= hi
        lo, hi = request_level_interval(a[t].ravel(), "p99", rng, n_boot)
        hits["naive_p99"] += lo <= truth_p99 <= hi
    out = {k: v / trials for k, v in hits.items()}
    out["mean_rel_halfwidth"] = width / trials
    out["speedup_log_halfwidth"] = ratio_width / trials
    return out


@pytest.fixture(scope="module")
def study() -> dict[str, float]:
    start = time.perf_counter()
    res = coverage_study(Process(), TRIALS, DEFAULT_REPEATS, 200, N_BOOT, seed=20240601)
    res["seconds"] = time.perf_counter() - start
    print(f"\ncoverage study ({TRIALS} trials, {DEFAULT_REPEATS} repeats x 200 requests): {res}")
    return res


def test_truth_matches_a_very_large_sample() -> None:
    p = Process()
    big = simulate(p, np.random.default_rng(7), 1, 4000, 1000).ravel()
    assert np.mean(big) == pytest.approx(p.true_mean_s(), rel=0.01)
    assert np.quantile(big, 0.99) == pytest.approx(p.true_quantile_s(0.99), rel=0.02)


def test_mean_interval_covers_truth(study: dict[str, float]) -> None:
    assert 0.90 <= study["mean"] <= 0.99


def test_p99_interval_covers_truth(study: dict[str, float]) -> None:
    assert 0.90 <= study["p99"] <= 0.99


def test_speedup_interval_covers_truth(study: dict[str, float]) -> None:
    assert 0.90 <= study["speedup_mean"] <= 0.99
    assert 0.90 <= study["speedup_p99"] <= 0.99


def test_a_a_comparison_is_not_significant(study: dict[str, float]) -> None:
    assert study["aa_not_significant"] >= 0.95


def test_request_level_resampling_fails_coverage(study: dict[str, float]) -> None:
    # pooling requests as independent ignores restarts and within-run correlation: far too narrow
    assert study["naive_mean"] < 0.80
    assert study["naive_p99"] < 0.80


def main(argv: list[str]) -> None:
    trials = int(argv[1]) if len(argv) > 1 else TRIALS
    regimes = {
        "default (restart sd 8%, AR(1) 0.8)": Process(),
        "restart-dominated (sd 15%, AR 0.5)": Process(run_sd=0.15, phi=0.5),
        "independent requests, no restart effect": Process(run_sd=0.0, phi=0.0),
    }
    for name, p in regimes.items():
        for k in (2, 3, 5, 10):
            start = time.perf_counter()
            r = coverage_study(p, trials, k, 200, N_BOOT, seed=1000 + k)
            cells = "  ".join(f"{key}={val:.3f}" for key, val in r.items())
            print(f"{name:42s} repeats={k:2d}  {cells}  ({time.perf_counter() - start:.0f}s)", flush=True)


if __name__ == "__main__":
    main(sys.argv)
