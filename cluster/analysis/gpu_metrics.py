"""Per-run GPU figures from a run's `gpu_metrics` samples: energy, J per output token, tok/s per watt, clocks, throttle.

Each declared once in cluster/analysis/metric_catalog.py (stored as `m_<name>` in `runs`). The window is
[0, duration_s] on the requests' clock; samples just outside it bracket its ends. Definitions:

- gpu_energy_j: Σ over the server's GPUs of the energy counter interpolated linearly at the window's end minus at its
  start; where a GPU has no energy counter (pre-Volta, or a sampler without one), the trapezoid integral of its
  power samples over the window instead.
- gpu_power_w_mean = gpu_energy_j / duration_s: the mean total power of the server's GPUs.
- energy_j_per_output_token = gpu_energy_j / Σ output tokens of ok requests (output_tok_s × duration_s).
- output_tok_s_per_w = output_tok_s / gpu_power_w_mean (= output tokens per joule).
- sm_clock_mhz_mean / _min / _p10: over the BUSY samples inside the window (`busy_samples`, below): the clocks
  the GPUs ran the work at. Idle samples are left out: a GPU drops to its idle clock between requests, and a
  variant that finishes its requests sooner spends more of the window there, so a mean over every sample would mark
  a faster variant as "ran at other clocks" although nothing throttled. None when no sample inside is busy.
- gpu_temperature_c_max: the hottest sample inside the window.
- gpu_throttled: 1.0 when any sample inside the window carries a thermal or power clock-event reason
  (telemetry/readings.py THERMAL_REASONS, POWER_REASONS), else 0.0; gpu_throttled_share: the share of such samples.
- gpu_samples: sample rows (GPUs × instants) inside the window.
None where there are no samples (no telemetry) or the inputs are missing.

The busy predicate, one definition (`busy_samples`): a sample reports on the interval since its GPU's previous
sample (NVML's utilisation and the mean power are over it, and a clock falls to idle within it); it is busy when
1. the run's request records are given: requests were in flight (from a request's actual send to its last chunk)
   for at least BUSY_IN_FLIGHT_SHARE of that interval, and
2. its clock-event reasons do not say the GPU was idle (REASON_GPU_IDLE; a GPU waiting on the host is not running
   the variant's kernels, whatever the client has in flight).
Without request records, utilisation at or above BUSY_UTIL_PCT_FLOOR stands in for 1; without either, only 2.
A GPU's first sample reports on the median spacing of its samples.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from cluster.kernel.records import Records
from cluster.kernel.run_row import GPU_METRIC_NAMES
from cluster.telemetry.readings import REASON_GPU_IDLE

BUSY_IN_FLIGHT_SHARE = 0.5
"""A sample is busy when requests were in flight for at least this share of the interval it reports on: a sample
mostly inside a gap between requests reports the idle clock, one mostly inside a request the clock the work ran at."""
BUSY_UTIL_PCT_FLOOR = 50
"""Without request records, a sample is busy when its GPU utilisation (share of the interval a kernel ran) is at
least this, percent."""


def _trapezoid(y: np.ndarray, t: np.ndarray) -> float:
    return float(np.sum((y[1:] + y[:-1]) * np.diff(t)) / 2.0)


def _window_integral(t_s: np.ndarray, y: np.ndarray, end_s: float) -> Optional[float]:
    """∫ y dt over [0, end_s] by the trapezoid rule on the samples, clipped (and interpolated) at the ends."""
    if t_s.size < 2 or t_s[0] > 0 or t_s[-1] < end_s:
        inside = (t_s >= 0) & (t_s <= end_s)
        if inside.sum() < 2:
            return None
        t_s, y = t_s[inside], y[inside]
        return float(_trapezoid(y, t_s) * end_s / (t_s[-1] - t_s[0])) if t_s[-1] > t_s[0] else None
    grid = np.concatenate(([0.0], t_s[(t_s > 0) & (t_s < end_s)], [end_s]))
    return float(_trapezoid(np.interp(grid, t_s, y), grid))


def _counter_delta(t_s: np.ndarray, e_j: np.ndarray, end_s: float) -> Optional[float]:
    """Energy counter at end_s minus at 0, interpolated; extrapolated by the mean rate when the samples fall short."""
    if t_s.size < 2 or t_s[-1] <= t_s[0]:
        return None
    if t_s[0] <= 0 and t_s[-1] >= end_s:
        return float(np.interp(end_s, t_s, e_j) - np.interp(0.0, t_s, e_j))
    rate = (e_j[-1] - e_j[0]) / (t_s[-1] - t_s[0])
    return float(rate * end_s)


def _in_flight_cumulative(requests: Records) -> tuple[np.ndarray, np.ndarray]:
    """(x_s, y_s): seconds with a request in flight up to time x, as breakpoints of a piecewise-linear function
    (np.interp), from the union of the requests' [actual send, last chunk] intervals (first chunk where there is no
    last; a request that never answered counts no time)."""
    send = requests.column("actual_send_ns").to_pylist()
    first = requests.column("first_chunk_ns").to_pylist()
    last = requests.column("last_chunk_ns").to_pylist()
    spans = sorted((s / 1e9, (e if e is not None else f) / 1e9) for s, f, e in zip(send, first, last)
                   if s is not None and (e if e is not None else f) is not None and (e if e is not None else f) > s)
    merged: list[list[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    xs: list[float] = []
    ys: list[float] = []
    total = 0.0
    for a, b in merged:
        xs += [a, b]
        ys += [total, total + b - a]
        total += b - a
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def busy_samples(t_s: np.ndarray, gpus: np.ndarray, reasons: np.ndarray, util_pct: np.ndarray,
                 requests: Optional[Records]) -> np.ndarray:
    """Which samples are busy: THE busy predicate (module docstring). `reasons` and `util_pct` hold -1 where a
    sample did not record them."""
    not_idle = (reasons < 0) | ((reasons & REASON_GPU_IDLE) == 0)
    if requests is None or not requests.num_rows:
        by_util: np.ndarray = not_idle & ((util_pct < 0) | (util_pct >= BUSY_UTIL_PCT_FLOOR))
        return by_util
    xs, ys = _in_flight_cumulative(requests)
    start = np.empty_like(t_s)
    for g in set(gpus.tolist()):
        sel = np.flatnonzero(gpus == g)
        order = sel[np.argsort(t_s[sel], kind="stable")]
        t = t_s[order]
        gaps = np.diff(t)
        first_gap = float(np.median(gaps)) if gaps.size else 0.0
        start[order] = np.concatenate(([t[0] - first_gap], t[:-1])) if t.size else t
    if not xs.size:
        return np.zeros(t_s.shape, dtype=bool)
    covered = np.interp(t_s, xs, ys) - np.interp(start, xs, ys)
    span = t_s - start
    inside_now = np.interp(t_s + 1e-12, xs, ys) > np.interp(t_s, xs, ys)  # a zero-length interval: the instant
    share = np.where(span > 0, covered / np.where(span > 0, span, 1.0), inside_now.astype(np.float64))
    busy: np.ndarray = not_idle & (share >= BUSY_IN_FLIGHT_SHARE)
    return busy


def summarize_gpu(samples: Optional[pa.Table], duration_s: float, output_tok_s: Optional[float],
                  requests: Optional[Records] = None) -> dict[str, Optional[float]]:
    """Every metric of GPU_METRIC_NAMES for one run (see the module docstring); `requests`: the run's request
    records, which say when the GPUs were busy (else their utilisation does)."""
    out: dict[str, Optional[float]] = {n: None for n in GPU_METRIC_NAMES}
    if samples is None or not samples.num_rows or duration_s <= 0:
        return out
    cols = samples.select(["t_ns", "gpu", "power_w", "energy_j", "sm_clock_mhz", "temperature_c",
                           "throttle_thermal", "throttle_power", "clock_event_reasons", "gpu_util_pct"]).to_pydict()
    t_s = np.asarray(cols["t_ns"], dtype=np.float64) / 1e9
    gpus = np.asarray(cols["gpu"], dtype=object)
    inside = (t_s >= 0) & (t_s <= duration_s)
    out["gpu_samples"] = float(inside.sum())

    def floats(name: str) -> np.ndarray:
        return np.asarray([np.nan if v is None else float(v) for v in cols[name]], dtype=np.float64)

    power, energy = floats("power_w"), floats("energy_j")
    total: Optional[float] = 0.0
    for g in sorted(set(gpus.tolist())):
        sel = gpus == g
        order = np.argsort(t_s[sel], kind="stable")
        tg, eg, pg = t_s[sel][order], energy[sel][order], power[sel][order]
        has_e = ~np.isnan(eg)
        part = _counter_delta(tg[has_e], eg[has_e], duration_s) if has_e.sum() >= 2 else None
        if part is None:
            has_p = ~np.isnan(pg)
            part = _window_integral(tg[has_p], pg[has_p], duration_s)
        total = None if part is None or total is None else total + part
    if total is not None:
        power_w = total / duration_s
        out["gpu_energy_j"], out["gpu_power_w_mean"] = total, power_w
        tokens = output_tok_s * duration_s if output_tok_s else 0.0
        out["energy_j_per_output_token"] = total / tokens if tokens > 0 else None
        out["output_tok_s_per_w"] = output_tok_s / power_w if output_tok_s and power_w > 0 else None
    reasons = np.asarray([-1 if v is None else int(v) for v in cols["clock_event_reasons"]], dtype=np.int64)
    util = np.asarray([-1 if v is None else int(v) for v in cols["gpu_util_pct"]], dtype=np.int64)
    busy = busy_samples(t_s, gpus, reasons, util, requests)
    sm = floats("sm_clock_mhz")[inside & busy]
    sm = sm[~np.isnan(sm)]
    if sm.size:
        out["sm_clock_mhz_mean"], out["sm_clock_mhz_min"] = float(sm.mean()), float(sm.min())
        out["sm_clock_mhz_p10"] = float(np.percentile(sm, 10))
    temp = floats("temperature_c")[inside]
    temp = temp[~np.isnan(temp)]
    if temp.size:
        out["gpu_temperature_c_max"] = float(temp.max())
    flags = (np.asarray([bool(x) for x in cols["throttle_thermal"]]) |
             np.asarray([bool(x) for x in cols["throttle_power"]]))[inside]
    if flags.size:
        out["gpu_throttled"] = 1.0 if flags.any() else 0.0
        out["gpu_throttled_share"] = float(flags.mean())
    return out


def throttle_summary(samples: Optional[pa.Table], duration_s: float) -> dict[str, int]:
    """reason name → samples inside the window that carried it (for provenance and compare's warning)."""
    from cluster.telemetry.readings import reason_names

    if samples is None or not samples.num_rows:
        return {}
    counts: dict[str, int] = {}
    end_ns = int(duration_s * 1e9)
    for t, r in zip(samples.column("t_ns").to_pylist(), samples.column("clock_event_reasons").to_pylist()):
        if 0 <= t <= end_ns:
            for name in reason_names(r):
                counts[name] = counts.get(name, 0) + 1
    return counts
