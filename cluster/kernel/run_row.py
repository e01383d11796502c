"""The `runs` table's vocabulary: the typed row (RunRow, one field per column, after the KEY_FIELDS every table
shares), the run metrics it stores as `m_<name>` float64 columns (RUN_METRIC_NAMES), and the Arrow schema they make
(RUN_FIELDS and RUNS_SCHEMA, derived from RunRow's fields).

Adding a runs column is a one-place change: a field of RunRow declared with column(pa.<type>()); the builder
(cluster/analysis/run_row.py) sets it, the store writes it, readers see it (a runs file written before it reads it
as null, so RECORD_SCHEMA_VERSION stays).

Each metric is declared once, in cluster/analysis/metric_catalog.py. The names here are the runs schema's fixed m_
columns, in their order (the dataset writes and reads them without importing analysis; the catalog is tested to
declare exactly these first): a metric declared after them is stored as an extra m_ column, so adding one never
edits this module."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, Mapping, Optional, get_args

import pyarrow as pa

from cluster.kernel.records import KEY_FIELDS

_STATS = ("mean", "p50", "p90", "p99")
_LATENCIES = ("ttft_ms", "e2e_ms", "tpot_ms", "itl_chunk_ms", "itl_token_ms")
"""The per-request latency quantities (cluster/analysis/request_metrics.py: TTFT, E2E, TPOT, ITL_CHUNK, ITL_TOKEN)."""

METRIC_NAMES: tuple[str, ...] = (
    "n_requests",
    "n_ok",
    "n_errors",
    "error_rate",
    *(f"{lat}_{s}" for lat in _LATENCIES for s in _STATS),
    "tokens_per_chunk_mean",
    "tokens_per_chunk_p50",
    "request_throughput_rps",
    "output_tok_s",
    "input_tok_s",
    "total_tok_s",
    "per_user_tok_s_mean",
    "concurrency_mean",
    "accept_length",
    "sglang_accept_length",
    "accept_length_p10",
    "accept_length_p50",
    "accept_length_p90",
    "lag_ms_p50",
    "lag_ms_p99",
    "lag_ms_max",
    "slo_attainment",
    "goodput_rps",
    "prefix_hit_rate",
    "n_finish_stop",
    "n_finish_length",
    "eos_output_tokens_mean",
    "worker_imbalance",
)
"""The request metrics of the runs schema's fixed m_ columns, in order (declared in
cluster/analysis/metric_catalog.py, computed by metrics.summarize_run): the runs table stores each as `m_<name>`."""

GPU_METRIC_NAMES: tuple[str, ...] = (
    "gpu_energy_j",
    "gpu_power_w_mean",
    "energy_j_per_output_token",
    "output_tok_s_per_w",
    "sm_clock_mhz_mean",
    "sm_clock_mhz_min",
    "sm_clock_mhz_p10",
    "gpu_temperature_c_max",
    "gpu_throttled",
    "gpu_throttled_share",
    "gpu_samples",
)
"""The GPU figures of the runs schema's fixed m_ columns (declared in cluster/analysis/metric_catalog.py, computed
by gpu_metrics.summarize_gpu): the runs table stores each as `m_<name>`."""

RunStatus = Literal["ok", "invalid", "failed"]
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
"""The statuses a runs row may have."""


def _arrow(arrow_type: pa.DataType, nullable: bool = True) -> dict[str, object]:
    return {"arrow": arrow_type, "nullable": nullable}


def column(arrow_type: pa.DataType, nullable: bool = True) -> Any:
    """A runs column of this Arrow type: None by default (a runs file written before it reads it as null)."""
    return field(default=None, metadata=_arrow(arrow_type, nullable))


@dataclass(frozen=True, kw_only=True)
class RunRow:
    """One run's row of the `runs` table, as the row's builder (cluster/analysis/run_row.py) hands it to the store.

    Adding a column is a one-place change: a field here, `name: Optional[T] = column(pa.<type>())`, in the place
    the column should take; RUN_FIELDS and RUNS_SCHEMA are derived from these fields (a field without an Arrow type
    is refused at import), and the store writes every field. The m_ columns come from `metrics`.
    """

    status: RunStatus = field(metadata=_arrow(pa.string(), nullable=False))
    """ok | invalid (measured, not vouched for: invalid_reasons says why) | failed (not measured: retried)"""
    failure_reason: Optional[str] = column(pa.string())
    invalid_reasons: Optional[str] = column(pa.string())
    log_tail: Optional[str] = column(pa.string())
    seed: Optional[int] = column(pa.int64(), nullable=False)
    """None: the plan's (DatasetStore.runs_row fills it, as every field its defaults name)."""
    order_index: Optional[int] = column(pa.int32(), nullable=False)
    window_start_unix_s: Optional[float] = column(pa.float64())
    duration_s: Optional[float] = column(pa.float64())
    n_requests: Optional[int] = column(pa.int32())
    n_ok: Optional[int] = column(pa.int32())
    n_errors: Optional[int] = column(pa.int32())
    input_tokens: Optional[int] = column(pa.int32())
    output_tokens: Optional[int] = column(pa.int32())
    max_tokens: Optional[int] = column(pa.int32())
    tp: Optional[int] = column(pa.int32())
    variant_family: Optional[str] = column(pa.string())
    is_baseline: Optional[bool] = column(pa.bool_())
    spec_algorithm: Optional[str] = column(pa.string())
    spec_num_steps: Optional[int] = column(pa.int32())
    spec_num_draft_tokens: Optional[int] = column(pa.int32())
    metrics_json: Optional[str] = column(pa.string())
    """Every metric of the run as JSON (None: written from `metrics`; `metrics` empty: read back from it)."""
    server_counters_json: Optional[str] = column(pa.string())
    provenance_json: Optional[str] = column(pa.string())
    launch_argv_json: Optional[str] = column(pa.string())
    resolved_args_json: Optional[str] = column(pa.string())
    shared_node_with: Optional[str] = column(pa.string())
    gpu_ids: Optional[str] = column(pa.string())
    node: Optional[str] = column(pa.string())
    engine_version: Optional[str] = column(pa.string())
    sglbench_version: Optional[str] = column(pa.string())
    git_sha: Optional[str] = column(pa.string())
    tuning_artifact: Optional[str] = column(pa.string())
    # the workload audit (cluster/analysis/workload_audit.py): what the run sent against what its source planned
    distinct_prompts_sent: Optional[int] = column(pa.int32())
    distinct_prompts_planned: Optional[int] = column(pa.int32())
    input_tokens_sent_p10: Optional[float] = column(pa.float64())
    input_tokens_sent_p50: Optional[float] = column(pa.float64())
    input_tokens_sent_p90: Optional[float] = column(pa.float64())
    input_tokens_selection_p10: Optional[float] = column(pa.float64())
    input_tokens_selection_p50: Optional[float] = column(pa.float64())
    input_tokens_selection_p90: Optional[float] = column(pa.float64())
    category_shares_sent: Optional[str] = column(pa.string())
    """JSON {category: share}; "-" is no category"""
    category_shares_selection: Optional[str] = column(pa.string())
    # the steady-state stretch (cluster/analysis/steady_state.py): bounds in ns on the window's clock, figures inside
    steady_start_ns: Optional[int] = column(pa.int64())
    steady_end_ns: Optional[int] = column(pa.int64())
    steady_share: Optional[float] = column(pa.float64())
    """(steady_end_ns - steady_start_ns) / the window's duration"""
    steady_output_tps: Optional[float] = column(pa.float64())
    steady_tpot_ms: Optional[float] = column(pa.float64())
    steady_accept_length: Optional[float] = column(pa.float64())
    steady_requests: Optional[int] = column(pa.int32())
    """ok requests decoded inside the stretch"""
    steady_rule: Optional[str] = column(pa.string())
    """the rule that chose it, with its numbers"""
    launched_by_sglbench: Optional[bool] = column(pa.bool_())
    """False: the variant is an endpoint already running (nothing launched, killed or flushed without leave); null in
    runs files written before the column, all of whose servers sglbench launched"""
    endpoint_url: Optional[str] = column(pa.string())
    """The endpoint's URL (never its key), for a variant that is an endpoint already running"""
    worker_requests_json: Optional[str] = column(pa.string())
    """JSON {worker URL: requests it served} of a run behind a gateway (requests.worker; m_worker_imbalance is its
    imbalance); null when no request named a worker"""
    gpus: Optional[int] = column(pa.int32())
    """GPUs all the deployment's server processes held (ResolvedVariant.gpus; 0: an endpoint already running, whose
    GPUs are not sglbench's); null in runs files written before the column, each of one server holding its tp"""
    ttft_parts_json: Optional[str] = column(pa.string())
    """JSON of a prefill/decode run's TTFT split (cluster/analysis/ttft_parts.py): each role's mean per request of
    each stage its servers' histograms report over the window ({"prefill_bootstrap_s": ..., "counts": {...},
    "requests_counted": n}); null for a run that is not prefill/decode, or written before the column"""
    metrics: Mapping[str, Optional[float]] = field(default_factory=dict)
    """The run's metrics by name (RUN_METRIC_NAMES and any extra one): the m_<name> float64 columns, not a field of
    RUN_FIELDS."""


