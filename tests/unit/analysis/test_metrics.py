"""Metrics on tiny hand-built records with known answers, and a vectorised-vs-naive cross-check."""

from __future__ import annotations

import random
from typing import Optional

import numpy as np
import pyarrow as pa
import pytest

from cluster.analysis.metrics import METRIC_DEFINITIONS, METRIC_NAMES, summarize_run
from cluster.dataset.records import RequestRecord
from cluster.loadgen.sink import request_batches
from cluster.spec.models import SLOSpec

MS = 1_000_000


def _rec(i: int, intended_ms: float, actual_ms: float, chunks: list[tuple[float, int]], completion: Optional[int],
         svc: Optional[int] = None, error: Optional[str] = None) -> RequestRecord:
    return RequestRecord(
        request_index=i, intended_send_ns=int(intended_ms * MS), actual_send_ns=int(actual_ms * MS),
        prompt_tokens_sent=10, max_tokens=8,
        chunk_arrival_ns=[int(t * MS) for t, _ in chunks], chunk_tokens=[k for _, k in chunks],
        completion_tokens=completion, spec_verify_ct=svc, error=error,
    )


def _records() -> list[RequestRecord]:
    return [
        _rec(0, 0, 1, [(11, 1), (21, 1), (31, 1)], 3, svc=2),            # plain decode
        _rec(1, 0, 0, [(20, 1), (50, 3), (60, 1)], 5, svc=2),            # a speculative chunk of 3 tokens
        _rec(2, 0, 2, [(7, 1)], 1, svc=0),                               # single token: no TPOT, no ITL
        _rec(3, 0, 3, [], None, error="HTTP 500"),                       # error
        _rec(4, 0, 0, [(4, 0), (8, 2), (12, 2)], None),                  # role chunk, then client count (4)
    ]


@pytest.fixture
def m() -> dict[str, Optional[float]]:
    reqs, chunks = request_batches(_records())
    return summarize_run(reqs, chunks, duration_s=2.0)


def test_names_and_definitions_cover_every_key(m: dict[str, Optional[float]]) -> None:
    assert tuple(m) == METRIC_NAMES
    assert set(METRIC_DEFINITIONS) == set(METRIC_NAMES)
    assert len(set(METRIC_NAMES)) == len(METRIC_NAMES)


def test_counts(m: dict[str, Optional[float]]) -> None:
    assert (m["n_requests"], m["n_ok"], m["n_errors"]) == (5, 4, 1)
    assert m["error_rate"] == pytest.approx(0.2)


def test_ttft_skips_zero_token_chunk(m: dict[str, Optional[float]]) -> None:
    # ttfts 10, 20, 5, 8 (request 4's role-only chunk at 4 ms does not count)
    assert m["ttft_ms_mean"] == pytest.approx(43 / 4)
    assert m["ttft_ms_p50"] == pytest.approx(9.0)
    assert m["ttft_ms_p90"] == pytest.approx(np.percentile([10, 20, 5, 8], 90))
    assert m["ttft_ms_p99"] == pytest.approx(np.percentile([10, 20, 5, 8], 99))


def test_e2e(m: dict[str, Optional[float]]) -> None:
    assert m["e2e_ms_mean"] == pytest.approx(107 / 4)
    assert m["e2e_ms_p50"] == pytest.approx(21.0)
    assert m["e2e_ms_p99"] == pytest.approx(np.percentile([30, 60, 5, 12], 99))


def test_tpot_excludes_single_token(m: dict[str, Optional[float]]) -> None:
    tpots = [10.0, 10.0, 4 / 3]  # (30-10)/2, (60-20)/4, (12-8)/3; request 2 excluded
    assert m["tpot_ms_mean"] == pytest.approx(np.mean(tpots))
    assert m["tpot_ms_p50"] == pytest.approx(10.0)
    assert m["tpot_ms_p90"] == pytest.approx(np.percentile(tpots, 90))


def test_itl_per_chunk_vs_per_token(m: dict[str, Optional[float]]) -> None:
    chunk = [10, 10, 30, 10, 4]
    token = [10, 10, 10, 10, 10, 10, 2, 2]  # the 30 ms gap of a 3-token chunk becomes three 10 ms entries
    assert m["itl_chunk_ms_mean"] == pytest.approx(12.8)
    assert m["itl_token_ms_mean"] == pytest.approx(8.0)
    assert m["itl_chunk_ms_p50"] == pytest.approx(10.0)
    assert m["itl_token_ms_p50"] == pytest.approx(10.0)
    assert m["itl_chunk_ms_p99"] == pytest.approx(np.percentile(chunk, 99))
    assert m["itl_token_ms_p90"] == pytest.approx(np.percentile(token, 90))
    assert m["tokens_per_chunk_mean"] == pytest.approx(13 / 9)
    assert m["tokens_per_chunk_p50"] == 1.0


def test_throughputs(m: dict[str, Optional[float]]) -> None:
    assert m["request_throughput_rps"] == pytest.approx(2.0)
    assert m["output_tok_s"] == pytest.approx(13 / 2)  # 3 + 5 + 1 + 4 (client count for request 4)
    assert m["input_tok_s"] == pytest.approx(40 / 2)  # prompt_tokens missing → prompt_tokens_sent; error excluded
    assert m["total_tok_s"] == pytest.approx(26.5)
    assert m["per_user_tok_s_mean"] == pytest.approx(np.mean([3 / 0.030, 5 / 0.060, 1 / 0.005, 4 / 0.012]))
    assert m["concurrency_mean"] == pytest.approx(0.107 / 2)


