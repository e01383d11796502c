"""The driver builds a run's row from the window's summary made while the batches streamed past (WindowSummary),
never by reading the spooled requests or chunks back, and the row is the one the read-back built: the driver's
_stream_window runs here with fake load actors (no Ray) over hand-built records of two shards."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pytest

from cluster.analysis.metrics import summarize_run
from cluster.analysis.request_metrics import requests_lag
from cluster.analysis.run_row import build_run_row
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.dataset.writer import RunWriter
from cluster.distributed.actors import LoadBatch, Prepared
from cluster.distributed.point_run import PointRunner, ServerStart, SharedNodes
from cluster.distributed.window_summary import WindowSummary
from cluster.kernel.records import RequestRecord
from cluster.kernel.run_facts import GateVerdict, SegmentFacts, ServerFacts
from cluster.kernel.runs import RunPlan
from cluster.kernel.window import MeasuredWindow
from cluster.kernel.window_job import WindowJob
from cluster.loadgen.sink import RecordSink
from cluster.plan.runs import make_plan

SPEC = """
version: 1
name: summary
model: {path: sim://summary, engine: sim}
variants:
  - {name: base, baseline: true}
workloads:
  - {name: w, input_tokens: 16, output_tokens: 12, num_requests: 60}
load: {concurrency: [4]}
slo: {ttft_ms: 40, tpot_ms: 4}
"""
SERVER = ServerFacts(pid=1, pgid=1, port=30000, port_attempts=1, base_url="http://127.0.0.1:30000", argv=["x"],
                     env={}, cuda_visible_devices="", gpu_ids=[], node_id="n", hostname="h", startup_s=1.0,
                     started_unix_s=1_700_000_000.0, infos={}, resolved_args={}, log_path="/tmp/x.log", server_pid=2,
                     server_saw_cuda_visible_devices="", environment={})
SEGMENT = SegmentFacts(tuning_artifact=None, checkpoint_fingerprint=None, hub_revision=None,
                       load_actor_cuda_visible_devices="", load_actor_node_id="n", load_actors=2,
                       correctness=GateVerdict(True, (), None))


def _records(n: int, seed: int) -> list[RequestRecord]:
    """Requests with 1-12 chunks of 1-3 tokens (a few token-less ones), some failed, some sent late."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        send = i * 1_000_000 + rng.randrange(0, 3_000_000)
        t, arrivals, tokens = send + rng.randrange(5_000_000, 30_000_000), [], []
        for _ in range(rng.randrange(1, 13)):
            t += rng.randrange(100_000, 9_000_000)
            arrivals.append(t)
            tokens.append(rng.choice([1, 1, 2, 3, 0]) if arrivals[1:] else 1)
        failed = rng.random() < 0.1
        out.append(RequestRecord(request_index=i, intended_send_ns=i * 1_000_000, actual_send_ns=send,
                                 prompt_tokens_sent=16, max_tokens=12, chunk_arrival_ns=arrivals,
                                 chunk_tokens=tokens, prompt_tokens=16, completion_tokens=sum(tokens),
                                 spec_verify_ct=rng.randrange(1, 6), finish_reason="length",
                                 error="HTTP 500" if failed else None, http_status=500 if failed else 200))
    return out


def _shard_stream(records: list[RequestRecord], shard: int, shards: int, batch_rows: int) -> list[Any]:
    """What one load actor streams: its requests' batch pairs in finish order, then its own record."""
    mine = [r for r in records if r.request_index % shards == shard]
    random.Random(shard).shuffle(mine)  # requests finish out of order
    out: list[Any] = []
    sink = RecordSink(len(mine), batch_rows, lambda r, c: out.append(LoadBatch(r, c)))
    for r in mine:
        sink.add(r, r.chunk_arrival_ns[-1])
    sink.flush()
    out.append(MeasuredWindow(requests=pa.table({}), chunks=pa.table({}), window_start_unix_s=1_700_000_100.0 + shard,
                              duration_s=sink.last_end_ns / 1e9, lag_p50_ns=0, lag_p99_ns=0, counters_before={},
                              counters_after={}, n_requests=sink.rows, n_chunks=sink.chunk_rows,
                              batches=sink.batches, peak_buffered_rows=sink.peak_buffered_rows, shard_index=shard,
                              num_shards=shards, window_start_monotonic_ns=10 + shard))
    return out


class FakeLoad:
    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages
        self.jobs: list[WindowJob] = []

    def prepare(self, job: WindowJob, warmup_requests: int, timeout_s: Optional[float] = None,
                flush_cache: bool = True) -> Prepared:
        return Prepared(warmup_requests, True)

    def stream(self, job: WindowJob) -> Iterator[Any]:
        self.jobs.append(job)
        return iter(self.messages)


class FakeEngine:
    def alive(self, settle_s: float = 0.0) -> bool:
        return True

    def telemetry_start(self, rate_hz: float) -> Optional[str]:
        return "no GPU here"

    def telemetry_stop(self) -> None:
        return None


def _plan() -> tuple[Any, RunPlan]:
    spec = parse_spec_text(SPEC)
    return spec, make_plan(spec)[0]


def test_the_driver_reads_nothing_back_and_builds_the_row_the_read_back_built(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    spec, p = _plan()
    records = _records(p.workload.num_requests, 3)
    loads = [FakeLoad(_shard_stream(records, i, 2, batch_rows=7)) for i in range(2)]
    store = DatasetStore(str(tmp_path / "out"), spec.name)
    writer = RunWriter(store, p)
    runner = PointRunner(spec, store, None, SharedNodes(), print, lambda e: None, False, 4096,  # type: ignore[arg-type]
                         lambda *a: None)  # type: ignore[arg-type,return-value]
    start = ServerStart(p.variant, None, SEGMENT, FakeEngine(), loads, SERVER)  # type: ignore[arg-type]

    def no_read_back(*a: Any, **kw: Any) -> Any:
        raise AssertionError("the driver read the spooled window back")

    monkeypatch.setattr(RunWriter, "read", no_read_back)
    out = runner._stream_window(p, start, SERVER, FakeEngine(), writer)  # type: ignore[arg-type]
    monkeypatch.undo()
    # one job, built once from the plan, split into the two shards
    assert [(j.shard_index, j.num_shards, j.workload) for lo in loads for j in lo.jobs] == [(0, 2, p.workload),
                                                                                          (1, 2, p.workload)]
    assert out.n_requests == 60 and out.num_shards == 2 and out.warmup_ok == spec.warmup_requests and out.flushed

    # the read-back the driver did before: the spooled tables, and the merged window built from them
    requests, chunks = writer.read("requests"), writer.read("chunks")
    assert requests.num_rows == 60 and chunks.num_rows == sum(len(r.chunk_arrival_ns) for r in records)
    lag = requests_lag(requests)  # what the driver computed from the read-back, beside the runs row's own
    assert lag is not None
    read_back = replace(out, requests=requests, chunks=chunks, token_chunks=None, lag_p50_ns=round(lag.p50_ns),
                        lag_p99_ns=round(lag.p99_ns), lag_max_ns=round(lag.max_ns))
    assert out.requests.select(REQUEST_COLUMNS := out.requests.schema.names).equals(requests.select(REQUEST_COLUMNS))
    row, before = (build_run_row(p, w, SERVER, SEGMENT, spec, [], None) for w in (out, read_back))
    assert json.loads(row.metrics_json)["itl_token_ms_mean"] is not None
    assert row == before
    # the client lag the row stores and judges, computed once over every shard's rows
    assert json.loads(row.metrics_json)["lag_ms_p99"] == lag.p99_ns / 1e6 > 0
    writer.abort()


def test_token_chunks_in_any_batch_order_give_every_figure_bit_for_bit() -> None:
    records = _records(200, 11)
    batches = [m for s in range(3) for m in _shard_stream(records, s, 3, batch_rows=5) if isinstance(m, LoadBatch)]
    random.Random(2).shuffle(batches)
    summary = WindowSummary()
    for b in batches:
        summary.add(b.requests, b.chunks)
    requests = pa.Table.from_batches([b.requests for b in batches])
    chunks = pa.Table.from_batches([b.chunks for b in batches])
    whole = summarize_run(requests, chunks, 2.5)
    streamed = summarize_run(summary.requests(), summary.token_chunks(), 2.5)
    assert json.dumps(streamed, sort_keys=True) == json.dumps(whole, sort_keys=True)


def test_an_empty_window_summarises_to_no_rows() -> None:
    tc = WindowSummary().token_chunks()
    assert WindowSummary().requests().num_rows == 0 and tc.request_index.size == tc.arrival_ns.size == 0
