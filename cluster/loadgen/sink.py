"""Finished request records in columnar buffers, handed out as Arrow batches every `batch_rows` requests.

A window of a million requests must not keep a million Python records alive: each record leaves the hot path
as soon as its response ends, its scalars go into column lists and its chunk times into typed arrays, and every
`batch_rows` finished requests the buffers become one (requests, chunks) pair of Arrow batches that is either
handed to `on_batch` (streamed out of the load actor) or kept as compact Arrow memory. Per request the sink
keeps only its lag and end time (two int64 slots, preallocated) for the window summary.
"""

from __future__ import annotations

from array import array
from typing import Any, Callable, Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cluster.kernel.records import CHUNK_BATCH_SCHEMA, REQUEST_BATCH_SCHEMA, REQUEST_FIELDS, RequestRecord
from cluster.kernel.window_job import DEFAULT_BATCH_ROWS

BatchCallback = Callable[[pa.RecordBatch, pa.RecordBatch], None]
"""Called with (requests batch, chunks batch) in REQUEST_BATCH_SCHEMA / CHUNK_BATCH_SCHEMA."""


_SCALARS = [f.name for f in REQUEST_FIELDS]


class RecordSink:
    """Collects finished RequestRecords; flushes them as Arrow batches of at most `batch_rows` requests."""

    def __init__(self, expected: int, batch_rows: int = DEFAULT_BATCH_ROWS,
                 on_batch: Optional[BatchCallback] = None) -> None:
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
        self.batch_rows = batch_rows
        self.on_batch = on_batch
        self.kept: list[tuple[pa.RecordBatch, pa.RecordBatch]] = []
        self.lag_ns = np.zeros(expected, dtype=np.int64)
        self.rows = 0
        self.chunk_rows = 0
        self.batches = 0
        self.peak_buffered_rows = 0
        self.last_end_ns = 0
        self._reset()
        # pyarrow imports pandas at its first conversion of a Python sequence (0.2-0.3 s here): made now, before a
        # window, so it is not the first flush's, inside one, where the stalled loop merged every stream's events
        pa.array([], type=pa.int64())

    def _reset(self) -> None:
        self._cols: dict[str, list[Any]] = {name: [] for name in _SCALARS}
        self._ch_req = array("i")
        self._ch_idx = array("i")
        self._ch_t = array("q")
        self._ch_tok = array("i")
        self._buffered = 0

    def add(self, rec: RequestRecord, end_ns: int) -> None:
        """Take one finished record (and its response end, ns from window start); flush when the batch is full."""
        arrivals = rec.chunk_arrival_ns
        tokens = rec.chunk_tokens
        n = len(arrivals)
        c = self._cols
        c["request_index"].append(rec.request_index)
        c["intended_send_ns"].append(rec.intended_send_ns)
        c["actual_send_ns"].append(rec.actual_send_ns)
        # the first token-bearing chunk (TTFT, cluster/analysis/request_metrics.py); the client records only those,
        # so the scan runs only for hand-built records that open with a token-less chunk
        first = None if not n else arrivals[0] if tokens[0] else next((t for t, k in zip(arrivals, tokens) if k),
                                                                      arrivals[0])
        c["first_chunk_ns"].append(first)
        c["last_chunk_ns"].append(arrivals[-1] if n else None)
        c["num_chunks"].append(n)
        c["client_tokens"].append(sum(tokens))
        c["prompt_tokens_sent"].append(rec.prompt_tokens_sent)
        c["max_tokens"].append(rec.max_tokens)
        c["prompt_tokens"].append(rec.prompt_tokens)
        c["completion_tokens"].append(rec.completion_tokens)
        c["cached_tokens"].append(rec.cached_tokens)
        c["spec_verify_ct"].append(rec.spec_verify_ct)
        c["finish_reason"].append(rec.finish_reason)
        c["error"].append(rec.error)
        c["http_status"].append(rec.http_status)
        c["category"].append(rec.category)
        c["session_index"].append(rec.session_index)
        c["turn"].append(rec.turn)
        c["source_row"].append(rec.source_row)
        c["prompt_fingerprint"].append(rec.prompt_fingerprint)
        c["spec_correct_drafts_histogram"].append(rec.spec_correct_drafts_histogram)
        c["worker"].append(rec.worker)
        if n:
            self._ch_req.extend([rec.request_index] * n)
            self._ch_idx.extend(range(n))
            self._ch_t.extend(arrivals)
            self._ch_tok.extend(tokens)
            if arrivals[-1] > end_ns:
                end_ns = arrivals[-1]
        if self.rows < len(self.lag_ns):
            self.lag_ns[self.rows] = rec.actual_send_ns - rec.intended_send_ns
        if end_ns > self.last_end_ns:
            self.last_end_ns = end_ns
        self.rows += 1
        self.chunk_rows += n
        self._buffered += 1
        if self._buffered > self.peak_buffered_rows:
            self.peak_buffered_rows = self._buffered
        if self._buffered >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        """Hand the buffered rows out as one batch pair (no-op when empty)."""
        if not self._buffered:
            return
        reqs = pa.RecordBatch.from_pydict(self._cols, schema=REQUEST_BATCH_SCHEMA)
        chunks = pa.RecordBatch.from_arrays(
            [
                pa.array(np.frombuffer(self._ch_req, dtype=np.int32)),
                pa.array(np.frombuffer(self._ch_idx, dtype=np.int32)),
                pa.array(np.frombuffer(self._ch_t, dtype=np.int64)),
                pa.array(np.frombuffer(self._ch_tok, dtype=np.int32)),
            ],
            schema=CHUNK_BATCH_SCHEMA,
        )
        self._reset()
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(reqs, chunks)
        else:
            self.kept.append((reqs, chunks))

    def kept_batches(self) -> tuple[pa.RecordBatch, pa.RecordBatch]:
        """Everything kept (on_batch unset) as one batch pair sorted by request_index; empty batches otherwise."""
        if not self.kept:
            return _empty_pair()
        reqs = pa.Table.from_batches([r for r, _ in self.kept], schema=REQUEST_BATCH_SCHEMA)
        chunks = pa.Table.from_batches([c for _, c in self.kept], schema=CHUNK_BATCH_SCHEMA)
        self.kept = []
        order = pc.sort_indices(reqs, sort_keys=[("request_index", "ascending")])
        reqs = reqs.take(order).combine_chunks()
        corder = pc.sort_indices(chunks, sort_keys=[("request_index", "ascending"),
                                                            ("chunk_index", "ascending")])
        chunks = chunks.take(corder).combine_chunks()
        return _one_batch(reqs, REQUEST_BATCH_SCHEMA), _one_batch(chunks, CHUNK_BATCH_SCHEMA)

    def lags(self) -> np.ndarray:
        return self.lag_ns[: min(self.rows, len(self.lag_ns))]


def _one_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    batches = table.to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(batches) == 1:
        return batches[0]
    return pa.concat_batches(batches)


def _empty_pair() -> tuple[pa.RecordBatch, pa.RecordBatch]:
    return (pa.RecordBatch.from_pylist([], schema=REQUEST_BATCH_SCHEMA),
            pa.RecordBatch.from_pylist([], schema=CHUNK_BATCH_SCHEMA))


def request_batches(records: Iterable[RequestRecord]) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """RequestRecords → (requests batch, chunks batch), sorted by request_index, through the load generator's own
    columnar sink, so hand-built records in tests take the production path."""
    recs = list(records)
    sink = RecordSink(len(recs), batch_rows=max(1, len(recs)))
    for r in recs:
        sink.add(r, r.chunk_arrival_ns[-1] if r.chunk_arrival_ns else r.actual_send_ns)
    sink.flush()
    return sink.kept_batches()
