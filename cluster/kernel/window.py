"""The measured window: one record for a load actor's shard of it (the load generator's answer, the actor's last
message to the driver) and for the whole window merged over its shards (what the runs row is built from).

Times ending in _ns are on the load actor's monotonic clock, relative to the window's start (its first intended
send); window_start_unix_s anchors that instant to wall-clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa

from cluster.kernel.eval_task import EvalAnswer
from cluster.kernel.output_sample import OutputSample
from cluster.kernel.planned_workload import PlannedWorkload
from cluster.kernel.records import Records
from cluster.kernel.telemetry_capture import TelemetryCapture


@dataclass(frozen=True)
class TokenChunks:
    """The token-bearing chunks of a window's ok requests in (request_index, chunk_index) order, as compact arrays:
    what the window's per-chunk figures (ITL per chunk and per token, tokens per chunk) are computed from, kept by
    the driver while the chunks stream past instead of the chunks table (analysis/metrics.token_chunks makes the
    same arrays from a table)."""

    request_index: np.ndarray
    arrival_ns: np.ndarray
    tokens: np.ndarray

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.request_index, self.arrival_ns, self.tokens


@dataclass(frozen=True)
class MeasuredWindow:
    """One measured window (or one shard of it): its records, timing, client lag, the server's counters around it."""

    requests: Records
    """kernel.records.REQUEST_BATCH_SCHEMA, one row per request sent, in request_index order: a shard's batch
    (empty when it streamed its rows out through on_batch; n_requests says how many left), or the merged window's
    committed rows."""
    chunks: Records
    """kernel.records.CHUNK_BATCH_SCHEMA: token-carrying chunks only (empty when streamed out, and in the merged
    window, whose per-chunk figures come from `token_chunks`)."""
    window_start_unix_s: float
    duration_s: float
    """First intended send → end of the last response of the window (of this shard)."""
    lag_p50_ns: int
    """Client send lag (kernel/window_figures.client_lag) over the rows this record keeps: a load generator's window
    returned whole; 0 when the rows streamed out, whose lag is computed once, by the runs row over every shard's rows
    (m_lag_ms_*), and so in the merged window too."""
    lag_p99_ns: int
    counters_before: dict[str, float]
    counters_after: dict[str, float]
    n_requests: int = 0
    n_chunks: int = 0
    batches: int = 0
    """Arrow batch pairs the window produced (handed to on_batch, or concatenated into requests/chunks)."""
    peak_buffered_rows: int = 0
    """Most finished requests held in a sink's columnar buffers at once (≤ batch_rows); merged: the largest shard's."""
    lag_max_ns: int = 0
    shard_index: int = 0
    num_shards: int = 1
    window_start_monotonic_ns: int = 0
    """time.monotonic_ns() at the window's start: the zero of every _ns time (GPU samples are aligned to it)."""
    samples: tuple[OutputSample, ...] = ()
    """The output sample of the requests (loadgen/output_sample.py), in request_index order."""
    eval_answers: tuple[EvalAnswer, ...] = ()
    """The accuracy task's answers sent beside the load (loadgen/eval.py); never among `requests`."""
    server_metrics: Optional[pa.RecordBatch] = None
    """The server's gauges scraped during the window (shard 0's scrape)."""
    selection: Optional[PlannedWorkload] = None
    """What the workload's prompt source offered (shard 0 only), which the requests sent are audited against
    (analysis/workload_audit.py); None: the window was not audited (hand-built windows)."""
    warmup_ok: int = 0
    """Warmup requests that succeeded before the window (the merged window's; 0 on a shard's)."""
    flushed: bool = False
    """The cache flush before the window succeeded (the merged window's: a shard's own record leaves it False, and a
    window that says False is judged invalid)."""
    gpu_metrics: Optional[pa.Table] = None
    """The window's GPU samples (records.GPU_METRIC_FIELDS), t_ns on the requests' zero; None without telemetry."""
    telemetry: Optional[TelemetryCapture] = None
    """How sampling went (source, rate, errors, why unavailable), for provenance."""
    event_loop: str = ""
    """The load generator's event loop, as `<module> <version>` (uvloop, a base dependency, in CI and on a node
    alike; a shard's, and the merged window's: every shard's, joined when they differ)."""
    token_chunks: Optional[TokenChunks] = None
    """The merged window's token-bearing chunks of ok requests, summarised by the driver as they streamed (then
    `chunks` is empty); None: the figures come from `chunks`."""
