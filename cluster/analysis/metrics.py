"""Run metrics from raw request/chunk records: one definition per metric, vectorised with numpy.

Inputs are the `requests` and `chunks` tables of one run (cluster.dataset.records): times are int64 ns relative to the
measured window's start. Every latency is reported in ms as `<name>_mean`, `_p50`, `_p90`, `_p99`
(percentiles: numpy's linear interpolation, as sglang.benchmark.serving). Definitions:

- ok request: `error` is null and at least one chunk arrived (first/last_chunk_ns set). Latency, throughput and
  acceptance metrics use ok requests only; n_errors = n_requests - n_ok.
- token-bearing chunk: a chunk with `tokens` >= 1 (role-only / usage-only SSE chunks carry 0 and are skipped).
- output tokens of a request: the server's `completion_tokens`, or the client's count (`client_tokens`) when the
  server sent none. Input tokens: server `prompt_tokens`, else `prompt_tokens_sent`.
- ttft_ms: arrival of the first token-bearing chunk - actual_send_ns (first_chunk_ns when the run has no chunk
  rows for the request). SGLang/vLLM TTFT.
- e2e_ms: last_chunk_ns - actual_send_ns. SGLang/vLLM E2E latency.
- tpot_ms: per request (E2E - TTFT) / (output_tokens - 1), only requests with output_tokens > 1. SGLang/vLLM
  TPOT (= GuideLLM "ITL", AIPerf "ITL" with a one-token first chunk).
- itl_chunk_ms: gaps between consecutive token-bearing chunks of a request, pooled over all requests. vLLM/SGLang
  OAI-backend "ITL", AIPerf `inter_chunk_latency`. With speculative decoding this is the time per verify step.
- itl_token_ms: each such gap divided evenly over the N tokens of the later chunk (N entries of gap/N), pooled.
  SGLang native-backend ITL. Per request these entries sum to last token chunk - first token chunk.
- tokens_per_chunk_mean/_p50: tokens per token-bearing chunk, first chunk included.
- request_throughput_rps = n_ok / duration_s; output_tok_s = Σ output tokens / duration_s; input_tok_s =
  Σ input tokens / duration_s; total_tok_s = their sum (SGLang/vLLM throughputs, ok requests only).
- per_user_tok_s_mean: mean over ok requests of output_tokens / E2E_s (GuideLLM output_tokens_per_second,
  llmperf request_output_throughput; includes TTFT).
- concurrency_mean = Σ E2E_s / duration_s: the average number of requests in flight (SGLang `concurrency`).
- accept_length = Σ(output_tokens - 1) / Σ spec_verify_ct over ok requests with spec_verify_ct > 0: tokens per
  verify step after the prefill token, one definition for every engine, scoped to this run.
  sglang_accept_length = Σ output_tokens / Σ spec_verify_ct (SGLang's meta_info figure, named as SGLang's).
  accept_length_p10/_p50/_p90: percentiles of the per-request (output_tokens - 1) / spec_verify_ct.
  All None when no request reports spec_verify_ct > 0.
- lag_ms_p50/_p99/_max: actual_send_ns - intended_send_ns over all requests (client send lag self-check).
- slo_attainment: fraction of ALL requests that are ok and meet every SLO set (TTFT, TPOT, E2E; a request with
  one output token meets the TPOT SLO, as in SGLang's goodput); goodput_rps = such requests / duration_s.
  None when no SLO is given.
A statistic over an empty set is None.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cluster.spec.models import SLOSpec

Records = Union[pa.Table, pa.RecordBatch]

_STATS = ("mean", "p50", "p90", "p99")
_LATENCIES = ("ttft_ms", "e2e_ms", "tpot_ms", "itl_chunk_ms", "itl_token_ms")

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
)
"""Every key summarize_run returns, in a stable order (the runs table stores each as `m_<name>`)."""

_LAT_DEFS = {
    "ttft_ms": "TTFT: first token-bearing chunk - send (SGLang/vLLM TTFT)",
    "e2e_ms": "E2E: last chunk - send (SGLang/vLLM E2E latency)",
    "tpot_ms": "TPOT: (E2E - TTFT)/(output_tokens - 1), requests with >1 token (SGLang/vLLM TPOT; GuideLLM/AIPerf 'ITL')",
    "itl_chunk_ms": "ITL per chunk: gaps between token-bearing chunks, pooled (vLLM/SGLang-OAI ITL; AIPerf inter_chunk_latency)",
    "itl_token_ms": "ITL per token: each chunk gap split evenly over its N tokens, pooled (SGLang native-backend ITL)",
}

METRIC_DEFINITIONS: dict[str, str] = {
    "n_requests": "requests sent in the measured window",
    "n_ok": "requests without error that received at least one chunk",
    "n_errors": "n_requests - n_ok",
    "error_rate": "n_errors / n_requests",
    **{f"{lat}_{s}": f"{_LAT_DEFS[lat]}; {s}" for lat in _LATENCIES for s in _STATS},
    "tokens_per_chunk_mean": "mean tokens per token-bearing chunk (>1 means multi-token, e.g. speculative, chunks)",
    "tokens_per_chunk_p50": "median tokens per token-bearing chunk",
    "request_throughput_rps": "n_ok / duration_s (SGLang/vLLM request_throughput)",
    "output_tok_s": "sum of output tokens (server count, client count if missing) / duration_s (SGLang/vLLM output_throughput)",
    "input_tok_s": "sum of input tokens (server prompt_tokens, else sent) / duration_s (SGLang/vLLM input_throughput)",
    "total_tok_s": "input_tok_s + output_tok_s (SGLang/vLLM total_throughput)",
    "per_user_tok_s_mean": "mean of output_tokens / E2E_s per request (GuideLLM output_tokens_per_second, llmperf style)",
    "concurrency_mean": "sum of E2E_s / duration_s: mean requests in flight (SGLang concurrency)",
    "accept_length": "sum(output_tokens - 1) / sum(spec_verify_ct): tokens per verify step after the prefill token (sglbench, all engines)",
    "sglang_accept_length": "sum(completion_tokens) / sum(spec_verify_ct) (SGLang's meta_info definition)",
    "accept_length_p10": "10th percentile of per-request (output_tokens - 1) / spec_verify_ct",
    "accept_length_p50": "median of per-request (output_tokens - 1) / spec_verify_ct",
    "accept_length_p90": "90th percentile of per-request (output_tokens - 1) / spec_verify_ct",
    "lag_ms_p50": "median client send lag: actual_send - intended_send (sglbench self-check)",
    "lag_ms_p99": "99th percentile client send lag",
    "lag_ms_max": "largest client send lag",
    "slo_attainment": "fraction of all requests ok and meeting every set SLO (TTFT, TPOT, E2E) (SGLang/vLLM goodput criterion)",
    "goodput_rps": "requests meeting every SLO / duration_s (SGLang/vLLM goodput)",
}
"""One line per metric: what it is and which peer definition it follows."""

_NS_PER_MS = 1e6
_NS_PER_S = 1e9


def _int_col(t: Records, name: str, fill: int) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls → fill as int64, validity mask); an absent column is all-null."""
    n = t.num_rows
    if name not in t.schema.names:
        return np.full(n, fill, dtype=np.int64), np.zeros(n, dtype=bool)
    col = t.column(name)
    valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    vals = np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False), dtype=np.int64)
    return vals, valid


