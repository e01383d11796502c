"""The speedup model: per variant, the verify-step cost and TTFT as lines in the running batch (and input length),
with the measured acceptance, predicting each NEXTN depth's throughput speedup over the baseline at any closed-loop
load; and its leave-one-out error on the measured points (docs/speedup-model.md).

Pure functions over `RunPoint`s (one per ok run). Per variant, by ordinary least squares over its runs:

    step_ms(b, L) = a + c·b (+ g·L)          step_ms = TPOT mean × accept length (1 without speculation)
    ttft_ms(b, L) = a' + c'·b (+ g'·L)       b = running batch (m_concurrency_mean), L = mean input tokens

L enters only where the variant's runs have more than one input length (and the design stays of full rank). A
request of n output tokens takes E2E = TTFT + (n − 1)·step/A, A the variant's measured acceptance length on the
workload; at a closed-loop concurrency c every variant runs b = c requests, so its output tok/s is c·n/E2E and the
speedup of a depth over the baseline is E2E_baseline / E2E_depth. Uncertainty: the fits' standard errors of the
fitted values, combined in quadrature (acceptance taken as exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

MIN_CONCURRENCIES = 2
"""Distinct offered concurrencies a variant needs for a line in b: repeats at one concurrency differ in running batch
by noise only, and a line through noise predicts nothing."""


@dataclass(frozen=True)
class RunPoint:
    """One ok run as the model reads it; times in ms, lengths in tokens."""

    variant: str
    depth: Optional[int]
    """NEXTN draft steps; None without speculation."""
    workload: str
    load_value: float
    """The closed-loop concurrency the run offered."""
    running_batch: float
    """Requests in flight on average over the window (m_concurrency_mean)."""
    input_tokens: float
    output_tokens: float
    step_ms: float
    """Time of one decode (verify) step: TPOT mean × accept length."""
    ttft_ms: float
    accept_length: float
    """Tokens per verify step after the prefill token (1.0 without speculation)."""
    output_tok_s: float


@dataclass(frozen=True)
class LinearFit:
    """y = coef · x over the named regressors ('1', 'b', 'L'); cov is None when no residual degree of freedom."""

    names: tuple[str, ...]
    coef: tuple[float, ...]
    cov: Optional[tuple[tuple[float, ...], ...]]

    def predict(self, b: float, input_tokens: float) -> tuple[float, float]:
        """(fitted value, its standard error; NaN when the fit has no residual degree of freedom)."""
        x = np.array(_row(self.names, b, input_tokens))
        y = float(np.dot(np.array(self.coef), x))
        if self.cov is None:
            return y, math.nan
        return y, float(math.sqrt(max(0.0, float(x @ np.array(self.cov) @ x))))


def _row(names: Sequence[str], b: float, input_tokens: float) -> list[float]:
    return [{"1": 1.0, "b": b, "L": input_tokens}[n] for n in names]


def fit_linear(names: Sequence[str], bs: Sequence[float], lengths: Sequence[float], ys: Sequence[float]) -> LinearFit:
    """Least squares of ys on the regressors `names`; the covariance is s²(XᵀX)⁻¹ with s² = RSS / (n − k)."""
    x = np.array([_row(names, b, n) for b, n in zip(bs, lengths)], dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    coef, _, _, _ = np.linalg.lstsq(x, y, rcond=None)
    dof = len(y) - len(names)
    cov = None
    if dof > 0:
        rss = float(((y - x @ coef) ** 2).sum())
        cov = tuple(tuple(float(v) for v in r) for r in (rss / dof) * np.linalg.inv(x.T @ x))
    return LinearFit(tuple(names), tuple(float(c) for c in coef), cov)


@dataclass(frozen=True)
class VariantModel:
    """One variant's fitted step cost and TTFT, and its measured acceptance per workload."""

    variant: str
    depth: Optional[int]
    step: LinearFit
    ttft: LinearFit
    accept: Mapping[str, float]
    """workload -> mean accept length over the variant's runs of it (1.0 without speculation)."""
    accept_all: float
    """The mean over all its runs, for a workload it has no run of."""

    def e2e_ms(self, workload: str, b: float, input_tokens: float, output_tokens: float) -> tuple[float, float]:
        """(predicted E2E of one request in ms, its standard error)."""
        a = self.accept.get(workload, self.accept_all)
        step, step_se = self.step.predict(b, input_tokens)
        ttft, ttft_se = self.ttft.predict(b, input_tokens)
        k = max(0.0, output_tokens - 1.0) / a
        return ttft + k * step, math.sqrt(ttft_se ** 2 + (k * step_se) ** 2)


