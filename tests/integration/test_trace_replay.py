"""A trace replayed through the driver on local Ray: the load actor builds the trace's prompts on its node and
sends them at the recorded times rescaled to the point's rate, each with its row's input and output length."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from cluster.spec.loader import parse_spec_text

pytestmark = pytest.mark.ray

# recorded: a burst of four 50 ms apart, a 1 s lull, a burst of four: 7 gaps over 1.3 s
TIMES_S = [0.0, 0.05, 0.10, 0.15, 1.15, 1.20, 1.25, 1.30]
LENGTHS = [(12, 5), (20, 3), (7, 9), (16, 4), (9, 6), (30, 2), (11, 7), (8, 8)]


def test_the_driver_replays_the_trace_times_and_lengths(ray_local: None, tmp_path: Path) -> None:
    from cluster.distributed.driver import Driver

    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp_s": 100 + t, "input_tokens": i, "output_tokens": o}) + "\n"
                             for t, (i, o) in zip(TIMES_S, LENGTHS)))
    spec = parse_spec_text(f"""
version: 1
name: replay
model: {{path: sim://trace, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants: [{{name: a}}]
workloads:
  - {{name: w, input_tokens: dataset, output_tokens: dataset, num_requests: 8,
      prompts: {{source: trace, path: {trace}, vocab_size: 1000}}}}
load: {{request_rate: [14], arrival: trace}}
warmup_requests: 0
max_client_lag_ms: 1000
output: {tmp_path / "out"}
""")
    result = Driver(spec, tmp_path, None, lambda s: None, lambda p, s: None).run()
    assert set(result.statuses.values()) == {"ok"}
    req = ds.dataset(str(tmp_path / "out" / "replay" / "requests"), format="parquet",
                     partitioning="hive").to_table().to_pandas().sort_values("request_index")
    # at 14 req/s the 7 gaps span 7 / 14 = 0.5 s instead of the recorded 1.3 s: every gap scaled by 0.5 / 1.3
    scale = (7 / 14) / 1.30
    assert req["intended_send_ns"].tolist() == [round(t * scale * 1e9) for t in TIMES_S]
    assert req["prompt_tokens_sent"].tolist() == [i for i, _ in LENGTHS]
    assert req["max_tokens"].tolist() == [o for _, o in LENGTHS]
    assert req["completion_tokens"].tolist() == [o for _, o in LENGTHS]
