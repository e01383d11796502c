"""The `runs` table's vocabulary: its columns (RUN_FIELDS, after the KEY_FIELDS every table shares) and the run
metrics it stores as `m_<name>` float64 columns (RUN_METRIC_NAMES), with the Arrow schema they make (RUNS_SCHEMA).

The metrics are computed and defined in cluster/analysis/metrics.py and gpu_metrics.py (their *_DEFINITIONS, tested
to cover exactly these names); their names live here, below the dataset, because the dataset stores and checks
those columns without importing analysis."""

from __future__ import annotations

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
)
"""Every key cluster/analysis/metrics.py summarize_run returns (defined there, METRIC_DEFINITIONS), in a stable
order: the runs table stores each as `m_<name>`."""

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
"""Every key cluster/analysis/gpu_metrics.py summarize_gpu returns (defined there, GPU_METRIC_DEFINITIONS): the runs
table stores each as `m_<name>`."""

RUN_FIELDS = [
    pa.field("status", pa.string(), nullable=False),  # ok | failed | invalid
    pa.field("failure_reason", pa.string()),
    pa.field("invalid_reasons", pa.string()),
    pa.field("log_tail", pa.string()),
    pa.field("seed", pa.int64(), nullable=False),
    pa.field("order_index", pa.int32(), nullable=False),
    pa.field("window_start_unix_s", pa.float64()),
    pa.field("duration_s", pa.float64()),
    pa.field("n_requests", pa.int32()),
    pa.field("n_ok", pa.int32()),
    pa.field("n_errors", pa.int32()),
    pa.field("input_tokens", pa.int32()),
    pa.field("output_tokens", pa.int32()),
    pa.field("max_tokens", pa.int32()),
    pa.field("tp", pa.int32()),
    pa.field("variant_family", pa.string()),
    pa.field("is_baseline", pa.bool_()),
    pa.field("spec_algorithm", pa.string()),
    pa.field("spec_num_steps", pa.int32()),
    pa.field("spec_num_draft_tokens", pa.int32()),
    pa.field("metrics_json", pa.string()),  # every metric of the run (RUN_METRIC_NAMES and any extra: also m_* columns)
    pa.field("server_counters_json", pa.string()),
    pa.field("provenance_json", pa.string()),
    pa.field("launch_argv_json", pa.string()),
    pa.field("resolved_args_json", pa.string()),
    pa.field("shared_node_with", pa.string()),
    pa.field("gpu_ids", pa.string()),
    pa.field("node", pa.string()),
    pa.field("engine_version", pa.string()),
    pa.field("sglbench_version", pa.string()),
    pa.field("git_sha", pa.string()),
    pa.field("tuning_artifact", pa.string()),
    # the workload audit (cluster/analysis/workload_audit.py): what the run sent against what its source planned
    pa.field("distinct_prompts_sent", pa.int32()),
    pa.field("distinct_prompts_planned", pa.int32()),
    pa.field("input_tokens_sent_p10", pa.float64()),
    pa.field("input_tokens_sent_p50", pa.float64()),
    pa.field("input_tokens_sent_p90", pa.float64()),
    pa.field("input_tokens_selection_p10", pa.float64()),
    pa.field("input_tokens_selection_p50", pa.float64()),
    pa.field("input_tokens_selection_p90", pa.float64()),
    pa.field("category_shares_sent", pa.string()),  # JSON {category: share}; "-" is no category
    pa.field("category_shares_selection", pa.string()),
    # the steady-state stretch (cluster/analysis/steady_state.py): bounds in ns on the window's clock, figures inside
    pa.field("steady_start_ns", pa.int64()),
    pa.field("steady_end_ns", pa.int64()),
    pa.field("steady_share", pa.float64()),  # (steady_end_ns - steady_start_ns) / the window's duration
    pa.field("steady_output_tps", pa.float64()),
    pa.field("steady_tpot_ms", pa.float64()),
    pa.field("steady_accept_length", pa.float64()),
    pa.field("steady_requests", pa.int32()),  # ok requests decoded inside the stretch
    pa.field("steady_rule", pa.string()),  # the rule that chose it, with its numbers
]
"""Columns of the `runs` table after KEY_FIELDS. The audit's columns came last and are nullable: a runs file
written before them reads them as nulls, and RECORD_SCHEMA_VERSION stays 1 on purpose. It enters every run key
(cluster/plan/runs.py), so a bump would make a resubmission re-measure every finished run of an existing dataset
instead of reading it; additive nullable columns need no new key."""


RUN_METRIC_NAMES: tuple[str, ...] = METRIC_NAMES + GPU_METRIC_NAMES
"""The fixed m_ columns of `runs`: request metrics, then GPU figures."""
RUNS_SCHEMA = pa.schema(KEY_FIELDS + RUN_FIELDS + [pa.field(f"m_{n}", pa.float64()) for n in RUN_METRIC_NAMES])
