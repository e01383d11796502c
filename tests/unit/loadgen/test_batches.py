"""Records leave the runner in bounded Arrow batches, shards split a window exactly, and client lag exposes overload.

The server is a minimal keep-alive HTTP/1.1 server on raw asyncio (in a thread, started and stopped here) that
answers every POST with a prebuilt SGLang-native stream, so the client, not the server, is the bottleneck.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import textwrap
import threading
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pytest

from cluster.engines.base import Prompt
from cluster.engines.sglang import SGLangEngine
from cluster.kernel.arrivals import poisson_offsets_ns
from cluster.loadgen.runner import run_load_point, shard_concurrency
from cluster.kernel.window_job import WindowJob
from cluster.loadgen.sink import RecordSink
from cluster.kernel.runs import LoadPoint
from cluster.kernel.records import CHUNK_BATCH_SCHEMA, REQUEST_BATCH_SCHEMA, RequestRecord

CHUNKS = 4


def sse_body(n: int) -> bytes:
    out = []
    for k in range(1, n + 1):
        fin = {"type": "length", "length": n} if k == n else None
        meta = {"id": "x", "finish_reason": fin, "prompt_tokens": 3, "completion_tokens": k, "cached_tokens": 0}
        out.append(b"data: " + json.dumps({"text": "t" * k, "output_ids": list(range(k)), "meta_info": meta}).encode()
                   + b"\n\n")
    return b"".join(out) + b"data: [DONE]\n\n"


class _Proto(asyncio.Protocol):
    def __init__(self, response: bytes) -> None:
        self.response = response
        self.buf = b""
        self.transport: Optional[asyncio.Transport] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].lower()
            i = head.find(b"content-length:")
            length = int(head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None]) if i >= 0 else 0
            if len(self.buf) < head_end + 4 + length:
                return
            self.buf = self.buf[head_end + 4 + length :]
            assert self.transport is not None
            self.transport.write(self.response)


class RawSSEServer:
    """Keep-alive HTTP/1.1 server answering every request with one prebuilt SSE stream."""

    def __init__(self, chunks: int = CHUNKS) -> None:
        body = sse_body(chunks)
        self.response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._server: Optional[asyncio.Server] = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> "RawSSEServer":
        self._thread.start()

        async def start() -> asyncio.Server:
            return await self.loop.create_server(lambda: _Proto(self.response), "127.0.0.1", 0)

        self._server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: Any) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _prompts(n: int) -> list[Prompt]:
    return [Prompt(input_ids=(100, 101, 102))] * n


def _run(url: str, n: int, load: LoadPoint, on_batch: Any = None, **kw: Any) -> Any:
    job = WindowJob(url, "native", CHUNKS, load, 7, True, 0.0, "m", 30.0, scrape_metrics=False, **kw)
    return run_load_point(SGLangEngine(), job, _prompts(n), on_batch=on_batch)


def test_twenty_thousand_requests_stream_out_in_bounded_batches_exactly_once() -> None:
    n, batch = 20_000, 1_000
    batches: list[tuple[pa.RecordBatch, pa.RecordBatch]] = []
    with RawSSEServer() as srv:
        res = _run(srv.url, n, LoadPoint("concurrency", 32.0), on_batch=lambda r, c: batches.append((r, c)),
                   batch_rows=batch)
    assert res.requests.num_rows == 0 and res.chunks.num_rows == 0  # everything left through on_batch
    assert res.n_requests == n and res.n_chunks == n * CHUNKS
    assert res.batches == len(batches) == n // batch
    assert res.peak_buffered_rows <= batch
    assert all(r.num_rows <= batch for r, _ in batches)
    assert all(r.schema == REQUEST_BATCH_SCHEMA and c.schema == CHUNK_BATCH_SCHEMA for r, c in batches)
    reqs = pa.Table.from_batches([r for r, _ in batches])
    chunks = pa.Table.from_batches([c for _, c in batches])
    idx = np.sort(reqs.column("request_index").to_numpy())
    assert np.array_equal(idx, np.arange(n))  # every request exactly once
    assert reqs.column("error").null_count == n
    assert set(reqs.column("num_chunks").to_pylist()) == {CHUNKS}
    assert chunks.num_rows == n * CHUNKS
    keys = chunks.column("request_index").to_numpy().astype(np.int64) * CHUNKS + chunks.column("chunk_index").to_numpy()
    assert np.array_equal(np.sort(keys), np.arange(n * CHUNKS))  # every chunk row exactly once
    assert set(chunks.column("tokens").to_pylist()) == {1}


def test_kept_batches_are_concatenated_in_request_order() -> None:
    with RawSSEServer() as srv:
        res = _run(srv.url, 300, LoadPoint("concurrency", 8.0), batch_rows=64)
    assert res.batches == 5 and res.peak_buffered_rows == 64
    assert res.requests.column("request_index").to_pylist() == list(range(300))
    assert res.chunks.num_rows == 300 * CHUNKS
    rc = list(zip(res.chunks.column("request_index").to_pylist(), res.chunks.column("chunk_index").to_pylist()))
    assert rc == [(i, k) for i in range(300) for k in range(CHUNKS)]


def test_sink_flushes_at_batch_rows_and_keeps_lags() -> None:
    got: list[int] = []
    sink = RecordSink(10, batch_rows=4, on_batch=lambda r, c: got.append(r.num_rows))
    for i in range(10):
        rec = RequestRecord(i, intended_send_ns=100 * i, actual_send_ns=100 * i + i, prompt_tokens_sent=1,
                            max_tokens=2, chunk_arrival_ns=[1000 + i, 2000 + i], chunk_tokens=[1, 1])
        sink.add(rec, end_ns=1500)
    sink.flush()
    assert got == [4, 4, 2] and sink.peak_buffered_rows == 4
    assert sink.lags().tolist() == list(range(10))
    assert sink.last_end_ns == 2009
    with pytest.raises(ValueError, match="batch_rows"):
        RecordSink(1, batch_rows=0)


def test_a_flush_inside_the_window_imports_nothing() -> None:
    """The first Arrow conversion imports pandas (0.2-0.3 s): a window past batch_rows requests had its loop stalled
    that long at its first flush, merging the events of every stream in flight (ITL max 260 ms at 256 streams).
    A fresh interpreter, since this one has imported pandas long ago."""
    code = textwrap.dedent("""
        import sys
        from cluster.kernel.records import RequestRecord
        from cluster.loadgen.sink import RecordSink
        sink = RecordSink(4, batch_rows=2)  # built before the window, as run_window does
        before = set(sys.modules)
        for i in range(4):
            rec = RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=3,
                                max_tokens=2)
            rec.chunk_arrival_ns, rec.chunk_tokens, rec.finish_reason = [5, 6], [1, 1], "length"
            sink.add(rec, 6)
        assert sink.batches == 2
        print(sorted(set(sys.modules) - before))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout[:500]


