"""A run's per-worker split behind a gateway: requests per worker (runs.worker_requests_json) and its imbalance
(m_worker_imbalance: max share / mean share), from hand-built records whose arithmetic is in the comments; null
without a gateway and for a requests table written before the `worker` column."""

from __future__ import annotations

import json

import pytest

from cluster.analysis.metric_catalog import metric
from cluster.analysis.metrics import summarize_run, worker_requests
from cluster.analysis.run_row import build_run_row
from cluster.kernel.records import RequestRecord
from cluster.kernel.run_row import RUNS_SCHEMA
from cluster.kernel.window import MeasuredWindow
from cluster.loadgen.sink import request_batches
from tests.unit.analysis.test_run_row import SEGMENT, SERVER, SPEC, _plan
from cluster.config.loader import parse_spec_text

A, B = "http://127.0.0.1:30001", "http://127.0.0.1:30002"
MS = 1_000_000


def _rec(i: int, worker: str | None, error: str | None = None) -> RequestRecord:
    return RequestRecord(request_index=i, intended_send_ns=i * MS, actual_send_ns=i * MS, prompt_tokens_sent=16,
                         max_tokens=4, chunk_arrival_ns=[] if error else [i * MS + 5 * MS, i * MS + 9 * MS],
                         chunk_tokens=[] if error else [2, 2], completion_tokens=None if error else 4,
                         finish_reason=None if error else "length", error=error, http_status=500 if error else 200,
                         worker=worker)


def _window(recs: list[RequestRecord]) -> MeasuredWindow:
    reqs, chunks = request_batches(recs)
    return MeasuredWindow(requests=reqs, chunks=chunks, window_start_unix_s=1_700_000_010.0, duration_s=2.0,
                          lag_p50_ns=0, lag_p99_ns=0, counters_before={}, counters_after={}, warmup_ok=0,
                          flushed=True)


def test_split_and_imbalance_of_three_requests_over_two_workers() -> None:
    w = _window([_rec(0, A), _rec(1, B), _rec(2, A)])
    # A served 2, B 1
    assert worker_requests(w.requests) == {A: 2, B: 1}
    m = summarize_run(w.requests, w.chunks, w.duration_s)
    # shares 2/3 and 1/3, mean share 1/2: (2/3) / (1/2) = 4/3
    assert m["worker_imbalance"] == pytest.approx(4 / 3)
    # a third worker the gateway routes to served none: mean share 1/3, (2/3) / (1/3) = 2
    assert summarize_run(w.requests, w.chunks, w.duration_s, workers=3)["worker_imbalance"] == pytest.approx(2.0)
    even = _window([_rec(0, A), _rec(1, B)])
    # 1 each: (1/2) / (1/2) = 1.0
    assert summarize_run(even.requests, even.chunks, even.duration_s)["worker_imbalance"] == pytest.approx(1.0)


def test_a_failed_request_counts_where_it_names_its_worker_and_not_where_the_gateway_failed_it() -> None:
    w = _window([_rec(0, A), _rec(1, B, error="HTTP 503: busy"), _rec(2, None, error="HTTP 500: connection failed")])
    # A 1, B 1 (its worker's own error); the gateway's own error names none: (1/2) / (1/2) = 1.0
    assert worker_requests(w.requests) == {A: 1, B: 1}
    assert summarize_run(w.requests, w.chunks, w.duration_s)["worker_imbalance"] == pytest.approx(1.0)


def test_no_gateway_and_a_table_written_before_the_column_give_null() -> None:
    w = _window([_rec(0, None), _rec(1, None)])
    assert worker_requests(w.requests) == {}
    assert summarize_run(w.requests, w.chunks, w.duration_s)["worker_imbalance"] is None
    old = _window([_rec(0, A), _rec(1, A)]).requests
    old = old.drop_columns(["worker"])
    assert worker_requests(old) == {}
    assert summarize_run(old, _window([_rec(0, A), _rec(1, A)]).chunks, 2.0)["worker_imbalance"] is None


def test_the_runs_row_stores_the_split_and_the_imbalance() -> None:
    spec = parse_spec_text(SPEC)
    row = build_run_row(_plan("base"), _window([_rec(0, A), _rec(1, B), _rec(2, A)]), SERVER, SEGMENT, spec, [],
                        None)
    assert json.loads(row.worker_requests_json or "") == {A: 2, B: 1}
    assert row.metrics["worker_imbalance"] == pytest.approx(4 / 3)
    assert "worker_requests_json" in RUNS_SCHEMA.names and "m_worker_imbalance" in RUNS_SCHEMA.names
    assert metric("worker_imbalance").stored == "m_worker_imbalance"
    plain = build_run_row(_plan("base"), _window([_rec(0, None), _rec(1, None)]), SERVER, SEGMENT, spec, [], None)
    assert plain.worker_requests_json is None and plain.metrics["worker_imbalance"] is None
