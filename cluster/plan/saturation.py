"""Over-saturation on a load sweep, defined once: TTFT and queueing grow together while throughput stops growing.

A pure predicate over two measured points of one variant and workload, the lower load first (compare and report mark
points with it, the capacity search stops doubling on it, the driver skips a variant's higher points on it when
`load.stop_when_saturated`). From the lower point to the higher one, with the load grown by g = higher / lower - 1:

- throughput stopped growing: output tok/s grew by less than THROUGHPUT_GAIN_SHARE x g (a server with room grows it
  by about g);
- TTFT grew: the median TTFT grew by at least TTFT_GROWTH;
- queueing grew: the mean requests in flight (Σ E2E / window, SGLang's `concurrency`, GuideLLM's over-saturation
  signal) grew by at least IN_FLIGHT_GROWTH. By Little's law, in-flight requests that grow while throughput does not
  are requests waiting: in a closed loop the offered concurrency grows them, in an open loop the queue does.
All three must hold; a point missing a figure is never marked (not judged). The reason names every figure's growth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

THROUGHPUT_GAIN_SHARE = 0.25
"""Throughput 'stopped growing' when it grew by less than a quarter of the load's growth (+25 % for a doubling)."""

TTFT_GROWTH = 0.5
"""TTFT 'grew' when its median rose by at least half (requests wait for a slot before their prefill)."""

IN_FLIGHT_GROWTH = 0.1
"""Queueing 'grew' when the mean requests in flight rose by at least a tenth."""


@dataclass(frozen=True)
class SweepPoint:
    """One measured load point of a sweep (one variant, workload and load kind): the figures the predicate reads."""

    load: float
    output_tps: Optional[float]
    ttft_ms_p50: Optional[float]
    in_flight_mean: Optional[float]
    """Mean requests in flight over the window (the runs table's m_concurrency_mean)."""


def _known(x: Optional[float]) -> bool:
    return x is not None and math.isfinite(x)


def _mean(xs: Sequence[Optional[float]]) -> Optional[float]:
    known = [float(x) for x in xs if x is not None and _known(float(x))]
    return sum(known) / len(known) if known else None


def point_of(load: float, output_tps: Sequence[Optional[float]], ttft_ms_p50: Sequence[Optional[float]],
             in_flight_mean: Sequence[Optional[float]]) -> SweepPoint:
    """A load point from its ok runs' stored figures (the runs table's m_output_tok_s, m_ttft_ms_p50,
    m_concurrency_mean, one entry per run): each the mean over the runs that have it."""
    return SweepPoint(float(load), _mean(output_tps), _mean(ttft_ms_p50), _mean(in_flight_mean))


def _growth(lo: float, hi: float) -> float:
    return hi / lo - 1 if lo > 0 else math.inf


def saturation(lower: SweepPoint, higher: SweepPoint, label: str = "") -> Optional[str]:
    """Why `higher` is over-saturated against `lower` (the reason, every figure's growth), or None when it is not
    (or cannot be judged: a figure missing, or the load did not grow)."""
    figures = (lower.output_tps, higher.output_tps, lower.ttft_ms_p50, higher.ttft_ms_p50, lower.in_flight_mean,
               higher.in_flight_mean)
    if not all(_known(x) for x in figures) or not higher.load > lower.load > 0:
        return None
    assert lower.output_tps is not None and higher.output_tps is not None
    assert lower.ttft_ms_p50 is not None and higher.ttft_ms_p50 is not None
    assert lower.in_flight_mean is not None and higher.in_flight_mean is not None
    load_g = _growth(lower.load, higher.load)
    tps_g = _growth(lower.output_tps, higher.output_tps)
    ttft_g = _growth(lower.ttft_ms_p50, higher.ttft_ms_p50)
    flight_g = _growth(lower.in_flight_mean, higher.in_flight_mean)
    if not (tps_g < THROUGHPUT_GAIN_SHARE * load_g and ttft_g >= TTFT_GROWTH and flight_g >= IN_FLIGHT_GROWTH):
        return None
    name = label or f"{lower.load:g}"
    return (f"saturated past {name}: load {load_g:+.0%}, output tok/s {tps_g:+.0%} (< {THROUGHPUT_GAIN_SHARE:.0%} of "
            f"the load's growth), TTFT p50 {ttft_g:+.0%} (>= {TTFT_GROWTH:+.0%}), in flight {flight_g:+.0%} "
            f"(>= {IN_FLIGHT_GROWTH:+.0%})")


def sweep_saturation(points: Sequence[SweepPoint], prefix: str = "") -> list[Optional[str]]:
    """Per point of one sweep (any order), why it is over-saturated against the next lower measured point, or None
    (`prefix` + the lower load names it in the reason: 'c' gives 'saturated past c4'). A point above a saturated one
    is judged on its own step: a sweep can only be read point to point."""
    order = sorted(range(len(points)), key=lambda i: points[i].load)
    out: list[Optional[str]] = [None] * len(points)
    for a, b in zip(order, order[1:]):
        out[b] = saturation(points[a], points[b], f"{prefix}{points[a].load:g}")
    return out


def first_saturated(points: Sequence[SweepPoint], prefix: str = "") -> Optional[tuple[float, str]]:
    """The lowest load of a sweep marked saturated, with its reason (None: none is)."""
    marked = [(p.load, r) for p, r in zip(points, sweep_saturation(points, prefix)) if r is not None]
    return min(marked) if marked else None


def skip_reason(load: float, points: Sequence[SweepPoint], prefix: str = "") -> Optional[str]:
    """Why `load.stop_when_saturated` skips a point at `load` given its sweep's measured points (one variant,
    workload and load kind): a lower measured point is over-saturated against the one under it, so the server only
    queues from there on. None: measure it."""
    got = first_saturated(points, prefix)
    if got is None or not load > got[0]:
        return None
    return f"not measured (load.stop_when_saturated): above {prefix}{got[0]:g}, {got[1]}"
