"""The simulated GPU device: power and energy follow the steps, clocks follow the load, an injected throttle shows."""

from __future__ import annotations

import pytest

from cluster.sim.device import SimDevice
from cluster.config.sim_knobs import Knobs
from cluster.telemetry.readings import REASON_GPU_IDLE, REASON_SW_POWER_CAP, is_power, is_thermal


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_energy_is_the_integral_of_idle_and_busy_power() -> None:
    clk = Clock()
    d = SimDevice(Knobs(), 2, clock=clk)
    clk.t += 1.0                       # 1 s idle at 90 W
    d.begin_step(batch=5)
    clk.t += 0.5                       # 0.5 s busy at 420 + 4·2 = 428 W
    d.end_step()
    clk.t += 0.5                       # 0.5 s idle
    r = d.read()
    assert len(r) == 2 and r[0].gpu == "0" and r[1].gpu == "1"
    assert r[0].energy_j == pytest.approx(90 * 1.5 + 428 * 0.5)
    assert r[0].power_w == pytest.approx((90 * 1.5 + 428 * 0.5) / 2.0)
    assert r[0].gpu_util_pct == 25 and r[0].sm_clock_mhz == 2430 and r[0].clock_event_reasons == 0
    clk.t += 1.0
    idle = d.read()[0]
    assert idle.power_w == pytest.approx(90) and idle.sm_clock_mhz == 600
    assert idle.clock_event_reasons == REASON_GPU_IDLE and idle.gpu_util_pct == 0
    assert idle.energy_j > r[0].energy_j


def test_injected_thermal_throttle_lowers_the_clock_and_slows_steps() -> None:
    clk = Clock()
    d = SimDevice(Knobs(gpu_throttle_after_s=5.0), 1, clock=clk)
    assert d.slowdown(1) == 1.0
    clk.t += 5.0
    assert d.slowdown(1) == pytest.approx(2430 / 1400)
    d.begin_step(1)
    clk.t += 0.1
    r = d.read()[0]
    assert r.sm_clock_mhz == 1400 and is_thermal(r.clock_event_reasons) and r.temperature_c >= 89


def test_power_cap_lowers_clock_in_proportion() -> None:
    clk = Clock()
    d = SimDevice(Knobs(gpu_power_limit_w=400.0), 1, clock=clk)
    assert d.slowdown(1) == pytest.approx(420 / 400, rel=1e-3)
    d.begin_step(1)
    clk.t += 1.0
    r = d.read()[0]
    assert r.power_w == pytest.approx(400.0) and r.clock_event_reasons is not None
    assert r.clock_event_reasons & REASON_SW_POWER_CAP and is_power(r.clock_event_reasons)
    assert r.sm_clock_mhz == round(2430 * 400 / 420)
