"""The simulated GPU device: power, energy, clocks and temperature that follow the scheduler's steps (pure).

The scheduler loop calls `begin_step(batch)` before it sleeps a step and `end_step()` after; between steps the
device idles. Power is piecewise constant (idle, or busy for the step's batch, capped at the power limit) and the
energy counter is its exact integral over wall time. A reading reports, like NVML, the mean power since the
previous reading, the SM clock (boost while busy, idle clock otherwise; lowered in proportion when power-capped,
pinned at the throttle clock once an injected throttle starts) and the clock-event reason bits NVML would set.
Every GPU of a TP group reads the same (one model, tp copies). Labelled `source = sim` everywhere.
"""

from __future__ import annotations

import time
from typing import Callable

from cluster.config.sim_knobs import Knobs
from cluster.telemetry.readings import (REASON_GPU_IDLE, REASON_SW_POWER_CAP, REASON_SW_THERMAL, GpuReading)

AMBIENT_C = 32.0
HOT_C_PER_W = 0.09
"""Steady-state temperature rise per watt above idle (≈ 75 °C at 500 W)."""
THERMAL_TAU_S = 20.0
THROTTLED_C = 89
MEM_USED_SHARE = 0.88
"""Share of the device memory SGLang's static pool holds (weights + KV cache, mem_fraction_static)."""
PCIE_KB_S_BUSY = 350
"""Host↔device traffic while steps run (token ids in, logits of sampled tokens out), KB/s."""


class SimDevice:
    def __init__(self, knobs: Knobs, n_gpus: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.knobs = knobs
        self.n_gpus = max(1, n_gpus)
        self.clock = clock
        self.t0 = self.last_t = self._read_t = clock()
        self.energy_j = 0.0
        self._read_energy_j = 0.0
        self._busy_s = 0.0
        self._power_w = knobs.gpu_idle_w
        self._step_start: float | None = None
        self._batch = 0
        self.temperature_c = AMBIENT_C

    # ---- the scheduler's side -----------------------------------------------------------------------------
    def throttled(self) -> bool:
        after = self.knobs.gpu_throttle_after_s
        return after is not None and self.clock() - self.t0 >= after

    def demand_w(self, batch: int) -> float:
        k = self.knobs
        return k.gpu_busy_w + k.gpu_busy_w_per_req * max(0, batch - 1) if batch > 0 else k.gpu_idle_w

    def sm_clock_mhz(self, busy: bool) -> int:
        k = self.knobs
        if not busy:
            return k.gpu_idle_sm_clock_mhz
        clock = float(k.gpu_sm_clock_mhz)
        demand = self.demand_w(max(1, self._batch))
        if demand > k.gpu_power_limit_w:
            clock *= k.gpu_power_limit_w / demand
        if self.throttled():
            clock = min(clock, float(k.gpu_throttle_clock_mhz))
        return max(1, int(round(clock)))

    def slowdown(self, batch: int) -> float:
        """Step-time multiplier at this batch: boost clock ÷ the clock the device runs at (1.0 unthrottled)."""
        self._batch = batch
        return self.knobs.gpu_sm_clock_mhz / self.sm_clock_mhz(busy=True)

    def _advance(self, now: float) -> None:
        dt = max(0.0, now - self.last_t)
        self.energy_j += self._power_w * dt
        if self._step_start is not None:
            self._busy_s += dt
        target = AMBIENT_C + HOT_C_PER_W * max(0.0, self._power_w - self.knobs.gpu_idle_w) + 3.0
        self.temperature_c += (target - self.temperature_c) * min(1.0, dt / THERMAL_TAU_S)
        self.last_t = now

    def begin_step(self, batch: int) -> None:
        self._advance(self.clock())
        self._batch = batch
        self._step_start = self.last_t
        self._power_w = min(self.demand_w(batch), self.knobs.gpu_power_limit_w)
        if self.throttled() and self.knobs.gpu_throttle_reason == "power":
            self._power_w = min(self._power_w, self.knobs.gpu_power_limit_w * 0.8)

    def end_step(self) -> None:
        self._advance(self.clock())
        self._step_start = None
        self._power_w = self.knobs.gpu_idle_w

    # ---- the sampler's side (GET /sim_device) -------------------------------------------------------------
    def read(self) -> list[GpuReading]:
        now = self.clock()
        self._advance(now)
        dt = now - self._read_t
        power = (self.energy_j - self._read_energy_j) / dt if dt > 0 else self._power_w
        util = min(1.0, self._busy_s / dt) if dt > 0 else (1.0 if self._step_start is not None else 0.0)
        busy = util > 0.05 or self._step_start is not None
        self._read_t, self._read_energy_j, self._busy_s = now, self.energy_j, 0.0
        k = self.knobs
        reasons = 0 if busy else REASON_GPU_IDLE
        if busy and self.demand_w(max(1, self._batch)) > k.gpu_power_limit_w:
            reasons |= REASON_SW_POWER_CAP
        temp = self.temperature_c
        if self.throttled():
            reasons |= REASON_SW_THERMAL if k.gpu_throttle_reason == "thermal" else REASON_SW_POWER_CAP
            temp = max(temp, THROTTLED_C) if k.gpu_throttle_reason == "thermal" else temp
        return [GpuReading(
            gpu=str(i), power_w=round(power, 3), energy_j=round(self.energy_j, 6),
            sm_clock_mhz=self.sm_clock_mhz(busy), mem_clock_mhz=k.gpu_mem_clock_mhz,
            temperature_c=int(round(temp)), gpu_util_pct=int(round(util * 100)),
            mem_util_pct=int(round(util * 60)), mem_used_bytes=int(k.gpu_memory_bytes * MEM_USED_SHARE),
            pcie_tx_kb_s=int(PCIE_KB_S_BUSY * util), pcie_rx_kb_s=int(PCIE_KB_S_BUSY * util / 2),
            clock_event_reasons=reasons) for i in range(self.n_gpus)]