def _stats(prefix: str, x: np.ndarray, out: dict[str, Optional[float]]) -> None:
    if x.size == 0:
        for s in _STATS:
            out[f"{prefix}_{s}"] = None
        return
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    out[f"{prefix}_mean"] = float(np.mean(x))
    out[f"{prefix}_p50"] = float(p50)
    out[f"{prefix}_p90"] = float(p90)
    out[f"{prefix}_p99"] = float(p99)


def _ratio(num: float, den: float) -> Optional[float]:
    return float(num) / float(den) if den > 0 else None


def summarize_run(
    requests: Records, chunks: Records, duration_s: float, slo: Optional[SLOSpec] = None
) -> dict[str, Optional[float]]:
    """Every metric of METRIC_NAMES for one run (see the module docstring for the definitions)."""
    out: dict[str, Optional[float]] = {name: None for name in METRIC_NAMES}
    n = requests.num_rows
    req_idx, _ = _int_col(requests, "request_index", -1)
    send, _ = _int_col(requests, "actual_send_ns", 0)
    intended, _ = _int_col(requests, "intended_send_ns", 0)
    first, first_ok = _int_col(requests, "first_chunk_ns", 0)
    last, last_ok = _int_col(requests, "last_chunk_ns", 0)
    ctok, ctok_ok = _int_col(requests, "completion_tokens", 0)
    client_tok, _ = _int_col(requests, "client_tokens", 0)
    ptok, ptok_ok = _int_col(requests, "prompt_tokens", 0)
    psent, _ = _int_col(requests, "prompt_tokens_sent", 0)
    svc, svc_ok = _int_col(requests, "spec_verify_ct", 0)
    if "error" in requests.schema.names:
        no_error = np.asarray(pc.is_null(requests.column("error")).to_numpy(zero_copy_only=False), dtype=bool)
    else:
        no_error = np.ones(n, dtype=bool)
    ok = no_error & first_ok & last_ok
    out_tok = np.where(ctok_ok, ctok, client_tok)
    in_tok = np.where(ptok_ok, ptok, psent)

    n_ok = int(ok.sum())
    out["n_requests"] = float(n)
    out["n_ok"] = float(n_ok)
    out["n_errors"] = float(n - n_ok)
    out["error_rate"] = _ratio(n - n_ok, n)

    # chunks: token-bearing ones of ok requests, sorted by (request_index, chunk_index)
    c_req, _ = _int_col(chunks, "request_index", -1)
    c_idx, _ = _int_col(chunks, "chunk_index", 0)
    c_t, _ = _int_col(chunks, "arrival_ns", 0)
    c_tok, _ = _int_col(chunks, "tokens", 0)
    if c_req.size > 1 and not np.all(
        (c_req[1:] > c_req[:-1]) | ((c_req[1:] == c_req[:-1]) & (c_idx[1:] >= c_idx[:-1]))
    ):
        order = np.lexsort((c_idx, c_req))
        c_req, c_t, c_tok = c_req[order], c_t[order], c_tok[order]
    ok_req_sorted = np.sort(req_idx[ok])
    keep = np.zeros(c_req.size, dtype=bool)
    if ok_req_sorted.size:
        pos = np.minimum(np.searchsorted(ok_req_sorted, c_req), ok_req_sorted.size - 1)
        keep = (ok_req_sorted[pos] == c_req) & (c_tok >= 1)
    c_req, c_t, c_tok = c_req[keep], c_t[keep], c_tok[keep]

    same = c_req[1:] == c_req[:-1]
    gaps_ns = (c_t[1:] - c_t[:-1])[same].astype(np.float64)
    gap_tok = c_tok[1:][same]
    itl_chunk_ms = gaps_ns / _NS_PER_MS
    itl_token_ms = np.repeat(itl_chunk_ms / gap_tok, gap_tok)

    # first token-bearing chunk per request → TTFT (first_chunk_ns where the request has no such chunk row)
    starts = np.ones(c_req.size, dtype=bool)
    starts[1:] = ~same
    first_tok_ns = first.copy()
    if c_req.size:
        order_req = np.argsort(req_idx, kind="stable")
        where = order_req[np.searchsorted(req_idx, c_req[starts], sorter=order_req)]
        first_tok_ns[where] = c_t[starts]

    ttft_ns = (first_tok_ns - send)[ok].astype(np.float64)
    e2e_ns = (last - send)[ok].astype(np.float64)
    otok_ok = out_tok[ok]
    multi = otok_ok > 1
    tpot_ms = (e2e_ns[multi] - ttft_ns[multi]) / (otok_ok[multi] - 1) / _NS_PER_MS
    _stats("ttft_ms", ttft_ns / _NS_PER_MS, out)
    _stats("e2e_ms", e2e_ns / _NS_PER_MS, out)
    _stats("tpot_ms", tpot_ms, out)
    _stats("itl_chunk_ms", itl_chunk_ms, out)
    _stats("itl_token_ms", itl_token_ms, out)
    if c_tok.size:
        out["tokens_per_chunk_mean"] = float(c_tok.mean())
        out["tokens_per_chunk_p50"] = float(np.percentile(c_tok, 50))

    if duration_s > 0:
        out_tok_s, in_tok_s = float(otok_ok.sum()) / duration_s, float(in_tok[ok].sum()) / duration_s
        out["request_throughput_rps"] = n_ok / duration_s
        out["output_tok_s"], out["input_tok_s"], out["total_tok_s"] = out_tok_s, in_tok_s, out_tok_s + in_tok_s
        out["concurrency_mean"] = float(e2e_ns.sum()) / _NS_PER_S / duration_s
    pos_e2e = e2e_ns > 0
    if pos_e2e.any():
        out["per_user_tok_s_mean"] = float(np.mean(otok_ok[pos_e2e] / (e2e_ns[pos_e2e] / _NS_PER_S)))

    spec = ok & svc_ok & (svc > 0)
    if spec.any():
        s_tok, s_svc = out_tok[spec].astype(np.float64), svc[spec].astype(np.float64)
        out["accept_length"] = float((s_tok - 1).sum() / s_svc.sum())
        out["sglang_accept_length"] = float(s_tok.sum() / s_svc.sum())
        p10, p50, p90 = np.percentile((s_tok - 1) / s_svc, [10, 50, 90])
        out["accept_length_p10"], out["accept_length_p50"], out["accept_length_p90"] = (
            float(p10), float(p50), float(p90))

    if n:
        lag_ms = (send - intended).astype(np.float64) / _NS_PER_MS
        p50, p99 = np.percentile(lag_ms, [50, 99])
        out["lag_ms_p50"], out["lag_ms_p99"], out["lag_ms_max"] = float(p50), float(p99), float(lag_ms.max())

    if slo is not None and (slo.ttft_ms or slo.tpot_ms or slo.e2e_ms):
        good = np.ones(n_ok, dtype=bool)
        if slo.ttft_ms is not None:
            good &= ttft_ns / _NS_PER_MS <= slo.ttft_ms
        if slo.e2e_ms is not None:
            good &= e2e_ns / _NS_PER_MS <= slo.e2e_ms
        if slo.tpot_ms is not None:
            tpot_all = np.zeros(n_ok)
            tpot_all[multi] = tpot_ms
            good &= tpot_all <= slo.tpot_ms
        n_good = int(good.sum())
        out["slo_attainment"] = _ratio(n_good, n)
        out["goodput_rps"] = n_good / duration_s if duration_s > 0 else None
    return out
