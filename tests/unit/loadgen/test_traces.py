"""Request traces on hand-written files (CSV and JSONL, good and malformed with file:line), their prompts, and the
rescaled replay schedule (Hypothesis: the window's mean rate is the target, the gaps keep their proportions)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.loadgen.prompt_sources import build_prompts
from cluster.kernel.arrivals import recorded_rate_per_s, trace_offsets_ns
from cluster.loadgen.traces import TraceError, load_trace
from cluster.config.workload import WorkloadSpec

ROWS = [(0.0, 12, 5), (0.5, 20, 3), (0.5, 7, 9), (2.0, 16, 4)]


def _jsonl(tmp: pathlib.Path, rows: list[dict[str, Any]], name: str = "t.jsonl") -> pathlib.Path:
    p = tmp / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _workload(path: pathlib.Path, n: int) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"name": "t", "input_tokens": "dataset", "output_tokens": "dataset",
                                        "num_requests": n, "prompts": {"source": "trace", "path": str(path),
                                                                       "vocab_size": 1000}})


def test_csv_and_jsonl_give_the_same_rows(tmp_path: pathlib.Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("timestamp_ms,input_tokens,output_tokens\n" + "".join(f"{t * 1000:g},{i},{o}\n" for t, i, o in ROWS))
    js = _jsonl(tmp_path, [{"timestamp_s": t, "input_tokens": i, "output_tokens": o} for t, i, o in ROWS])
    a, b = load_trace(csv), load_trace(js)
    assert [(r.timestamp_s, r.input_tokens, r.output_tokens) for r in a] == ROWS
    assert [(r.timestamp_s, r.input_tokens, r.output_tokens) for r in b] == ROWS
    assert [r.line for r in a] == [2, 3, 4, 5] and [r.line for r in b] == [1, 2, 3, 4]


@pytest.mark.parametrize("row, expected", [
    ({"timestamp_s": 1, "input_tokens": 0, "output_tokens": 3}, "input_tokens 0 must be a whole number of tokens"),
    ({"timestamp_s": 1, "input_tokens": 2.5, "output_tokens": 3}, "input_tokens 2.5 must be a whole number"),
    ({"timestamp_s": "x", "input_tokens": 2, "output_tokens": 3}, "timestamp_s 'x' is not a number"),
    ({"input_tokens": 2, "output_tokens": 3}, "exactly one of timestamp_s, timestamp_ms, got neither"),
    ({"timestamp_s": 1, "timestamp_ms": 1, "input_tokens": 2, "output_tokens": 3}, "got timestamp_s, timestamp_ms"),
    ({"timestamp_s": 0.5, "input_tokens": 2, "output_tokens": 3}, "timestamp goes back in time"),
])
def test_a_malformed_row_names_file_and_line(tmp_path: pathlib.Path, row: dict[str, Any], expected: str) -> None:
    p = _jsonl(tmp_path, [{"timestamp_s": 1.0, "input_tokens": 4, "output_tokens": 4}, row])
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert f"{p}:2:" in str(e.value) and expected in str(e.value)


def test_a_csv_without_the_columns_is_refused(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("time,prompt_len,output_len\n1,2,3\n")
    with pytest.raises(TraceError, match=r"t\.csv:1: the CSV header needs timestamp_s"):
        load_trace(p)


def test_prompts_replay_the_rows_lengths_and_times(tmp_path: pathlib.Path) -> None:
    p = _jsonl(tmp_path, [{"timestamp_s": 10 + t, "input_tokens": i, "output_tokens": o} for t, i, o in ROWS])
    ps = build_prompts(_workload(p, 3), 3, seed=4, base_dir=tmp_path)
    assert [len(x.input_ids or ()) for x in ps] == [12, 20, 7]
    assert [x.max_tokens for x in ps] == [5, 3, 9]
    assert [x.arrival_s for x in ps] == [0.0, 0.5, 0.5]  # offsets from the first row, not absolute times
    assert build_prompts(_workload(p, 3), 3, seed=4, base_dir=tmp_path) == ps
    with pytest.raises(TraceError, match="num_requests 5 is more than the trace's 4 rows"):
        build_prompts(_workload(p, 5), 5, seed=4, base_dir=tmp_path)


def test_offsets_rescale_the_recorded_gaps_to_the_rate() -> None:
    arrivals = [0.0, 0.5, 0.5, 2.0]  # recorded: 3 gaps over 2 s = 1.5 req/s
    assert recorded_rate_per_s(arrivals) == 1.5
    # at 3 req/s every gap is halved: 0, 0.25, 0.25, 1.0 s; 3 gaps / 1.0 s = 3 req/s
    assert trace_offsets_ns(arrivals, 3.0).tolist() == [0, 250_000_000, 250_000_000, 1_000_000_000]
    assert trace_offsets_ns(arrivals, 1.5).tolist() == [0, 500_000_000, 500_000_000, 2_000_000_000]
    assert trace_offsets_ns([7.0], 2.0).tolist() == [0]
    with pytest.raises(ValueError, match="two or more rows at different times"):
        trace_offsets_ns([1.0, 1.0], 2.0)


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=60).filter(lambda g: sum(g) > 1e-3),
       rate=st.floats(min_value=0.05, max_value=500.0))
def test_any_trace_replays_at_the_target_mean_rate_with_its_shape(gaps: list[float], rate: float) -> None:
    arrivals = np.concatenate([[0.0], np.cumsum(gaps)])
    off = trace_offsets_ns(arrivals.tolist(), rate)
    assert off[0] == 0 and np.all(np.diff(off) >= 0)  # order kept, nothing sent before the window starts
    assert (len(off) - 1) / (off[-1] / 1e9) == pytest.approx(rate, rel=1e-6)
    # every gap scaled by the same factor: a burst stays a burst, a lull a lull
    scaled = np.diff(off) / 1e9
    np.testing.assert_allclose(scaled, np.asarray(gaps) * (off[-1] / 1e9) / arrivals[-1], rtol=1e-6, atol=2e-9)
