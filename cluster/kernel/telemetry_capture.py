"""What one GPU sampling period of a server gave (cluster/telemetry/recorder.py samples it in the EngineActor): the
samples with absolute monotonic t_ns, and how sampling went. Carried by the measured window to the runs row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, TypedDict

import pyarrow as pa

from cluster.kernel.records import GPU_METRICS_BATCH_SCHEMA


class TelemetryProvenance(TypedDict):
    source: str
    rate_hz: float
    samples: int
    errors: int
    error: Optional[str]
    unavailable: Optional[str]


@dataclass(frozen=True)
class TelemetryCapture:
    """What one sampling period gave: samples with absolute monotonic t_ns, and how sampling went."""

    source: str
    rate_hz: float
    samples: pa.Table
    errors: int = 0
    error: Optional[str] = None
    """The first sampling error (type: message), if any."""
    unavailable: Optional[str] = None
    """Why there was no sampler at all (no NVML, a CPU server), None when there was one."""

    def aligned(self, window_start_monotonic_ns: int) -> pa.Table:
        """The samples with t_ns relative to the measured window's start (negative just before it)."""
        t = self.samples
        if not t.num_rows:
            return t
        rel = pa.array([x - window_start_monotonic_ns for x in t.column("t_ns").to_pylist()], pa.int64())
        return t.set_column(t.schema.get_field_index("t_ns"), GPU_METRICS_BATCH_SCHEMA.field("t_ns"), rel)

    def provenance(self) -> TelemetryProvenance:
        """How sampling went, as provenance_json["telemetry"] holds it."""
        return {"source": self.source, "rate_hz": self.rate_hz, "samples": self.samples.num_rows,
                "errors": self.errors, "error": self.error, "unavailable": self.unavailable}
