"""Record schemas (Arrow) of the dataset tables, with the raw per-request record the load generator fills.

Times are int64 nanoseconds on the load actor's monotonic clock, relative to the run's measured-window start
(`runs.window_start_unix_s` anchors that instant to wall-clock). Every table carries `schema_version`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import pyarrow as pa

from cluster.kernel.runs import RECORD_SCHEMA_VERSION

SCHEMA_VERSION = RECORD_SCHEMA_VERSION

Records = Union[pa.Table, pa.RecordBatch]
"""Rows of one table as Arrow: a whole table or one batch of it (both have num_rows, column, schema)."""

# columns every table shares, filled by the store from the RunPlan
KEY_FIELDS = [
    pa.field("run_key", pa.string(), nullable=False),
    pa.field("experiment", pa.string(), nullable=False),
    pa.field("variant", pa.string(), nullable=False),
    pa.field("engine", pa.string(), nullable=False),
    pa.field("workload", pa.string(), nullable=False),
    pa.field("load_kind", pa.string(), nullable=False),
    pa.field("load_value", pa.float64(), nullable=False),
    pa.field("repeat", pa.int32(), nullable=False),
    pa.field("schema_version", pa.int32(), nullable=False),
]

REQUEST_FIELDS = [
    pa.field("request_index", pa.int32(), nullable=False),
    pa.field("intended_send_ns", pa.int64(), nullable=False),
    pa.field("actual_send_ns", pa.int64(), nullable=False),
    pa.field("first_chunk_ns", pa.int64()),
    pa.field("last_chunk_ns", pa.int64()),
    pa.field("num_chunks", pa.int32(), nullable=False),
    pa.field("client_tokens", pa.int32(), nullable=False),
    pa.field("prompt_tokens_sent", pa.int32(), nullable=False),
    pa.field("max_tokens", pa.int32(), nullable=False),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("completion_tokens", pa.int32()),
    pa.field("cached_tokens", pa.int32()),
    pa.field("spec_verify_ct", pa.int32()),
    pa.field("finish_reason", pa.string()),
    pa.field("error", pa.string()),
    pa.field("http_status", pa.int32()),
    pa.field("category", pa.string()),
    pa.field("session_index", pa.int32()),
    pa.field("turn", pa.int32()),
    pa.field("source_row", pa.int32()),
    pa.field("prompt_fingerprint", pa.int64()),
    pa.field("spec_correct_drafts_histogram", pa.list_(pa.int32())),
    pa.field("worker", pa.string()),
]
"""Per-request columns (the `requests` table, after KEY_FIELDS). `source_row` and `prompt_fingerprint` came
last (the workload audit), then `spec_correct_drafts_histogram` (acceptance per draft position), then `worker` (the
gateway's worker that served it): a dataset written before them reads them as nulls."""

CHUNK_FIELDS = [
    pa.field("request_index", pa.int32(), nullable=False),
    pa.field("chunk_index", pa.int32(), nullable=False),
    pa.field("arrival_ns", pa.int64(), nullable=False),
    pa.field("tokens", pa.int32(), nullable=False),
]
"""Per-chunk arrivals (the `chunks` table, after KEY_FIELDS): kept apart so summaries never scan them."""

GPU_METRIC_FIELDS = [
    pa.field("t_ns", pa.int64(), nullable=False),
    pa.field("gpu", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("power_w", pa.float64()),
    pa.field("energy_j", pa.float64()),
    pa.field("sm_clock_mhz", pa.int32()),
    pa.field("mem_clock_mhz", pa.int32()),
    pa.field("temperature_c", pa.int32()),
    pa.field("gpu_util_pct", pa.int32()),
    pa.field("mem_util_pct", pa.int32()),
    pa.field("mem_used_bytes", pa.int64()),
    pa.field("pcie_tx_kb_s", pa.int64()),
    pa.field("pcie_rx_kb_s", pa.int64()),
    pa.field("clock_event_reasons", pa.int64()),
    pa.field("throttle_thermal", pa.bool_()),
    pa.field("throttle_power", pa.bool_()),
]
"""GPU telemetry samples of a run (the `gpu_metrics` table, after KEY_FIELDS): one row per GPU per sample, `t_ns` on
the same monotonic clock and zero as the requests (samples just before and after the window are kept)."""

KERNEL_PROFILE_FIELDS = [
    pa.field("experiment", pa.string(), nullable=False),
    pa.field("engine", pa.string(), nullable=False),
    pa.field("profile_steps", pa.int32(), nullable=False),
    pa.field("rank", pa.int32(), nullable=False),
    pa.field("kernel", pa.string(), nullable=False),
    pa.field("category", pa.string(), nullable=False),
    pa.field("calls", pa.int64(), nullable=False),
    pa.field("total_us", pa.float64(), nullable=False),
    pa.field("share", pa.float64(), nullable=False),
    pa.field("trace_file", pa.string(), nullable=False),
    pa.field("artifact", pa.string()),
    pa.field("simulated", pa.bool_(), nullable=False),
    pa.field("level", pa.string(), nullable=False),
]
"""Top kernels by device time of a variant's profile (the `kernel_profile` table: one file per variant, like
`correctness`; the variant is the hive partition)."""

REQUEST_BATCH_SCHEMA = pa.schema(REQUEST_FIELDS)
CHUNK_BATCH_SCHEMA = pa.schema(CHUNK_FIELDS)
REQUESTS_SCHEMA = pa.schema(KEY_FIELDS + REQUEST_FIELDS)
CHUNKS_SCHEMA = pa.schema(KEY_FIELDS + CHUNK_FIELDS)
GPU_METRICS_BATCH_SCHEMA = pa.schema(GPU_METRIC_FIELDS)
GPU_METRICS_SCHEMA = pa.schema(KEY_FIELDS + GPU_METRIC_FIELDS)
KERNEL_PROFILE_SCHEMA = pa.schema(KERNEL_PROFILE_FIELDS)


@dataclass
class RequestRecord:
    """The raw record of one request, as the load generator sees it."""

    request_index: int
    intended_send_ns: int
    actual_send_ns: int
    prompt_tokens_sent: int
    max_tokens: int
    chunk_arrival_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    cached_tokens: Optional[int] = None
    spec_verify_ct: Optional[int] = None
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    http_status: Optional[int] = None
    category: Optional[str] = None
    """The prompt's category (a dataset row's, e.g. code or chat); None when the prompt source has none."""
    session_index: Optional[int] = None
    """The multi-turn session the request belongs to (cluster/loadgen/sessions.py); None outside sessions."""
    turn: Optional[int] = None
    """The request's turn in its session, 1 for the first; None outside sessions."""
    source_row: Optional[int] = None
    """The row of its prompt source the prompt came from (Prompt.source_row); None when the source has none."""
    prompt_fingerprint: Optional[int] = None
    """blake2b-64 of what was sent (token ids, else text; cluster/loadgen/selection.py); None when not sent."""
    spec_correct_drafts_histogram: Optional[list[int]] = None
    """The server's verify steps by drafts accepted (RequestMeta's field); None when the server sent none."""
    worker: Optional[str] = None
    """The worker that served it, as the gateway in front named it (engines/gateway.py ROUTED_WORKER_HEADER: its
    URL); None when no gateway routed it (one server, an endpoint, or the gateway's own error)."""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_arrival_ns)
