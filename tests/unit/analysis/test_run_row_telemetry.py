"""A run's GPU samples become its m_ figures and provenance telemetry; a run without them says why."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from cluster.analysis.run_row import build_run_row
from cluster.dataset.store import DatasetStore
from cluster.telemetry.readings import REASON_HW_THERMAL, GpuReading
from cluster.telemetry.recorder import readings_table, unavailable
from cluster.kernel.telemetry_capture import TelemetryCapture
from test_run_row import SEGMENT, SERVER, _plan, _window, parse_spec_text, SPEC


def test_gpu_figures_and_provenance(tmp_path: Path) -> None:
    rows = [(t, GpuReading(gpu=g, power_w=200.0, energy_j=50.0 + 200.0 * t / 1e9, sm_clock_mhz=1900,
                           clock_event_reasons=REASON_HW_THERMAL if t == 1_000_000_000 else 0))
            for t in range(-100_000_000, 2_200_000_000, 100_000_000) for g in ("2", "3")]
    cap = TelemetryCapture("nvml", 10.0, readings_table(rows, "nvml"))
    window = _window(2, 0)
    # both requests in flight until the window's end (2 s), so every sample inside it is busy (the clock figures
    # are over busy samples only, cluster/analysis/gpu_metrics.py busy_samples)
    last = window.requests.schema.get_field_index("last_chunk_ns")
    requests = window.requests.set_column(last, "last_chunk_ns", pa.array([2_000_000_000] * 2, pa.int64()))
    out = replace(window, requests=requests, gpu_metrics=cap.samples, telemetry=cap)
    row = build_run_row(_plan("base"), out, SERVER, SEGMENT, parse_spec_text(SPEC), [], None)
    assert row.metrics["gpu_energy_j"] == pytest.approx(2 * 200.0 * 2.0)
    tokens = row.metrics["output_tok_s"] * 2.0
    assert row.metrics["energy_j_per_output_token"] == pytest.approx(800.0 / tokens)
    assert row.metrics["gpu_throttled"] == 1.0 and row.metrics["sm_clock_mhz_min"] == 1900
    tele = json.loads(row.provenance_json)["telemetry"]
    assert tele["source"] == "nvml" and tele["samples"] == len(rows) and tele["throttle_reasons"] == {"hw_thermal": 2}
    assert row.status == "ok", "a throttled run is flagged (m_gpu_throttled, compare), not invalid"
    store = DatasetStore(str(tmp_path), "rows")
    store.write_run(_plan("base"), row)
    runs = store.read_table("runs")
    assert runs.column("m_gpu_throttled").to_pylist() == [1.0]


def test_no_telemetry_is_said() -> None:
    out = replace(_window(2, 0), telemetry=unavailable("the server computes on the CPU (device: cpu)"))
    row = build_run_row(_plan("base"), out, SERVER, SEGMENT, parse_spec_text(SPEC), [], None)
    tele = json.loads(row.provenance_json)["telemetry"]
    assert tele["unavailable"].startswith("the server computes on the CPU") and row.metrics["gpu_energy_j"] is None
