"""Per-run GPU figures from a run's `gpu_metrics` samples: energy, J per output token, tok/s per watt, clocks, throttle.

One definition each (GPU_METRIC_DEFINITIONS; stored as `m_<name>` in `runs`). The window is [0, duration_s] on the
requests' clock; samples just outside it bracket its ends. Definitions:

- gpu_energy_j: Σ over the server's GPUs of the energy counter interpolated linearly at the window's end minus at its
  start; where a GPU has no energy counter (pre-Volta, or a sampler without one), the trapezoid integral of its
  power samples over the window instead.
- gpu_power_w_mean = gpu_energy_j / duration_s: the mean total power of the server's GPUs.
- energy_j_per_output_token = gpu_energy_j / Σ output tokens of ok requests (output_tok_s × duration_s).
- output_tok_s_per_w = output_tok_s / gpu_power_w_mean (= output tokens per joule).
- sm_clock_mhz_mean / _min / _p10: over every GPU's samples inside the window.
- gpu_temperature_c_max: the hottest sample inside the window.
- gpu_throttled: 1.0 when any sample inside the window carries a thermal or power clock-event reason
  (telemetry/readings.py THERMAL_REASONS, POWER_REASONS), else 0.0; gpu_throttled_share: the share of such samples.
- gpu_samples: sample rows (GPUs × instants) inside the window.
None where there are no samples (no telemetry) or the inputs are missing.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from cluster.kernel.run_row import GPU_METRIC_NAMES

GPU_METRIC_DEFINITIONS: dict[str, str] = {
    "gpu_energy_j": "energy of the server's GPUs over the window: Σ per GPU of the energy counter at the end minus at "
                    "the start (linear interpolation; trapezoid of power where there is no counter), J",
    "gpu_power_w_mean": "gpu_energy_j / duration_s: mean total power of the server's GPUs, W",
    "energy_j_per_output_token": "gpu_energy_j / output tokens of ok requests, J/token",
    "output_tok_s_per_w": "output_tok_s / gpu_power_w_mean (output tokens per joule)",
    "sm_clock_mhz_mean": "mean SM clock over every GPU sample inside the window, MHz",
    "sm_clock_mhz_min": "lowest SM clock sampled inside the window, MHz",
    "sm_clock_mhz_p10": "10th percentile of the SM clock samples inside the window, MHz",
    "gpu_temperature_c_max": "hottest GPU temperature sampled inside the window, °C",
    "gpu_throttled": "1 when any sample inside the window had a thermal or power clock-event (throttle) reason, else 0",
    "gpu_throttled_share": "share of the samples inside the window with a thermal or power throttle reason",
    "gpu_samples": "GPU sample rows (GPUs × instants) inside the window",
}


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


def summarize_gpu(samples: Optional[pa.Table], duration_s: float,
                  output_tok_s: Optional[float]) -> dict[str, Optional[float]]:
    """Every metric of GPU_METRIC_NAMES for one run (see the module docstring)."""
    out: dict[str, Optional[float]] = {n: None for n in GPU_METRIC_NAMES}
    if samples is None or not samples.num_rows or duration_s <= 0:
        return out
    cols = samples.select(["t_ns", "gpu", "power_w", "energy_j", "sm_clock_mhz", "temperature_c",
                           "throttle_thermal", "throttle_power"]).to_pydict()
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
    sm = floats("sm_clock_mhz")[inside]
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
