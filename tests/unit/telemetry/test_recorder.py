"""The sampling loop: timestamps, the Arrow rows it produces, alignment to the window's zero, errors kept."""

from __future__ import annotations

import threading

import pytest

from cluster.kernel.records import GPU_METRICS_BATCH_SCHEMA
from cluster.telemetry.readings import REASON_SW_THERMAL, GpuReading
from cluster.telemetry.recorder import TelemetryRecorder, unavailable


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000_000

    def __call__(self) -> int:
        self.t += 100_000_000
        return self.t


class FakeSampler:
    source = "sim"

    def __init__(self, fail_first: int = 0) -> None:
        self.n = 0
        self.fail_first = fail_first
        self.closed = False
        self.enough = threading.Event()

    def sample(self) -> list[GpuReading]:
        self.n += 1
        if self.n <= self.fail_first:
            raise OSError("connection refused")
        if self.n >= 5:
            self.enough.set()
        reasons = REASON_SW_THERMAL if self.n == 3 else 0
        return [GpuReading(gpu=g, power_w=100.0 * self.n, energy_j=10.0 * self.n, sm_clock_mhz=2000,
                           clock_event_reasons=reasons) for g in ("4", "5")]

    def close(self) -> None:
        self.closed = True


def test_rows_have_the_schema_and_monotonic_times_and_align() -> None:
    s = FakeSampler()
    rec = TelemetryRecorder(s, 10.0, clock_ns=Clock())
    for _ in range(3):
        rec.sample_once()
    cap = rec.stop()  # stop without start: one last sample, closed
    assert s.closed and cap.source == "sim" and cap.errors == 0
    t = cap.samples
    assert t.schema == GPU_METRICS_BATCH_SCHEMA and t.num_rows == 8
    assert t.column("gpu").to_pylist()[:2] == ["4", "5"]
    assert t.column("t_ns").to_pylist()[::2] == [1_100_000_000, 1_200_000_000, 1_300_000_000, 1_400_000_000]
    assert t.column("throttle_thermal").to_pylist()[4:6] == [True, True]
    assert not any(t.column("throttle_power").to_pylist())
    rel = cap.aligned(1_250_000_000)
    assert rel.column("t_ns").to_pylist()[::2] == [-150_000_000, -50_000_000, 50_000_000, 150_000_000]


def test_errors_are_counted_and_the_first_kept() -> None:
    rec = TelemetryRecorder(FakeSampler(fail_first=2), 10.0, clock_ns=Clock())
    for _ in range(3):
        rec.sample_once()
    cap = rec.stop()
    assert cap.errors == 2 and cap.error == "OSError: connection refused" and cap.samples.num_rows == 4
    assert cap.provenance()["errors"] == 2


def test_thread_samples_until_stopped() -> None:
    s = FakeSampler()
    rec = TelemetryRecorder(s, 200.0).start()
    assert s.enough.wait(10)
    cap = rec.stop()
    times = cap.samples.column("t_ns").to_pylist()[::2]
    assert len(times) >= 5 and times == sorted(times)
    with pytest.raises(ValueError):
        TelemetryRecorder(s, 0.0).start()


def test_unavailable_capture_says_why() -> None:
    cap = unavailable("the server computes on the CPU")
    assert cap.samples.num_rows == 0 and cap.provenance()["unavailable"] == "the server computes on the CPU"