def arrow_fields(record: type, skip: frozenset[str] = frozenset({"metrics"})) -> list[pa.Field]:
    """The Arrow columns of a dataclass declared with column(): one per field but `skip`, in field order; a field
    without an Arrow type is a TypeError (it would silently be left out of the table)."""
    out = []
    for f in fields(record):
        if f.name in skip:
            continue
        if "arrow" not in f.metadata:
            raise TypeError(f"{record.__name__}.{f.name} has no Arrow type: declare it with column(pa.<type>())")
        out.append(pa.field(f.name, f.metadata["arrow"], nullable=bool(f.metadata["nullable"])))
    return out


RUN_FIELDS: list[pa.Field] = arrow_fields(RunRow)
"""Columns of the `runs` table after KEY_FIELDS, one per RunRow field. The audit's columns came last and are nullable: a runs file
written before them reads them as nulls, and RECORD_SCHEMA_VERSION stays 1 on purpose. It enters every run key
(cluster/plan/runs.py), so a bump would make a resubmission re-measure every finished run of an existing dataset
instead of reading it; additive nullable columns need no new key."""

RUN_METRIC_NAMES: tuple[str, ...] = METRIC_NAMES + GPU_METRIC_NAMES
"""The fixed m_ columns of `runs`: request metrics, then GPU figures."""
RUNS_SCHEMA = pa.schema(KEY_FIELDS + RUN_FIELDS + [pa.field(f"m_{n}", pa.float64()) for n in RUN_METRIC_NAMES])