def fit_variant(points: Sequence[RunPoint]) -> tuple[Optional[VariantModel], str]:
    """The model of one variant's runs, or (None, why not)."""
    if not points:
        return None, "no ok run"
    first = points[0]
    bs = [p.running_batch for p in points]
    if len({p.load_value for p in points}) < MIN_CONCURRENCIES:
        return None, f"{first.variant} ran at one concurrency only (needs {MIN_CONCURRENCIES}+)"
    lengths = [p.input_tokens for p in points]
    names: tuple[str, ...] = ("1", "b")
    if len({round(n) for n in lengths}) > 1:
        x = np.array([_row(("1", "b", "L"), b, n) for b, n in zip(bs, lengths)])
        if np.linalg.matrix_rank(x) == 3:
            names = ("1", "b", "L")
    step = fit_linear(names, bs, lengths, [p.step_ms for p in points])
    ttft = fit_linear(names, bs, lengths, [p.ttft_ms for p in points])
    by_wl: dict[str, list[float]] = {}
    for p in points:
        by_wl.setdefault(p.workload, []).append(p.accept_length)
    accept = {w: float(np.mean(v)) for w, v in by_wl.items()}
    return VariantModel(first.variant, first.depth, step, ttft, accept,
                        float(np.mean([p.accept_length for p in points]))), ""


def fit_models(points: Sequence[RunPoint]) -> dict[str, VariantModel]:
    """variant -> its model, for every variant that has one."""
    by_variant: dict[str, list[RunPoint]] = {}
    for p in points:
        by_variant.setdefault(p.variant, []).append(p)
    out = {}
    for v, pts in by_variant.items():
        m, _ = fit_variant(pts)
        if m is not None:
            out[v] = m
    return out


@dataclass(frozen=True)
class Speedup:
    """A predicted speedup over the baseline (variant / baseline output tok/s) and its standard error."""

    value: float
    se: float


def predict_speedup(base: VariantModel, model: VariantModel, workload: str, concurrency: float, input_tokens: float,
                    output_tokens: float) -> Speedup:
    """E2E_baseline / E2E_variant at running batch = `concurrency` (a closed loop below the server's cap)."""
    e0, s0 = base.e2e_ms(workload, concurrency, input_tokens, output_tokens)
    e1, s1 = model.e2e_ms(workload, concurrency, input_tokens, output_tokens)
    if e0 <= 0 or e1 <= 0:
        return Speedup(math.nan, math.nan)
    value = e0 / e1
    return Speedup(value, value * math.sqrt((s0 / e0) ** 2 + (s1 / e1) ** 2))


@dataclass(frozen=True)
class LooError:
    """One measured (workload, load, variant) predicted from a model fitted without that load point's runs."""

    workload: str
    load_value: float
    variant: str
    predicted: float
    measured: float
    """mean output tok/s of the variant's runs at the point over the baseline's."""

    @property
    def error(self) -> float:
        return self.predicted - self.measured


def workload_lengths(points: Sequence[RunPoint]) -> tuple[float, float]:
    """(mean input tokens, mean output tokens) over `points` (one workload's runs at a load)."""
    return float(np.mean([p.input_tokens for p in points])), float(np.mean([p.output_tokens for p in points]))


def leave_one_out(points: Sequence[RunPoint], baseline: str) -> list[LooError]:
    """For each measured (workload, load point): refit every variant without that point's runs, predict each
    non-baseline variant's speedup there, and pair it with the measured one. A point no refit can predict (a
    variant left with one concurrency) is skipped."""
    out: list[LooError] = []
    keys = list(dict.fromkeys((p.workload, p.load_value) for p in points))
    for wl, load in keys:
        here = [p for p in points if (p.workload, p.load_value) == (wl, load)]
        rest = [p for p in points if (p.workload, p.load_value) != (wl, load)]
        base_here = [p for p in here if p.variant == baseline]
        if not base_here:
            continue
        models = fit_models(rest)
        if baseline not in models:
            continue
        length_in, length_out = workload_lengths(base_here)
        base_tps = float(np.mean([p.output_tok_s for p in base_here]))
        for v in dict.fromkeys(p.variant for p in here if p.variant != baseline):
            if v not in models:
                continue
            s = predict_speedup(models[baseline], models[v], wl, load, length_in, length_out)
            measured = float(np.mean([p.output_tok_s for p in here if p.variant == v])) / base_tps
            out.append(LooError(wl, load, v, s.value, measured))
    return out


@dataclass(frozen=True)
class LooSummary:
    """The leave-one-out errors in speedup units (×) and relative to the measured speedup (%)."""

    n: int
    mean_abs: float
    mean_abs_pct: float
    worst: Optional[LooError]


def loo_summary(errors: Sequence[LooError]) -> LooSummary:
    """Mean |predicted − measured|, the mean of |predicted − measured| / measured in %, and the worst point."""
    ok = [e for e in errors if math.isfinite(e.error)]
    if not ok:
        return LooSummary(0, math.nan, math.nan, None)
    worst = max(ok, key=lambda e: abs(e.error))
    return LooSummary(len(ok), float(np.mean([abs(e.error) for e in ok])),
                      float(np.mean([100 * abs(e.error) / e.measured for e in ok])), worst)