def test_the_window_runs_with_what_was_alive_before_it_frozen_out_of_the_collector() -> None:
    """A full collection over a process's modules and prompts stalled the loop 25-55 ms mid-window. Each request's
    body is built at its send: the collector's frozen set is non-empty there, and empty again after the window."""
    frozen: list[int] = []

    class Spy(SGLangEngine):
        def build_request(self, *a: Any, **kw: Any) -> Any:
            frozen.append(gc.get_freeze_count())
            return super().build_request(*a, **kw)

    before = gc.get_freeze_count()
    with RawSSEServer() as srv:
        res = run_load_point(Spy(), WindowJob(srv.url, "native", CHUNKS, LoadPoint("concurrency", 4.0), 7, True, 0.0,
                                              "m", 30.0, scrape_metrics=False), _prompts(20))
    assert res.n_requests == 20 and len(frozen) == 20
    assert min(frozen) > before
    assert gc.get_freeze_count() == before


def test_shards_split_a_window_exactly_on_the_global_schedule() -> None:
    n, shards, rate = 90, 3, 2000.0
    load = LoadPoint("rate", rate)
    parts = []
    with RawSSEServer() as srv:
        for s in range(shards):
            parts.append(_run(srv.url, n, load, shard_index=s, num_shards=shards))
    offsets = poisson_offsets_ns(n, rate, np.random.default_rng(7))
    seen: list[int] = []
    for s, res in enumerate(parts):
        idx = res.requests.column("request_index").to_pylist()
        assert idx == list(range(s, n, shards))
        assert res.requests.column("intended_send_ns").to_pylist() == offsets[s::shards].tolist()
        seen.extend(idx)
    assert sorted(seen) == list(range(n))
    assert [shard_concurrency(10, s, 3) for s in range(3)] == [4, 3, 3]
    with pytest.raises(ValueError, match="shard_index"):
        _run("http://127.0.0.1:9", 4, load, shard_index=3, num_shards=3)
    with pytest.raises(ValueError, match="below the number of shards"):
        _run("http://127.0.0.1:9", 4, LoadPoint("concurrency", 1.0), shard_index=1, num_shards=2)


def test_closed_loop_shards_share_the_concurrency_and_cover_every_request() -> None:
    n = 200
    with RawSSEServer() as srv:
        parts = [_run(srv.url, n, LoadPoint("concurrency", 8.0), shard_index=s, num_shards=2) for s in range(2)]
    idx = sorted(i for res in parts for i in res.requests.column("request_index").to_pylist())
    assert idx == list(range(n))
    assert all(res.n_chunks == (n // 2) * CHUNKS for res in parts)


def test_lag_exposes_a_client_driven_past_its_capacity() -> None:
    # 3000 requests at 1M req/s: no client sends that fast, so actual sends fall far behind the schedule
    n = 3000
    with RawSSEServer() as srv:
        res = _run(srv.url, n, LoadPoint("rate", 1_000_000.0))
    assert res.n_requests == n
    sched_span_ms = poisson_offsets_ns(n, 1_000_000.0, np.random.default_rng(7))[-1] / 1e6
    assert sched_span_ms < 5
    assert res.lag_p99_ns / 1e6 > 10.0  # beyond the runs table's default max_client_lag_ms
    assert res.lag_max_ns >= res.lag_p99_ns >= res.lag_p50_ns > 0
    assert res.duration_s * 1000 > 5 * sched_span_ms  # the window took far longer than the schedule intended


def test_prompt_array_holds_the_same_prompts_compactly(tmp_path: Any) -> None:
    from cluster.loadgen.datasets import PromptArray
    from cluster.loadgen.prompt_sources import build_prompt_sequence, build_prompts
    from cluster.config.workload import WorkloadSpec

    wl = WorkloadSpec.model_validate({"name": "w", "input_tokens": 16, "output_tokens": 4, "num_requests": 50})
    seq = build_prompt_sequence(wl, 50, 11, tmp_path)
    assert isinstance(seq, PromptArray) and seq.ids.dtype == np.int32
    assert list(seq) == build_prompts(wl, 50, 11, tmp_path)
    assert list(seq[10:13]) == build_prompts(wl, 50, 11, tmp_path)[10:13]
