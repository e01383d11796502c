"""Build the `runs` table row of one run: metrics, validity checks and provenance (pure)."""

from __future__ import annotations

import json
from typing import Any, Optional

from cluster import __version__
from cluster.plan.runs import RunPlan
from cluster.spec.models import ExperimentSpec

MAX_ERROR_RATE = 0.01
"""A run with more failed requests than this is flagged invalid: its throughput is not the server's."""


def counter_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after if isinstance(after.get(k), (int, float))}


def _common(p: RunPlan, spec: ExperimentSpec, info: dict[str, Any], git_sha: Optional[str]) -> dict[str, Any]:
    v = p.variant
    infos = info.get("infos") or {}
    si = infos.get("server_info") if isinstance(infos.get("server_info"), dict) else {}
    launcher = spec.engines.get(v.engine)
    engine_version = (si or {}).get("version") or (launcher.version if launcher else None)
    if engine_version is None and isinstance(infos.get("version"), dict):
        engine_version = infos["version"].get("version")
    provenance = {
        "engine": v.engine,
        "engine_version": engine_version,
        "host": info.get("hostname"),
        "node_id": info.get("node_id"),
        "gpu_ids": info.get("gpu_ids"),
        "cuda_visible_devices": info.get("cuda_visible_devices"),
        "server_saw_cuda_visible_devices": info.get("server_saw_cuda_visible_devices"),
        "load_actor_cuda_visible_devices": info.get("load_actor_cuda_visible_devices"),
        "server_pid": info.get("server_pid"),
        "server_pgid": info.get("pgid"),
        "port": info.get("port"),
        "port_attempts": info.get("port_attempts"),
        "server_startup_s": info.get("startup_s"),
        "env": info.get("env"),
        "environment": info.get("environment"),
        "seed": p.seed,
        "spec_seed": spec.seed,
        "sglbench_version": __version__,
        "git_sha": git_sha,
        "tuning": v.tuning.model_dump(mode="json") if v.tuning else None,
        "tuning_artifact": info.get("tuning_artifact"),
        "correctness": info.get("correctness"),
        "load_actors": info.get("load_actors"),
        "load_actor_peak_buffered_rows": info.get("load_actor_peak_buffered_rows"),
        "isolation": spec.isolation,
    }
    sp = v.speculative
    return {
        "seed": p.seed,
        "order_index": p.order_index,
        "input_tokens": p.workload.input_tokens,
        "output_tokens": p.workload.output_tokens,
        "max_tokens": p.workload.output_tokens,
        "tp": v.tp,
        "variant_family": v.family,
        "is_baseline": v.is_baseline,
        "spec_algorithm": sp.algorithm if sp else None,
        "spec_num_steps": sp.num_steps if sp else None,
        "spec_num_draft_tokens": sp.num_draft_tokens if sp else None,
        "provenance_json": json.dumps(provenance, sort_keys=True, default=str),
        "launch_argv_json": json.dumps(info.get("argv") or []),
        "resolved_args_json": json.dumps(info.get("resolved_args") or {}, sort_keys=True, default=str),
        "gpu_ids": ",".join(str(g) for g in info.get("gpu_ids") or []),
        "node": info.get("hostname"),
        "engine_version": engine_version,
        "sglbench_version": __version__,
        "git_sha": git_sha,
        "tuning_artifact": info.get("tuning_artifact"),
    }


def build_run_row(p: RunPlan, out: dict[str, Any], info: dict[str, Any], spec: ExperimentSpec,
                  neighbours: list[str], git_sha: Optional[str]) -> dict[str, Any]:
    from cluster.analysis.metrics import summarize_run

    m = summarize_run(out["requests"], out["chunks"], out["duration_s"], spec.slo)
    before, after = out.get("counters_before") or {}, out.get("counters_after") or {}
    deltas = counter_deltas(before, after)
    n_req = int(out["requests"].num_rows)
    from cluster.engines import get_engine

    window = get_engine(p.variant.engine).window_acceptance(before, after, n_req)
    m["accept_length_server_counters"] = window.get("accept_length")
    if m.get("accept_length") is None and window.get("accept_length") is not None:
        # engines without per-request verify counts (vLLM): the run-scoped counter figure is the metric
        m["accept_length"] = window["accept_length"]
    for k, v in window.items():
        if k != "accept_length":
            m[k] = v
    n_ok = int(m.get("n_ok") or 0)
    invalid: list[str] = []
    lag_p99_ms = out.get("lag_p99_ns", 0) / 1e6
    if lag_p99_ms > spec.max_client_lag_ms:
        invalid.append(f"client fell behind its schedule: send lag p99 {lag_p99_ms:.2f} ms > "
                       f"{spec.max_client_lag_ms:g} ms (the client, not the server, set the pace)")
    err_rate = (n_req - n_ok) / n_req if n_req else 1.0
    if n_ok and err_rate > MAX_ERROR_RATE:
        invalid.append(f"{n_req - n_ok} of {n_req} requests failed ({err_rate:.1%})")
    if not out.get("flushed", True):
        invalid.append("cache flush before the measured window failed")
    status = "failed" if n_ok == 0 else ("invalid" if invalid else "ok")
    row = _common(p, spec, info, git_sha)
    row.update({
        "status": status,
        "failure_reason": "no request succeeded" if n_ok == 0 else None,
        "invalid_reasons": "; ".join(invalid) if invalid else None,
        "log_tail": None,
        "window_start_unix_s": out.get("window_start_unix_s"),
        "duration_s": out.get("duration_s"),
        "n_requests": n_req,
        "n_ok": n_ok,
        "n_errors": n_req - n_ok,
        "metrics_json": json.dumps(m, sort_keys=True, default=float),
        "server_counters_json": json.dumps({"before": out.get("counters_before"), "after": out.get("counters_after"),
                                            "delta": deltas}, sort_keys=True),
        "shared_node_with": ",".join(neighbours),
    })
    for k, val in m.items():
        row[f"m_{k}"] = val
    return row


def failed_run_row(p: RunPlan, reason: str, log_tail: str, info: dict[str, Any], spec: ExperimentSpec,
                   git_sha: Optional[str]) -> dict[str, Any]:
    row = _common(p, spec, info, git_sha)
    row.update({
        "status": "failed",
        "failure_reason": reason,
        "invalid_reasons": None,
        "log_tail": log_tail[-8000:] if log_tail else None,
        "n_requests": 0,
        "n_ok": 0,
        "n_errors": 0,
        "metrics_json": "{}",
        "server_counters_json": "{}",
        "shared_node_with": "",
    })
    return row
