"""Seeded arrival schedules: open-loop Poisson or gamma send offsets, a recorded trace's times rescaled to a rate;
closed loop needs none (send when a slot frees)."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

NS_PER_S = 1_000_000_000


def poisson_offsets_ns(n: int, rate_per_s: float, rng: np.random.Generator) -> np.ndarray:
    """Intended send offsets (int64 ns from window start) of `n` Poisson arrivals at `rate_per_s`.

    The first request is sent at offset 0 (the window starts with a send); request i > 0 is sent after the sum
    of i exponential gaps of mean 1/rate. So the realised rate over the schedule is (n - 1) / offsets[-1].
    The same generator state gives the same schedule, which keeps arrivals identical across variants.
    """
    if n < 0:
        raise ValueError(f"number of arrivals must be >= 0, got {n}")
    if not rate_per_s > 0 or not np.isfinite(rate_per_s):
        raise ValueError(f"request rate must be a positive finite number of requests/s, got {rate_per_s}")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    gaps_ns = rng.exponential(scale=NS_PER_S / rate_per_s, size=n - 1)
    out = np.zeros(n, dtype=np.int64)
    # cumulative sum in float64 then round once, so rounding errors do not accumulate across gaps
    out[1:] = np.rint(np.cumsum(gaps_ns)).astype(np.int64)
    return out


def gamma_offsets_ns(n: int, rate_per_s: float, cv: float, rng: np.random.Generator) -> np.ndarray:
    """Intended send offsets of `n` arrivals whose gaps are gamma-distributed with mean 1/rate and coefficient of
    variation `cv` (shape 1/cv², scale cv²/rate): cv > 1 is bursty, cv < 1 regular. Offsets as poisson_offsets_ns
    (first at 0, cumulative sum rounded once); the same generator state gives the same schedule."""
    if n < 0:
        raise ValueError(f"number of arrivals must be >= 0, got {n}")
    if not rate_per_s > 0 or not np.isfinite(rate_per_s):
        raise ValueError(f"request rate must be a positive finite number of requests/s, got {rate_per_s}")
    if not cv > 0 or not np.isfinite(cv):
        raise ValueError(f"coefficient of variation must be a positive finite number, got {cv}")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    shape = 1.0 / (cv * cv)
    gaps_ns = rng.gamma(shape, scale=NS_PER_S / (rate_per_s * shape), size=n - 1)
    out = np.zeros(n, dtype=np.int64)
    out[1:] = np.rint(np.cumsum(gaps_ns)).astype(np.int64)
    return out


def arrival_offsets_ns(n: int, rate_per_s: float, cv: Optional[float], rng: np.random.Generator) -> np.ndarray:
    """Poisson offsets when `cv` is None, gamma ones otherwise."""
    return poisson_offsets_ns(n, rate_per_s, rng) if cv is None else gamma_offsets_ns(n, rate_per_s, cv, rng)


def mean_rate_per_s(offsets_ns: np.ndarray) -> float:
    """Realised arrival rate of a schedule: (n - 1) gaps over the span from the first to the last send."""
    if len(offsets_ns) < 2 or offsets_ns[-1] <= offsets_ns[0]:
        return 0.0
    return float((len(offsets_ns) - 1) * NS_PER_S / (offsets_ns[-1] - offsets_ns[0]))


def recorded_rate_per_s(arrival_s: Sequence[float]) -> float:
    """The trace stretch's own mean rate: n - 1 gaps over its span."""
    span = arrival_s[-1] - arrival_s[0] if arrival_s else 0.0
    if len(arrival_s) < 2 or span <= 0:
        raise ValueError("a trace stretch needs two or more rows at different times to have a rate")
    return (len(arrival_s) - 1) / span


def trace_offsets_ns(arrival_s: Sequence[float], rate_per_s: float) -> np.ndarray:
    """Send offsets (ns from the first send) of the recorded arrivals rescaled to mean rate `rate_per_s`: every gap
    is multiplied by recorded rate / rate_per_s, so (n - 1) / last offset = rate_per_s exactly."""
    if not rate_per_s > 0:
        raise ValueError(f"rate must be positive, got {rate_per_s}")
    a = np.asarray(arrival_s, dtype=np.float64)
    if a.size == 1:
        return np.zeros(1, dtype=np.int64)
    scale = recorded_rate_per_s(list(a)) / rate_per_s
    out: np.ndarray = np.round((a - a[0]) * scale * 1e9).astype(np.int64)
    return out
