"""The NVML sampler: a real GPU's power, energy counter, clocks, temperature, utilisation, memory, PCIe, throttle bits.

nvidia-ml-py (import name `pynvml`, the `gpu` extra) is imported lazily; tests hand in a fake module with the same
call signatures. Calls used (pynvml 12.535+/13.x): nvmlInit, nvmlShutdown, nvmlDeviceGetHandleByIndex /
nvmlDeviceGetHandleByUUID, nvmlDeviceGetPowerUsage (mW), nvmlDeviceGetTotalEnergyConsumption (mJ since the driver
loaded; Volta+), nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM | NVML_CLOCK_MEM) (MHz), nvmlDeviceGetTemperature(handle,
NVML_TEMPERATURE_GPU) (°C), nvmlDeviceGetUtilizationRates (.gpu, .memory %), nvmlDeviceGetMemoryInfo (.used bytes),
nvmlDeviceGetPcieThroughput(handle, NVML_PCIE_UTIL_TX_BYTES | NVML_PCIE_UTIL_RX_BYTES) (KB/s), and
nvmlDeviceGetCurrentClocksEventReasons (falling back to the older nvmlDeviceGetCurrentClocksThrottleReasons).
A reading a device does not support (NVMLError) is None; the others still count. NVML measures PCIe throughput
over a 20 ms interval per call (nvml.h), so one GPU's PCIe pair is read per sample, round-robin (each GPU's PCIe
columns are set on every len(gpus)-th sample, None on the others): a TP8 server still samples at 10 Hz.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Optional, Sequence

from cluster.errors import EnvironmentFault
from cluster.telemetry.readings import GpuReading


class TelemetryUnavailable(EnvironmentFault):
    """No way to read this server's GPUs (nvidia-ml-py missing, no driver, no such device)."""


def load_nvml() -> ModuleType:
    """pynvml from nvidia-ml-py, or TelemetryUnavailable saying how to get it."""
    import importlib

    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise TelemetryUnavailable("nvidia-ml-py is not installed (pip install 'sglbench[gpu]')") from e


class NvmlSampler:
    """Reads the GPUs named by CUDA_VISIBLE_DEVICES ids (indices or GPU-UUIDs) through NVML."""

    source = "nvml"

    def __init__(self, gpu_ids: Sequence[str], nvml: Optional[ModuleType] = None) -> None:
        self.nvml: Any = nvml if nvml is not None else load_nvml()
        if not gpu_ids:
            raise TelemetryUnavailable("the server has no GPUs to sample")
        try:
            self.nvml.nvmlInit()
        except Exception as e:  # noqa: BLE001 - NVMLError (no driver) or the shared library missing
            raise TelemetryUnavailable(f"NVML could not start: {type(e).__name__}: {e}") from e
        try:
            self.handles = [(g, self._handle(g)) for g in gpu_ids]
        except Exception as e:  # noqa: BLE001
            self.close()
            raise TelemetryUnavailable(f"NVML has no device for GPU ids {list(gpu_ids)}: {e}") from e
        reasons = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons: Callable[[Any], int] = reasons or self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        self._pcie_turn = 0

    def _handle(self, gpu: str) -> Any:
        # CUDA_VISIBLE_DEVICES indices are NVML indices when CUDA enumerates in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID,
        # and the usual case on a node of identical GPUs); a GPU-UUID is unambiguous
        if gpu.startswith(("GPU-", "MIG-")):
            return self.nvml.nvmlDeviceGetHandleByUUID(gpu)
        return self.nvml.nvmlDeviceGetHandleByIndex(int(gpu))

    def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def sample(self) -> list[GpuReading]:
        n = self.nvml
        out = []
        pcie_gpu = self._pcie_turn % len(self.handles)
        self._pcie_turn += 1
        for i, (gpu, h) in enumerate(self.handles):
            pcie = i == pcie_gpu
            power_mw = self._read(n.nvmlDeviceGetPowerUsage, h)
            energy_mj = self._read(n.nvmlDeviceGetTotalEnergyConsumption, h)
            util = self._read(n.nvmlDeviceGetUtilizationRates, h)
            mem = self._read(n.nvmlDeviceGetMemoryInfo, h)
            out.append(GpuReading(
                gpu=gpu,
                power_w=power_mw / 1000.0 if power_mw is not None else None,
                energy_j=energy_mj / 1000.0 if energy_mj is not None else None,
                sm_clock_mhz=self._read(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
                mem_clock_mhz=self._read(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
                temperature_c=self._read(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
                gpu_util_pct=util.gpu if util is not None else None,
                mem_util_pct=util.memory if util is not None else None,
                mem_used_bytes=mem.used if mem is not None else None,
                pcie_tx_kb_s=self._read(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES) if pcie else None,
                pcie_rx_kb_s=self._read(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES) if pcie else None,
                clock_event_reasons=self._read(self._reasons, h),
            ))
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down twice, or after a failed init
            pass
