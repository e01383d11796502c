"""Hierarchical bootstrap confidence intervals, speedup ratios and significance over benchmark repeats."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np

StatFn = Callable[[np.ndarray], float]
Stat = str | StatFn

DEFAULT_REPEATS = 5
DEFAULT_N_BOOT = 2000
MIN_REPEATS_FOR_CLAIM = 3
HIGH_RUN_CV = 0.10

VERDICT_FASTER = "faster"
VERDICT_SLOWER = "slower"
VERDICT_NO_DIFFERENCE = "no significant difference"
VERDICT_INSUFFICIENT = "insufficient repeats"

_QUANTILES = {"p50": 0.50, "median": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99, "p999": 0.999}
# Replicates are drawn in chunks so that one chunk's resampled values stay around 32 MiB.
_MAX_CHUNK_ELEMS = 1 << 22


@dataclass(frozen=True)
class Estimate:
    """A statistic with its confidence interval; lo/hi are NaN when no honest interval exists."""

    point: float
    lo: float
    hi: float
    n_runs: int
    n_requests: int
    method: str


@dataclass(frozen=True)
class RatioEstimate:
    """Speedup of B over A (> 1 means B is better), its interval, p-value and verdict."""

    point: float
    lo: float
    hi: float
    significant: bool
    verdict: str
    p_value: float
    n_runs_a: int
    n_runs_b: int
    method: str
    p_adjusted: float = math.nan


def _stat_name(stat: Stat) -> str:
    return stat if isinstance(stat, str) else getattr(stat, "__name__", "callable")


def _check_stat(stat: Stat) -> None:
    if isinstance(stat, str) and stat != "mean" and stat not in _QUANTILES:
        known = ", ".join(["mean", *_QUANTILES])
        raise ValueError(f"stat: unknown statistic {stat!r}; expected one of {known} or a callable")


def _as_runs(runs: Sequence[np.ndarray] | Sequence[Sequence[float]], what: str = "runs") -> list[np.ndarray]:
    if len(runs) == 0:
        raise ValueError(f"{what}: expected at least one run, got none")
    out: list[np.ndarray] = []
    for i, run in enumerate(runs):
        arr = np.asarray(run, dtype=np.float64).ravel()
        if arr.size == 0:
            raise ValueError(f"{what}[{i}]: run has no values; drop empty runs or fix the measurement")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{what}[{i}]: values must be finite (filter failed requests before estimating)")
        out.append(arr)
    return out


def _stat_rows(samples: np.ndarray, counts: np.ndarray | None, stat: Stat) -> np.ndarray:
    """Statistic of each row; when counts (valid entries per row) is given, padded entries hold +inf."""
    if counts is None:
        if stat == "mean":
            return np.asarray(samples.mean(axis=1), dtype=np.float64)
        if isinstance(stat, str):
            return np.asarray(np.quantile(samples, _QUANTILES[stat], axis=1), dtype=np.float64)
        return np.array([float(stat(row)) for row in samples])
    if stat == "mean":
        return np.asarray(np.where(np.isinf(samples), 0.0, samples).sum(axis=1) / counts, dtype=np.float64)
    if isinstance(stat, str):
        ordered = np.sort(samples, axis=1)
        # numpy's default "linear" quantile, with a per-row sample size
        h = (counts - 1) * _QUANTILES[stat]
        lo_idx = np.floor(h).astype(np.int64)
        hi_idx = np.minimum(lo_idx + 1, counts - 1)
        lo_v = np.take_along_axis(ordered, lo_idx[:, None], axis=1)[:, 0]
        hi_v = np.take_along_axis(ordered, hi_idx[:, None], axis=1)[:, 0]
        return np.asarray(lo_v + (h - lo_idx) * (hi_v - lo_v), dtype=np.float64)
    return np.array([float(stat(row[np.isfinite(row)])) for row in samples])


def _point(runs: list[np.ndarray], stat: Stat) -> float:
    pooled = np.concatenate(runs)
    return float(_stat_rows(pooled[None, :], None, stat)[0])


def _replicates(runs: list[np.ndarray], stat: Stat, choice: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Statistic of each two-stage resample: choice[b] are the runs drawn, then requests within each."""
    sizes = np.array([r.size for r in runs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(runs)
    n_boot, k = choice.shape
    width = int(sizes.max())
    chunk = max(1, _MAX_CHUNK_ELEMS // (k * width))
    equal = bool(np.all(sizes == sizes[0]))
    out = np.empty(n_boot, dtype=np.float64)
    for start in range(0, n_boot, chunk):
        ch = choice[start : start + chunk]
        n_chosen = sizes[ch][:, :, None]
        if width == 1:
            local = np.zeros((ch.shape[0], k, 1), dtype=np.int64)
        elif equal:
            local = rng.integers(0, width, size=(ch.shape[0], k, width))
        else:
            local = np.minimum((rng.random((ch.shape[0], k, width)) * n_chosen).astype(np.int64), n_chosen - 1)
        values = flat[offsets[ch][:, :, None] + local]
        counts: np.ndarray | None = None
        if not equal:
            values[np.arange(width)[None, None, :] >= n_chosen] = np.inf
            counts = n_chosen[:, :, 0].sum(axis=1)
        out[start : start + ch.shape[0]] = _stat_rows(values.reshape(ch.shape[0], k * width), counts, stat)
    return out


def _t_abs_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer df (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        total, term = 1.0, 1.0
        for k in range(1, (df - 3) // 2 + 1):
            term *= (2 * k) / (2 * k + 1) * c2
            total += term
        return (2 / math.pi) * (theta + (s * math.cos(theta) * total if df > 1 else 0.0))
    total, term = 1.0, 1.0
    for k in range(1, (df - 2) // 2 + 1):
        term *= (2 * k - 1) / (2 * k) * c2
        total += term
    return s * total


def t_quantile(p: float, df: float) -> float:
    """Upper quantile t such that P(T <= t) = p (p >= 0.5); df is floored to an integer (conservative)."""
    d = max(1, int(math.floor(df)))
    target = 2 * p - 1
    if d > 1000:
        return NormalDist().inv_cdf(p)
    if d == 1:
        return math.tan(math.pi * target / 2)
    lo, hi = 0.0, 1.0
    while _t_abs_cdf(hi, d) < target:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_abs_cdf(mid, d) < target else (lo, mid)
    return (lo + hi) / 2


def expansion_factor(n_runs: int, level: float, df: float | None = None) -> float:
    """How much the percentile interval's arms are widened for n_runs top-level units (>= 1)."""
    p = (1 + level) / 2
    dof = n_runs - 1 if df is None else df
    return math.sqrt(n_runs / (n_runs - 1)) * t_quantile(p, dof) / NormalDist().inv_cdf(p)


def _interval(point: float, reps: np.ndarray, n_runs: int, level: float, df: float | None, log: bool) -> tuple[float, float]:
    c = expansion_factor(n_runs, level, df)
    centre, r = (math.log(point), np.log(reps)) if log else (point, reps)
    q_lo, q_hi = np.quantile(r, [(1 - level) / 2, (1 + level) / 2])
    arm_lo, arm_hi = c * max(centre - float(q_lo), 0.0), c * max(float(q_hi) - centre, 0.0)
    if not log:
        return centre - arm_lo, centre + arm_hi
    # zero arms return the point itself, so constant data gives an exactly zero-width interval; an arm past what a
    # float holds (a level near 1 at one degree of freedom: _p_value's bisection asks for those) is unbounded
    return (point * math.exp(-arm_lo) if arm_lo else point,
            (point * math.exp(arm_hi) if arm_hi < _MAX_EXP else math.inf) if arm_hi else point)


_MAX_EXP = math.log(sys.float_info.max)
"""The largest x whose exp(x) is a finite float (about 709.8)."""


def hierarchical_bootstrap(
    runs: Sequence[np.ndarray] | Sequence[Sequence[float]],
    stat: Stat = "mean",
    n_boot: int = DEFAULT_N_BOOT,
    *,
    rng: np.random.Generator,
    level: float = 0.95,
) -> Estimate:
    """CI of a statistic of the pooled requests, resampling runs then requests within each drawn run.

    One run gives no interval (lo = hi = NaN): run-to-run variance cannot be estimated from it.
    """
    _check_stat(stat)
    rs = _as_runs(runs)
    k, n_req = len(rs), sum(r.size for r in rs)
    point = _point(rs, stat)
    if k == 1:
        return Estimate(point, math.nan, math.nan, 1, n_req, "single run: no interval (run-to-run variance unknown)")
    reps = _replicates(rs, stat, rng.integers(0, k, size=(n_boot, k)), rng)
    log = point > 0 and bool(np.all(reps > 0))
    lo, hi = _interval(point, reps, k, level, None, log)
    return Estimate(point, lo, hi, k, n_req, f"hierarchical bootstrap, expanded percentile ({n_boot} resamples)")


def run_level_bootstrap(
    values: Sequence[float] | np.ndarray,
    stat: Stat = "mean",
    n_boot: int = DEFAULT_N_BOOT,
    *,
    rng: np.random.Generator,
    level: float = 0.95,
) -> Estimate:
    """CI of a statistic over one summary value per run (e.g. throughput per run)."""
    vals = np.asarray(values, dtype=np.float64).ravel()
    return hierarchical_bootstrap([vals[i : i + 1] for i in range(vals.size)], stat, n_boot, rng=rng, level=level)


def _verdict(lo: float, hi: float) -> tuple[bool, str]:
    if lo > 1.0:
        return True, VERDICT_FASTER
    if hi < 1.0:
        return True, VERDICT_SLOWER
    return False, VERDICT_NO_DIFFERENCE


def _p_value(point: float, reps: np.ndarray, n_runs: int, df: float, n_boot: int) -> float:
    """Smallest 1 - level at which the (log-space) interval excludes 1.0, found by bisection."""
    if point == 1.0:
        return 1.0
    floor = 1.0 / n_boot  # the bootstrap cannot resolve smaller p-values

    def excludes(level: float) -> bool:
        lo, hi = _interval(point, reps, n_runs, level, df, True)
        return lo > 1.0 or hi < 1.0

    lo_l, hi_l = 1e-6, 1.0 - floor
    if not excludes(lo_l):
        return 1.0
    if excludes(hi_l):
        return floor
    for _ in range(30):
        mid = (lo_l + hi_l) / 2
        lo_l, hi_l = (mid, hi_l) if excludes(mid) else (lo_l, mid)
    return max(floor, 1.0 - lo_l)


def ratio_estimate(
    a_runs: Sequence[np.ndarray] | Sequence[Sequence[float]],
    b_runs: Sequence[np.ndarray] | Sequence[Sequence[float]],
    stat: Stat = "mean",
    n_boot: int = DEFAULT_N_BOOT,
    *,
    higher_is_better: bool,
    rng: np.random.Generator,
    level: float = 0.95,
    paired: bool = False,
) -> RatioEstimate:
    """Speedup of B over A: stat(B)/stat(A) if higher_is_better (throughput) else stat(A)/stat(B) (latency).

    Each side is resampled hierarchically; paired=True draws the same repeat indices for both sides
    (valid when repeat i of A and B share prompts and arrival schedule).
    """
    _check_stat(stat)
    ra, rb = _as_runs(a_runs, "a_runs"), _as_runs(b_runs, "b_runs")
    ka, kb = len(ra), len(rb)
    pa, pb = _point(ra, stat), _point(rb, stat)
    if pa <= 0 or pb <= 0:
        raise ValueError(f"stat {_stat_name(stat)}: a speedup needs positive values on both sides, got {pa} and {pb}")
    sign = 1.0 if higher_is_better else -1.0
    point = math.exp(sign * (math.log(pb) - math.log(pa)))
    if paired and ka != kb:
        raise ValueError(f"paired: needs the same number of repeats on both sides, got {ka} and {kb}")
    if ka < 2 or kb < 2:
        return RatioEstimate(point, math.nan, math.nan, False, VERDICT_INSUFFICIENT, math.nan, ka, kb,
                             "no interval: a side has one run (run-to-run variance unknown)")
    choice_a = rng.integers(0, ka, size=(n_boot, ka))
    choice_b = choice_a if paired else rng.integers(0, kb, size=(n_boot, kb))
    reps_a, reps_b = _replicates(ra, stat, choice_a, rng), _replicates(rb, stat, choice_b, rng)
    if np.any(reps_a <= 0) or np.any(reps_b <= 0):
        raise ValueError(f"stat {_stat_name(stat)}: resampled values reached zero; a ratio is undefined here")
    log_reps = sign * (np.log(reps_b) - np.log(reps_a))
    if paired:
        n_runs, df = ka, float(ka - 1)
        method = "paired hierarchical bootstrap, expanded percentile on log ratio"
    else:
        va, vb = float(np.var(np.log(reps_a))), float(np.var(np.log(reps_b)))
        # Welch-Satterthwaite degrees of freedom from each side's bootstrap variance
        denom = va**2 / (ka - 1) + vb**2 / (kb - 1)
        df = (va + vb) ** 2 / denom if denom > 0 else float(ka + kb - 2)
        n_runs = min(ka, kb)
        method = "independent hierarchical bootstraps, expanded percentile on log ratio (Welch df)"
    reps = np.exp(log_reps)
    lo, hi = _interval(point, reps, n_runs, level, df, True)
    significant, verdict = _verdict(lo, hi)
    p = _p_value(point, reps, n_runs, df, n_boot)
    return RatioEstimate(point, lo, hi, significant, verdict, p, ka, kb, method + f" ({n_boot} resamples)")


def holm_adjust(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (NaN entries stay NaN and do not count towards the family)."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adjusted, 1.0)
    return out


def bonferroni_level(level: float, n_comparisons: int) -> float:
    """Per-comparison confidence level that keeps the family-wise level under Bonferroni."""
    return 1.0 - (1.0 - level) / max(1, n_comparisons)


def adjust_family(estimates: Sequence[RatioEstimate], level: float = 0.95) -> list[RatioEstimate]:
    """Re-decide significance across a family of comparisons with Holm's method at 1 - level."""
    adj = holm_adjust([e.p_value for e in estimates])
    out: list[RatioEstimate] = []
    for e, pa in zip(estimates, adj, strict=True):
        if math.isnan(pa):
            out.append(replace(e, p_adjusted=pa))
            continue
        significant = bool(e.significant and pa < 1.0 - level)
        verdict = e.verdict if significant or not e.significant else VERDICT_NO_DIFFERENCE
        out.append(replace(e, significant=significant, verdict=verdict, p_adjusted=float(pa)))
    return out


def quality_warnings(
    runs: Sequence[np.ndarray] | Sequence[Sequence[float]],
    stat: Stat = "mean",
    *,
    cv_threshold: float = HIGH_RUN_CV,
) -> list[str]:
    """Plain-language reasons a claim about this statistic over these runs is weak."""
    _check_stat(stat)
    rs = _as_runs(runs)
    k, name = len(rs), _stat_name(stat)
    warnings: list[str] = []
    if k == 1:
        warnings.append(f"{name}: 1 repeat: run-to-run variance cannot be estimated, no interval is given; "
                        f"use {DEFAULT_REPEATS} repeats for a claim")
    elif k < MIN_REPEATS_FOR_CLAIM:
        warnings.append(f"{name}: only {k} repeats: the interval is very wide; use {DEFAULT_REPEATS} repeats for a claim")
    if isinstance(stat, str) and stat in _QUANTILES:
        q = _QUANTILES[stat]
        need = math.ceil(1.0 / (1.0 - q) - 1e-9)
        short = min(r.size for r in rs)
        if short < need:
            warnings.append(f"{name}: a run has only {short} requests; a {name} needs at least {need} per run")
    if k >= 2:
        per_run = np.array([_point([r], stat) for r in rs])
        mean = float(np.mean(per_run))
        if mean != 0:
            cv = float(np.std(per_run, ddof=1) / abs(mean))
            if cv > cv_threshold:
                warnings.append(f"{name}: run-to-run CV {cv:.0%} exceeds {cv_threshold:.0%}: the system is noisy "
                                "across restarts; differences smaller than this need many repeats")
    return warnings
