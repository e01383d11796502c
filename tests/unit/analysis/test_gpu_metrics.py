"""Per-run GPU figures: energy from the counter (or power), J/token, tok/s per watt, clocks, the throttle flag."""

from __future__ import annotations

import pytest

from cluster.analysis.gpu_metrics import summarize_gpu, throttle_summary
from cluster.analysis.metric_catalog import definitions
from cluster.kernel.run_row import GPU_METRIC_NAMES
from cluster.telemetry.readings import REASON_SW_POWER_CAP, GpuReading
from cluster.telemetry.recorder import readings_table


def samples(power_w: float = 300.0, energy: bool = True, throttle_at: int = -1, gpus: tuple[str, ...] = ("0",),
            clock_at: dict[int, int] | None = None):
    """One sample every 0.1 s from t = -0.05 s to 10.05 s; power constant, the counter its integral from 1000 J."""
    rows = []
    for i in range(102):
        t_ns = -50_000_000 + i * 100_000_000
        for g in gpus:
            rows.append((t_ns, GpuReading(
                gpu=g, power_w=power_w, energy_j=1000.0 + power_w * t_ns / 1e9 if energy else None,
                sm_clock_mhz=(clock_at or {}).get(i, 2000), temperature_c=60 + (i == 50),
                clock_event_reasons=REASON_SW_POWER_CAP if i == throttle_at else 0)))
    return readings_table(rows, "sim")


def test_energy_per_token_and_tokens_per_watt() -> None:
    m = summarize_gpu(samples(300.0, gpus=("0", "1")), 10.0, output_tok_s=72.0)
    assert tuple(m) == GPU_METRIC_NAMES and tuple(definitions("gpu")) == GPU_METRIC_NAMES
    assert m["gpu_energy_j"] == pytest.approx(2 * 300.0 * 10.0)
    assert m["gpu_power_w_mean"] == pytest.approx(600.0)
    assert m["energy_j_per_output_token"] == pytest.approx(6000.0 / 720.0)
    assert m["output_tok_s_per_w"] == pytest.approx(72.0 / 600.0)
    assert m["gpu_samples"] == 2 * 100 and m["gpu_temperature_c_max"] == 61
    assert m["gpu_throttled"] == 0.0 and m["gpu_throttled_share"] == 0.0


def test_power_integral_when_there_is_no_energy_counter() -> None:
    m = summarize_gpu(samples(250.0, energy=False), 10.0, output_tok_s=50.0)
    assert m["gpu_energy_j"] == pytest.approx(2500.0)
    assert m["energy_j_per_output_token"] == pytest.approx(2500.0 / 500.0)


def test_clocks_and_throttle_flag_inside_the_window_only() -> None:
    m = summarize_gpu(samples(clock_at={0: 100, 40: 1500}, throttle_at=40), 10.0, output_tok_s=1.0)
    assert m["sm_clock_mhz_min"] == 1500, "the sample at -0.05 s is outside the window"
    assert m["sm_clock_mhz_mean"] == pytest.approx((99 * 2000 + 1500) / 100)
    assert m["gpu_throttled"] == 1.0 and m["gpu_throttled_share"] == pytest.approx(0.01)
    assert throttle_summary(samples(throttle_at=40), 10.0) == {"sw_power_cap": 1}
    outside = summarize_gpu(samples(throttle_at=0), 10.0, output_tok_s=1.0)
    assert outside["gpu_throttled"] == 0.0


def test_no_samples_gives_none() -> None:
    assert set(summarize_gpu(None, 10.0, 5.0).values()) == {None}
