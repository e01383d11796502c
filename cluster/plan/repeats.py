"""Repeats until sure: from a load point's recorded values, whether to measure another repeat and why (the stop
rule), and the bound `repeats: {until, min, max}` puts on an experiment's runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from cluster.config.repeats import RepeatsUntil
from cluster.kernel.stats import DEFAULT_N_BOOT, run_level_bootstrap

INTERVAL_LEVEL = 0.95
INTERVAL_SEED = 0
"""The interval is `results compare`'s for a per-run metric (run-level bootstrap, DEFAULT_N_BOOT resamples, seed 0:
its defaults), so the half-width the rule stops at is the one compare then shows."""

STOP_NARROW = "narrow"
STOP_MAX = "max"
GO_BELOW_MIN = "below min"
GO_TOO_WIDE = "too wide"


@dataclass(frozen=True)
class RepeatDecision:
    """The stop rule's answer for one point: stop or measure another repeat, why, and the figures it judged."""

    stop: bool
    reason: str
    """narrow (the interval reached the target), max (repeats ran out), below min, too wide."""
    repeats_done: int
    """Repeats measured (attempted), ok or not."""
    ok_values: int
    """Repeats whose value counts (ok runs)."""
    half_width_pct: Optional[float]
    """Half the 95 % interval's width in percent of the mean (None below 2 values or with a zero mean)."""
    target_pct: float

    def describe(self, metric: str) -> str:
        hw = "no interval yet" if self.half_width_pct is None else f"±{self.half_width_pct:.2f} %"
        what = {STOP_NARROW: "stopped: the interval is narrow enough", STOP_MAX: "stopped at max repeats",
                GO_BELOW_MIN: "going on: fewer ok repeats than min", GO_TOO_WIDE: "going on: the interval is wider "
                "than the target"}[self.reason]
        return (f"{what} ({self.ok_values} ok of {self.repeats_done} repeats; 95 % interval of {metric} {hw}, "
                f"target ±{self.target_pct:g} %)")


def half_width_pct(values: Sequence[float]) -> Optional[float]:
    """Half the width of the 95 % interval of the mean of `values`, in percent of the mean."""
    if len(values) < 2:
        return None
    est = run_level_bootstrap(list(values), "mean", DEFAULT_N_BOOT, rng=np.random.default_rng(INTERVAL_SEED),
                              level=INTERVAL_LEVEL)
    if est.point == 0 or not math.isfinite(est.lo) or not math.isfinite(est.hi):
        return None
    return 100.0 * (est.hi - est.lo) / 2 / abs(est.point)


def decide(values: Sequence[float], repeats_done: int, rule: RepeatsUntil) -> RepeatDecision:
    """Stop once at least `min` ok values give a half-width at or under the target, or `max` repeats are done;
    otherwise measure another repeat. `values`: the ok repeats' metric values; repeats_done counts every repeat
    measured (a failed or invalid one uses up a repeat without a value)."""
    hw = half_width_pct(values)
    target = rule.until.half_width_pct
    narrow = len(values) >= rule.min and hw is not None and hw <= target

    def answer(stop: bool, reason: str) -> RepeatDecision:
        return RepeatDecision(stop, reason, repeats_done, len(values), hw, target)

    if narrow:
        return answer(True, STOP_NARROW)
    if repeats_done >= rule.max:
        return answer(True, STOP_MAX)
    return answer(False, GO_BELOW_MIN if len(values) < rule.min else GO_TOO_WIDE)


@dataclass(frozen=True)
class PointRepeats:
    """One load point's repeats until sure as the experiment's facts record them (experiment.json)."""

    variant: str
    workload: str
    load: str
    metric: str
    stopped: bool
    reason: str
    repeats_done: int
    ok_repeats: int
    half_width_pct: Optional[float]
    target_half_width_pct: float
    min: int
    max: int


@dataclass(frozen=True)
class RepeatsBound:
    """What `repeats: {until}` may add to a plan: runs planned now (min per point) and at most (max per point)."""

    points: int
    planned_runs: int
    most_runs: int


def repeats_bound(rule: RepeatsUntil, planned_runs: int) -> RepeatsBound:
    """Every point is planned with `min` repeats and gets at most `max`."""
    points = planned_runs // rule.min
    return RepeatsBound(points, planned_runs, points * rule.max)
