"""One GPU's telemetry reading and the clock-event (throttle) reason bits it carries (pure, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# NVML clock-event reason bits (pynvml nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*; the same values
# in nvidia-ml-py 12.535+ and 13.x, nvml.h NVML_CLOCKS_EVENT_REASON_*). The simulator's device reports the same bits.
REASON_GPU_IDLE = 0x01
REASON_APPLICATIONS_CLOCKS = 0x02
REASON_SW_POWER_CAP = 0x04
REASON_HW_SLOWDOWN = 0x08
REASON_SYNC_BOOST = 0x10
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80

THERMAL_REASONS = REASON_SW_THERMAL | REASON_HW_THERMAL | REASON_HW_SLOWDOWN
"""Reasons that mean the GPU slowed for heat (HW slowdown is engaged for high temperature or power brake: it counts
as both, so a run with it is flagged either way)."""
POWER_REASONS = REASON_SW_POWER_CAP | REASON_HW_POWER_BRAKE | REASON_HW_SLOWDOWN
"""Reasons that mean the GPU slowed to stay under a power limit."""
REASON_NAMES = {REASON_GPU_IDLE: "gpu_idle", REASON_APPLICATIONS_CLOCKS: "applications_clocks",
                REASON_SW_POWER_CAP: "sw_power_cap", REASON_HW_SLOWDOWN: "hw_slowdown",
                REASON_SYNC_BOOST: "sync_boost", REASON_SW_THERMAL: "sw_thermal", REASON_HW_THERMAL: "hw_thermal",
                REASON_HW_POWER_BRAKE: "hw_power_brake"}


@dataclass(frozen=True)
class GpuReading:
    """What one GPU reported at one instant; None where the device does not support a reading."""

    gpu: str
    """The GPU as CUDA_VISIBLE_DEVICES names it to the server (an index or a GPU-UUID)."""
    power_w: Optional[float] = None
    energy_j: Optional[float] = None
    """The device's cumulative energy counter (NVML counts mJ since the driver loaded), J."""
    sm_clock_mhz: Optional[int] = None
    mem_clock_mhz: Optional[int] = None
    temperature_c: Optional[int] = None
    gpu_util_pct: Optional[int] = None
    mem_util_pct: Optional[int] = None
    mem_used_bytes: Optional[int] = None
    pcie_tx_kb_s: Optional[int] = None
    pcie_rx_kb_s: Optional[int] = None
    clock_event_reasons: Optional[int] = None
    """The NVML clock-event (throttle) reason bitmask."""


def is_thermal(reasons: Optional[int]) -> bool:
    return bool(reasons is not None and reasons & THERMAL_REASONS)


def is_power(reasons: Optional[int]) -> bool:
    return bool(reasons is not None and reasons & POWER_REASONS)


def reason_names(reasons: Optional[int]) -> list[str]:
    """The named bits set in a reason mask (unknown bits as hex)."""
    if not reasons:
        return []
    out = [name for bit, name in REASON_NAMES.items() if reasons & bit]
    unknown = reasons & ~sum(REASON_NAMES)
    return out + ([hex(unknown)] if unknown else [])
