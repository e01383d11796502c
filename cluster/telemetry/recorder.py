"""The sampling loop: a background thread reading a DeviceSampler at a fixed rate with monotonic ns timestamps.

The loop owns the sampler interface (`DeviceSampler`, a Protocol: NVML in telemetry/nvml.py, the simulator's
device in engines/sim.py implement it without importing it). Timestamps are `time.monotonic_ns()` of the process
that samples (the EngineActor, on the node of the load actors: CLOCK_MONOTONIC is one clock per machine), so
`aligned()` puts them on the requests' zero (the measured window's start on the load actor's monotonic clock).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Protocol, Sequence

import pyarrow as pa

from cluster.kernel.records import GPU_METRICS_BATCH_SCHEMA
from cluster.kernel.telemetry_capture import TelemetryCapture
from cluster.telemetry.readings import GpuReading, is_power, is_thermal

DEFAULT_RATE_HZ = 10.0
MAX_CONSECUTIVE_ERRORS = 20
"""A sampler failing this many times in a row is given up on (the error is kept for provenance)."""


class DeviceSampler(Protocol):
    """Reads every GPU of one server at once."""

    source: str
    """What is measured: `nvml` (a real device) or `sim` (the simulated device model)."""

    def sample(self) -> Sequence[GpuReading]: ...

    def close(self) -> None: ...


def readings_table(rows: Sequence[tuple[int, GpuReading]], source: str) -> pa.Table:
    """(t_ns, reading) pairs as rows of GPU_METRICS_BATCH_SCHEMA (the throttle flags decoded from the reason bits)."""
    cols: dict[str, list[object]] = {f.name: [] for f in GPU_METRICS_BATCH_SCHEMA}
    for t_ns, r in rows:
        d = asdict(r)
        d.update(t_ns=t_ns, source=source, throttle_thermal=is_thermal(r.clock_event_reasons),
                 throttle_power=is_power(r.clock_event_reasons))
        for name in cols:
            cols[name].append(d[name])
    return pa.Table.from_pydict(cols, schema=GPU_METRICS_BATCH_SCHEMA)


@dataclass
class TelemetryRecorder:
    """Samples `sampler` every 1/rate_hz s (deadline-paced, no drift) from start() until stop()."""

    sampler: DeviceSampler
    rate_hz: float = DEFAULT_RATE_HZ
    clock_ns: Callable[[], int] = time.monotonic_ns
    _rows: list[tuple[int, GpuReading]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: Optional[threading.Thread] = None
    _errors: int = 0
    _error: Optional[str] = None

    def start(self) -> "TelemetryRecorder":
        if self.rate_hz <= 0:
            raise ValueError(f"telemetry rate must be > 0 Hz, got {self.rate_hz}")
        self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
        self._thread.start()
        return self

    def sample_once(self) -> None:
        t_ns = self.clock_ns()
        try:
            readings = self.sampler.sample()
        except Exception as e:  # noqa: BLE001 - a failed read is counted and kept as evidence, never fatal
            self._errors += 1
            self._error = self._error or f"{type(e).__name__}: {e}"
            return
        self._rows.extend((t_ns, r) for r in readings)

    def _loop(self) -> None:
        period_ns = int(1e9 / self.rate_hz)
        next_ns = self.clock_ns()
        consecutive = 0
        while not self._stop.is_set():
            before = self._errors
            self.sample_once()
            consecutive = consecutive + 1 if self._errors > before else 0
            if consecutive >= MAX_CONSECUTIVE_ERRORS:
                return
            next_ns += period_ns
            wait_ns = next_ns - self.clock_ns()
            if wait_ns < 0:  # fell behind (a slow read): skip the missed ticks rather than burst
                next_ns = self.clock_ns()
                wait_ns = 0
            self._stop.wait(wait_ns / 1e9)

    def stop(self) -> TelemetryCapture:
        """Stop the loop, take one last sample (so the window's end is bracketed) and close the sampler."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sample_once()
        try:
            self.sampler.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        return TelemetryCapture(self.sampler.source, self.rate_hz, readings_table(self._rows, self.sampler.source),
                                self._errors, self._error)


def unavailable(reason: str, rate_hz: float = DEFAULT_RATE_HZ) -> TelemetryCapture:
    """The capture of a server without a sampler (kept so provenance says why there are no samples)."""
    return TelemetryCapture("none", rate_hz, readings_table([], "none"), unavailable=reason)
