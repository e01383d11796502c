"""The NVML sampler against a fake pynvml with nvidia-ml-py's own call signatures and units (mW, mJ, MHz, KB/s)."""

from __future__ import annotations

import types
from typing import Any, Optional

import pytest

from cluster.telemetry.nvml import NvmlSampler, TelemetryUnavailable
from cluster.telemetry.readings import REASON_HW_THERMAL, REASON_SW_POWER_CAP, is_power, is_thermal


class _Util:
    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu, self.memory = gpu, memory


class _Mem:
    def __init__(self, total: int, free: int, used: int) -> None:
        self.total, self.free, self.used = total, free, used


def fake_nvml(n_gpus: int = 2, event_reasons: bool = True, energy: bool = True, init_error: bool = False,
              reasons: int = 0) -> tuple[types.ModuleType, dict[str, Any]]:
    """A module shaped like pynvml (nvidia-ml-py 13.x): constants, NVMLError, and the functions with their arity."""
    m = types.ModuleType("pynvml")
    calls: dict[str, Any] = {"pcie": [], "init": 0, "shutdown": 0}

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.NVML_ERROR_NOT_SUPPORTED = 3  # type: ignore[attr-defined]
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2  # type: ignore[attr-defined]
    m.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    m.NVML_PCIE_UTIL_TX_BYTES, m.NVML_PCIE_UTIL_RX_BYTES = 0, 1  # type: ignore[attr-defined]

    def nvmlInit() -> None:
        if init_error:
            raise NVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED
        calls["init"] += 1

    def nvmlShutdown() -> None:
        calls["shutdown"] += 1

    def nvmlDeviceGetHandleByIndex(index: int) -> Any:
        if not 0 <= index < n_gpus:
            raise NVMLError(2)
        return ("h", index)

    def nvmlDeviceGetHandleByUUID(uuid: str) -> Any:
        return ("h", int(uuid.rsplit("-", 1)[1]))

    def nvmlDeviceGetPowerUsage(handle: Any) -> int:
        return 350_500 + handle[1]  # mW

    def nvmlDeviceGetTotalEnergyConsumption(handle: Any) -> int:
        if not energy:
            raise NVMLError(m.NVML_ERROR_NOT_SUPPORTED)
        return 123_456_789  # mJ

    def nvmlDeviceGetClockInfo(handle: Any, type: int) -> int:
        return {1: 1980, 2: 2619}[type]

    def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:
        assert sensor == 0
        return 61

    def nvmlDeviceGetUtilizationRates(handle: Any) -> _Util:
        return _Util(97, 40)

    def nvmlDeviceGetMemoryInfo(handle: Any, version: Optional[int] = None) -> _Mem:
        return _Mem(143_771_000_000, 10_000_000_000, 133_771_000_000)

    def nvmlDeviceGetPcieThroughput(device: Any, counter: int) -> int:
        calls["pcie"].append((device[1], counter))
        return 1000 + counter

    def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:
        return reasons

    for f in (nvmlInit, nvmlShutdown, nvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByUUID, nvmlDeviceGetPowerUsage,
              nvmlDeviceGetTotalEnergyConsumption, nvmlDeviceGetClockInfo, nvmlDeviceGetTemperature,
              nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo, nvmlDeviceGetPcieThroughput,
              nvmlDeviceGetCurrentClocksThrottleReasons):
        setattr(m, f.__name__, f)
    if event_reasons:  # nvidia-ml-py 12.535+: the new name, the old one kept as an alias
        m.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: reasons | 0x1000_0000  # type: ignore[attr-defined]
    return m, calls


def test_readings_in_sglbench_units() -> None:
    nvml, calls = fake_nvml()
    s = NvmlSampler(["0", "1"], nvml=nvml)
    r0, r1 = s.sample()
    assert (r0.gpu, r1.gpu) == ("0", "1")
    assert r0.power_w == pytest.approx(350.5) and r1.power_w == pytest.approx(350.501)
    assert r0.energy_j == pytest.approx(123_456.789)
    assert (r0.sm_clock_mhz, r0.mem_clock_mhz, r0.temperature_c) == (1980, 2619, 61)
    assert (r0.gpu_util_pct, r0.mem_util_pct, r0.mem_used_bytes) == (97, 40, 133_771_000_000)
    s.close()
    assert calls["init"] == 1 and calls["shutdown"] == 1


def test_pcie_is_read_for_one_gpu_per_sample_round_robin() -> None:
    nvml, calls = fake_nvml(n_gpus=2)
    s = NvmlSampler(["0", "1"], nvml=nvml)
    a = s.sample()
    b = s.sample()
    assert (a[0].pcie_tx_kb_s, a[0].pcie_rx_kb_s, a[1].pcie_tx_kb_s) == (1000, 1001, None)
    assert (b[0].pcie_tx_kb_s, b[1].pcie_tx_kb_s, b[1].pcie_rx_kb_s) == (None, 1000, 1001)
    assert calls["pcie"] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_event_reasons_preferred_old_name_as_fallback() -> None:
    nvml, _ = fake_nvml(reasons=REASON_SW_POWER_CAP)
    assert NvmlSampler(["0"], nvml=nvml).sample()[0].clock_event_reasons == REASON_SW_POWER_CAP | 0x1000_0000
    old, _ = fake_nvml(event_reasons=False, reasons=REASON_HW_THERMAL)
    r = NvmlSampler(["0"], nvml=old).sample()[0].clock_event_reasons
    assert r == REASON_HW_THERMAL and is_thermal(r) and not is_power(r)


def test_unsupported_reading_is_none_and_the_rest_still_count() -> None:
    nvml, _ = fake_nvml(energy=False)
    r = NvmlSampler(["0"], nvml=nvml).sample()[0]
    assert r.energy_j is None and r.power_w == pytest.approx(350.5)


def test_uuid_ids_and_unavailable_cases() -> None:
    nvml, _ = fake_nvml()
    assert NvmlSampler(["GPU-abc-1"], nvml=nvml).sample()[0].power_w == pytest.approx(350.501)
    with pytest.raises(TelemetryUnavailable, match="no device"):
        NvmlSampler(["5"], nvml=nvml)
    with pytest.raises(TelemetryUnavailable, match="could not start"):
        NvmlSampler(["0"], nvml=fake_nvml(init_error=True)[0])
    with pytest.raises(TelemetryUnavailable, match="no GPUs"):
        NvmlSampler([], nvml=nvml)
