"""Run metrics from raw request/chunk records: statistics of the per-request quantities, vectorised with numpy.

Inputs are the `requests` and `chunks` tables of one run (cluster.kernel.records): times are int64 ns relative to the
measured window's start. Every latency is reported in ms as `<name>_mean`, `_p50`, `_p90`, `_p99`
(percentiles: numpy's linear interpolation, as sglang.benchmark.serving). The per-request quantities (TTFT, E2E,
TPOT, ITL, acceptance, lag) are declared once, with their SQL, in cluster/analysis/request_metrics.py; this module
builds the inputs (run_inputs) that each run metric's formula, declared once in cluster/analysis/metric_catalog.py
(docs/metrics.md), reads. The conventions behind those declarations, with the peers they follow:

- ok request: `error` is null and at least one chunk arrived (first/last_chunk_ns set). Latency, throughput and
  acceptance metrics use ok requests only; n_errors = n_requests - n_ok.
- token-bearing chunk: a chunk with `tokens` >= 1 (role-only / usage-only SSE chunks carry 0 and are skipped).
- output tokens of a request: the server's `completion_tokens`, or the client's count (`client_tokens`) when the
  server sent none. Input tokens: server `prompt_tokens`, else `prompt_tokens_sent`.
- ttft_ms: first_chunk_ns - actual_send_ns, where first_chunk_ns is the first token-bearing chunk (the client
  drops token-less chunks; the record sink keeps that true for hand-built records). SGLang/vLLM TTFT.
- e2e_ms: last_chunk_ns - actual_send_ns. SGLang/vLLM E2E latency.
- tpot_ms: per request (E2E - TTFT) / (output_tokens - 1) = (last_chunk_ns - first_chunk_ns) / (output_tokens - 1),
  only requests with output_tokens > 1. SGLang/vLLM
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
- lag_ms_p50/_p99/_max: actual_send_ns - intended_send_ns over all requests (client send lag self-check), computed
  by kernel.window_figures.client_lag; the run's validity is judged on this stored lag_ms_p99.
- slo_attainment: fraction of ALL requests that are ok and meet every SLO set (TTFT, TPOT, E2E; a request with
  one output token meets the TPOT SLO, as in SGLang's goodput); goodput_rps = such requests / duration_s.
  None when no SLO is given.
- prefix_hit_rate: Σ cached_tokens / Σ prompt_tokens over ok requests that report both (prefix caching's share).
- worker_imbalance: of the requests whose `worker` a gateway named, max(requests per worker) / mean(requests per
  worker), the mean over every worker the gateway routes to; the split itself is the runs column
  worker_requests_json. None without a gateway.
- n_finish_stop / n_finish_length: ok requests by finish reason; eos_output_tokens_mean: mean output tokens of the
  'stop' ones (what the model chose to write when ignore_eos is false).
A statistic over an empty set is None.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import pyarrow.compute as pc

from cluster.analysis.metric_catalog import RunInputs, declared, definitions
from cluster.analysis.request_metrics import ACCEPT, E2E, TPOT, TTFT, chunk_gaps, int_column, request_columns
from cluster.kernel.records import Records
from cluster.kernel.window import TokenChunks
from cluster.kernel.window_figures import acceptance, client_lag
from cluster.config.statistics import SLOSpec

METRIC_DEFINITIONS: dict[str, str] = definitions("requests")
"""One line per run metric: what it is and which peer definition it follows (metric_catalog's declarations)."""


def token_chunks(requests: Records, chunks: Records, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(request_index, arrival_ns, tokens) of the token-bearing chunks of ok requests, sorted by (request, chunk)."""
    req_idx, _ = int_column(requests, "request_index", -1)
    c_req, _ = int_column(chunks, "request_index", -1)
    c_idx, _ = int_column(chunks, "chunk_index", 0)
    c_t, _ = int_column(chunks, "arrival_ns", 0)
    c_tok, _ = int_column(chunks, "tokens", 0)
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
    return c_req[keep], c_t[keep], c_tok[keep]


def worker_requests(requests: Records) -> dict[str, int]:
    """Requests per worker named in `worker` (the gateway's routed worker), sorted by worker; {} when none is."""
    if "worker" not in requests.schema.names:  # a dataset written before the column
        return {}
    counts = pc.value_counts(requests.column("worker")).to_pylist()
    return {c["values"]: int(c["counts"]) for c in sorted(counts, key=lambda c: str(c["values"]))
            if c["values"] is not None}


def run_inputs(requests: Records, chunks: Union[Records, TokenChunks], duration_s: float,
               slo: Optional[SLOSpec] = None, workers: int = 0) -> RunInputs:
    """The arrays every run metric's formula reads, computed once from one run's records."""
    c = request_columns(requests)
    ok = c.ok
    ptok, ptok_ok = int_column(requests, "prompt_tokens", 0)
    psent, _ = int_column(requests, "prompt_tokens_sent", 0)
    out_tok = np.where(c.completion_tokens_ok, c.completion_tokens, c.client_tokens)
    in_tok = np.where(ptok_ok, ptok, psent)
    n_ok = int(ok.sum())

    # a window summarised while it streamed hands its token chunks in (kernel/window.TokenChunks)
    c_req, c_t, c_tok = chunks.arrays() if isinstance(chunks, TokenChunks) else token_chunks(requests, chunks, ok)
    itl_chunk_ms, _, itl_token_ms = chunk_gaps(c_req, c_t, c_tok)
    ttft_ms = TTFT.values(c)[ok]
    e2e_ms = E2E.values(c)[ok]
    tpot_all = TPOT.values(c)[ok]
    otok_ok = out_tok[ok]
    multi = otok_ok > 1

    per_request = ACCEPT.values(c)[ok]
    slo_good: Optional[int] = None
    if slo is not None and (slo.ttft_ms or slo.tpot_ms or slo.e2e_ms):
        good = np.ones(n_ok, dtype=bool)
        if slo.ttft_ms is not None:
            good &= ttft_ms <= slo.ttft_ms
        if slo.e2e_ms is not None:
            good &= e2e_ms <= slo.e2e_ms
        if slo.tpot_ms is not None:
            good &= np.where(multi, tpot_all, 0.0) <= slo.tpot_ms
        slo_good = int(good.sum())
    cached, cached_ok = int_column(requests, "cached_tokens", 0)
    both = ok & cached_ok & ptok_ok
    reasons: Optional[np.ndarray] = None
    if "finish_reason" in requests.schema.names:
        reasons = np.asarray(requests.column("finish_reason").to_pylist(), dtype=object)[ok]
    return RunInputs(
        n_requests=requests.num_rows, n_ok=n_ok, duration_s=duration_s, ttft_ms=ttft_ms, e2e_ms=e2e_ms,
        tpot_ms=tpot_all[multi], itl_chunk_ms=itl_chunk_ms, itl_token_ms=itl_token_ms, chunk_tokens=c_tok,
        output_tokens=otok_ok, input_tokens=in_tok[ok],
        acceptance=acceptance(otok_ok, np.where(c.spec_verify_ct_ok, c.spec_verify_ct, 0)[ok]),
        accept_per_request=per_request[~np.isnan(per_request)],
        lag=client_lag(c.actual_send_ns - c.intended_send_ns), slo_good=slo_good,
        cached_tokens=cached[both], prompt_tokens=ptok[both], finish_reasons=reasons,
        worker_requests=worker_requests(requests), workers=workers)


def summarize_run(
    requests: Records, chunks: Union[Records, TokenChunks], duration_s: float, slo: Optional[SLOSpec] = None,
    workers: int = 0,
) -> dict[str, Optional[float]]:
    """Every declared run metric for one run, in declaration order (see the module docstring for the definitions);
    `workers`: how many workers a gateway in front names (replicas; decode servers in PD mode; 0: unknown, only
    those the requests name count)."""
    inputs = run_inputs(requests, chunks, duration_s, slo, workers)
    return {m.name: m.formula(inputs) for m in declared("requests") if m.formula is not None}
