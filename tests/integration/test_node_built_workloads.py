"""Workloads the load actor builds on its node, through the driver on local Ray: a trace replayed at the recorded
times rescaled to the point's rate, each request with its row's input and output length; and multi-turn sessions,
each later turn carrying the answers the server gave."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

# recorded: a burst of four 50 ms apart, a 1 s lull, a burst of four: 7 gaps over 1.3 s
TIMES_S = [0.0, 0.05, 0.10, 0.15, 1.15, 1.20, 1.25, 1.30]
LENGTHS = [(12, 5), (20, 3), (7, 9), (16, 4), (9, 6), (30, 2), (11, 7), (8, 8)]


def _requests(tmp_path: Path, name: str, workload: str, load: str) -> pd.DataFrame:
    """Run a one-variant sim experiment through the driver; its requests table in request order."""
    from cluster.distributed.driver import Driver

    spec = parse_spec_text(f"""
version: 1
name: {name}
model: {{path: sim://m, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants: [{{name: a}}]
workloads:
  - {workload}
load: {load}
warmup_requests: 0
max_client_lag_ms: 1000
output: {tmp_path / "out"}
""")
    result = Driver(spec, tmp_path, None, lambda s: None, lambda p, s: None).run()
    assert set(result.statuses.values()) == {"ok"}
    return ds.dataset(str(tmp_path / "out" / name / "requests"), format="parquet",
                      partitioning="hive").to_table().to_pandas().sort_values("request_index")


def test_the_driver_replays_the_trace_times_and_lengths(ray_local: None, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp_s": 100 + t, "input_tokens": i, "output_tokens": o}) + "\n"
                             for t, (i, o) in zip(TIMES_S, LENGTHS)))
    req = _requests(tmp_path, "replay", f"""{{name: w, input_tokens: dataset, output_tokens: dataset, num_requests: 8,
      prompts: {{source: trace, path: {trace}, vocab_size: 1000}}}}""", "{request_rate: [14], arrival: trace}")
    # at 14 req/s the 7 gaps span 7 / 14 = 0.5 s instead of the recorded 1.3 s: every gap scaled by 0.5 / 1.3
    scale = (7 / 14) / 1.30
    assert req["intended_send_ns"].tolist() == [round(t * scale * 1e9) for t in TIMES_S]
    assert req["prompt_tokens_sent"].tolist() == [i for i, _ in LENGTHS]
    assert req["max_tokens"].tolist() == [o for _, o in LENGTHS]
    assert req["completion_tokens"].tolist() == [o for _, o in LENGTHS]


def test_the_driver_runs_sessions_whose_later_turns_carry_the_answers(ray_local: None, tmp_path: Path) -> None:
    req = _requests(tmp_path, "chats", "{name: w, input_tokens: 32, output_tokens: 16, num_requests: 6, "
                    "sessions: {turns: 3, think_time_s: 0.02}}", "{concurrency: [2]}")
    assert req["turn"].tolist() == [1, 2, 3, 1, 2, 3] and req["session_index"].tolist() == [0, 0, 0, 1, 1, 1]
    # each turn adds the answer (16) and 32 new ids: 32, 80, 128; the cache holds the whole 16-token blocks of the
    # turn before's prompt and answer but its last token: 0, 32, 80 (tests/contract/test_sim_sessions.py)
    assert req["prompt_tokens"].tolist() == [32, 80, 128] * 2
    assert req["cached_tokens"].tolist() == [0, 32, 80] * 2