def test_accept_length(m: dict[str, Optional[float]]) -> None:
    # requests 0 and 1 have spec_verify_ct 2; request 2 has 0 (excluded)
    assert m["accept_length"] == pytest.approx((2 + 4) / 4)
    assert m["sglang_accept_length"] == pytest.approx(8 / 4)
    assert m["accept_length_p50"] == pytest.approx(1.5)
    assert m["accept_length_p10"] == pytest.approx(1.1)
    assert m["accept_length_p90"] == pytest.approx(1.9)


def test_client_lag(m: dict[str, Optional[float]]) -> None:
    assert m["lag_ms_p50"] == pytest.approx(1.0)
    assert m["lag_ms_p99"] == pytest.approx(2.96)
    assert m["lag_ms_max"] == pytest.approx(3.0)


def test_no_slo_gives_none(m: dict[str, Optional[float]]) -> None:
    assert m["slo_attainment"] is None and m["goodput_rps"] is None


@pytest.mark.parametrize(
    "slo,good",
    [
        (SLOSpec(ttft_ms=15), 3),  # requests 0, 2, 4; 1 is too slow, 3 failed
        (SLOSpec(ttft_ms=15, tpot_ms=5), 2),  # 2 (single token meets TPOT) and 4
        (SLOSpec(e2e_ms=10), 1),
    ],
)
def test_goodput(slo: SLOSpec, good: int) -> None:
    reqs, chunks = request_batches(_records())
    out = summarize_run(reqs, chunks, duration_s=2.0, slo=slo)
    assert out["slo_attainment"] == pytest.approx(good / 5)
    assert out["goodput_rps"] == pytest.approx(good / 2)


def test_missing_spec_verify_ct_gives_none() -> None:
    recs = [_rec(0, 0, 0, [(5, 1), (9, 1)], 2), _rec(1, 0, 0, [(6, 1)], 1, svc=0)]
    out = summarize_run(*request_batches(recs), duration_s=1.0)
    for k in ("accept_length", "sglang_accept_length", "accept_length_p10", "accept_length_p50", "accept_length_p90"):
        assert out[k] is None


def test_unsorted_chunks_and_table_inputs_match() -> None:
    reqs, chunks = request_batches(_records())
    perm = np.random.default_rng(1).permutation(chunks.num_rows)
    shuffled = pa.Table.from_batches([chunks]).take(pa.array(perm))
    base = summarize_run(reqs, chunks, 2.0)
    assert summarize_run(pa.Table.from_batches([reqs]), shuffled, 2.0) == base


def test_empty_and_all_errors() -> None:
    out = summarize_run(*request_batches([]), duration_s=1.0)
    assert out["n_requests"] == 0 and out["error_rate"] is None and out["ttft_ms_p50"] is None
    out = summarize_run(*request_batches([_rec(0, 0, 0, [], None, error="timeout")]), duration_s=1.0)
    assert out["n_errors"] == 1 and out["error_rate"] == 1.0
    assert out["output_tok_s"] == 0.0 and out["itl_chunk_ms_p50"] is None


def test_without_chunk_rows_ttft_falls_back_to_first_chunk() -> None:
    reqs, chunks = request_batches([_rec(0, 0, 0, [(4, 0), (8, 2)], 2)])
    out = summarize_run(reqs, chunks.slice(0, 0), 1.0)
    assert out["ttft_ms_p50"] == pytest.approx(4.0)
    assert out["itl_chunk_ms_mean"] is None


def _naive(recs: list[RequestRecord]) -> dict[str, list[float]]:
    ttft, e2e, tpot, itl_c, itl_t = [], [], [], [], []
    for r in recs:
        if not r.ok:
            continue
        tok_chunks = [(t, k) for t, k in zip(r.chunk_arrival_ns, r.chunk_tokens) if k >= 1]
        first = tok_chunks[0][0] if tok_chunks else r.chunk_arrival_ns[0]
        n = r.completion_tokens if r.completion_tokens is not None else sum(r.chunk_tokens)
        ttft.append((first - r.actual_send_ns) / MS)
        e2e.append((r.chunk_arrival_ns[-1] - r.actual_send_ns) / MS)
        if n > 1:
            tpot.append((e2e[-1] - ttft[-1]) / (n - 1))
        for (t0, _), (t1, k) in zip(tok_chunks, tok_chunks[1:]):
            itl_c.append((t1 - t0) / MS)
            itl_t.extend([(t1 - t0) / MS / k] * k)
    return {"ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot, "itl_chunk_ms": itl_c, "itl_token_ms": itl_t}


def test_vectorised_matches_naive_loop() -> None:
    rng = random.Random(7)
    recs = []
    for i in rng.sample(range(1000), 200):  # request indices out of order, with gaps
        send = rng.randint(0, 10**9)
        t, chunks = send + rng.randint(10**6, 10**8), []
        for _ in range(rng.randint(0, 12)):
            t += rng.randint(10**5, 5 * 10**7)
            chunks.append((t / MS, rng.choice([0, 1, 1, 1, 2, 3, 4])))
        err = "boom" if rng.random() < 0.1 else None
        recs.append(_rec(i, send / MS, send / MS, chunks, None if rng.random() < 0.3 else rng.randint(1, 40),
                         error=err))
    out = summarize_run(*request_batches(recs), duration_s=10.0)
    for name, xs in _naive(recs).items():
        assert out[f"{name}_mean"] == pytest.approx(np.mean(xs)), name
        assert out[f"{name}_p90"] == pytest.approx(np.percentile(xs, 90)), name
