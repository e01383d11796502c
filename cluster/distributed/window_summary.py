"""The driver's summary of one measured window, made while its shards' record batches stream past on their way to
the dataset: the run row is built from it, so the driver never reads the spooled requests or chunks back.

It keeps each request row (one per request: what the run row's per-request figures, the steady state and the
workload audit read) and, of the chunks, only the token-bearing chunks of ok requests as three compact arrays
(16 bytes a chunk: what ITL and tokens per chunk are computed from, exactly as from the chunks table). The window's
figures are computed once: the merge of the shards' own records here, the client lag over every shard's rows by the
runs row (a load actor whose rows streamed out leaves it to that)."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from cluster.analysis.metrics import token_chunks
from cluster.analysis.request_metrics import request_columns
from cluster.kernel.records import CHUNK_BATCH_SCHEMA, REQUEST_BATCH_SCHEMA
from cluster.kernel.telemetry_capture import TelemetryCapture
from cluster.kernel.window import MeasuredWindow, TokenChunks


class WindowSummary:
    """Folds a window's (requests, chunks) batch pairs in as they arrive; `merged` makes the window's record."""

    def __init__(self) -> None:
        self._requests: list[pa.RecordBatch] = []
        self._req: list[np.ndarray] = []
        self._t: list[np.ndarray] = []
        self._tok: list[np.ndarray] = []

    def add(self, requests: pa.RecordBatch, chunks: pa.RecordBatch) -> None:
        """One batch pair out of a load actor's sink: a request's chunks always travel with its row."""
        self._requests.append(requests)
        c_req, c_t, c_tok = token_chunks(requests, chunks, request_columns(requests).ok)
        self._req.append(c_req.astype(np.int32))
        self._t.append(c_t)
        self._tok.append(c_tok.astype(np.int32))

    def requests(self) -> pa.Table:
        """Every request row streamed so far, in the order they were written."""
        return pa.Table.from_batches(self._requests, schema=REQUEST_BATCH_SCHEMA)

    def token_chunks(self) -> TokenChunks:
        """The token-bearing chunks of ok requests over every batch, in (request, chunk) order: each batch's are in
        that order already and a request's chunks never span two batches, so a stable sort by request suffices."""
        req = np.concatenate(self._req) if self._req else np.zeros(0, dtype=np.int32)
        t = np.concatenate(self._t) if self._t else np.zeros(0, dtype=np.int64)
        tok = np.concatenate(self._tok) if self._tok else np.zeros(0, dtype=np.int32)
        self._req, self._t, self._tok = [], [], []
        if req.size > 1 and not np.all(req[1:] >= req[:-1]):
            order = np.argsort(req, kind="stable")
            req, t, tok = req[order], t[order], tok[order]
        return TokenChunks(req, t, tok)

    def merged(self, shards: Sequence[MeasuredWindow], warmup_ok: int, flushed: bool,
               telemetry: Optional[TelemetryCapture]) -> MeasuredWindow:
        """The whole window from its shards' own records (shard 0 first) and the rows that streamed past."""
        first = shards[0]
        t0 = min(x.window_start_unix_s for x in shards)
        t0_mono = min(shards, key=lambda x: x.window_start_unix_s).window_start_monotonic_ns
        gpu = telemetry.aligned(t0_mono) if telemetry is not None and telemetry.samples.num_rows else None
        return MeasuredWindow(
            requests=self.requests(),
            chunks=pa.RecordBatch.from_pylist([], schema=CHUNK_BATCH_SCHEMA),
            token_chunks=self.token_chunks(),
            window_start_unix_s=t0,
            duration_s=max(x.window_start_unix_s + x.duration_s for x in shards) - t0,
            lag_p50_ns=0,  # the runs row computes the window's lag over these rows (m_lag_ms_*), once
            lag_p99_ns=0,
            counters_before=first.counters_before,
            counters_after=first.counters_after,
            warmup_ok=warmup_ok,
            flushed=flushed,
            n_requests=sum(x.n_requests for x in shards),
            n_chunks=sum(x.n_chunks for x in shards),
            batches=sum(x.batches for x in shards),
            peak_buffered_rows=max(x.peak_buffered_rows for x in shards),
            num_shards=len(shards),
            window_start_monotonic_ns=t0_mono,
            server_metrics=first.server_metrics,
            gpu_metrics=gpu,
            telemetry=telemetry,
            samples=tuple(sorted((x for sm in shards for x in sm.samples), key=lambda x: x.request_index)),
            selection=first.selection,
            event_loop=" / ".join(sorted({x.event_loop for x in shards})),
        )
