"""Metrics on tiny hand-built records with known answers, and a vectorised-vs-naive cross-check."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pytest

from cluster.analysis.metrics import METRIC_DEFINITIONS, summarize_run
from cluster.kernel.run_row import METRIC_NAMES
from cluster.kernel.records import RequestRecord
from cluster.loadgen.sink import request_batches
from cluster.config.statistics import SLOSpec
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

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


def test_ttft_comes_from_the_requests_row_without_chunk_rows() -> None:
    # the requests row's first_chunk_ns is the first token-bearing chunk (8 ms, not the role-only one at 4 ms), so
    # TTFT needs no chunk rows: the SQL views read the same figure from the requests table alone
    reqs, chunks = request_batches([_rec(0, 0, 0, [(4, 0), (8, 2)], 2)])
    assert reqs.column("first_chunk_ns").to_pylist() == [8 * MS]
    out = summarize_run(reqs, chunks.slice(0, 0), 1.0)
    assert out["ttft_ms_p50"] == pytest.approx(8.0)
    assert out["ttft_ms_p50"] == summarize_run(reqs, chunks, 1.0)["ttft_ms_p50"]
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


# ------------------------------------------- one definition, every consumer (metrics, comparison, SQL, gate)

ONE_SPEC = """
version: 1
name: one
model: {path: sim://m, engine: sim, tp: 1}
variants:
  - name: base
workloads:
  - {name: w, input_tokens: 10, output_tokens: 8, num_requests: 4}
load: {concurrency: [1]}
"""


def _three_records() -> list[RequestRecord]:
    return [
        # sent 1 ms (intended 0): TTFT 11-1 = 10; E2E 31-1 = 30; TPOT (31-11)/(3-1) = 10; chunk gaps 10, 10 (one
        # token each: per-token 10, 10); accept (3-1)/2 = 1.0; lag 1 ms
        _rec(0, 0, 1, [(11, 1), (21, 1), (31, 1)], 3, svc=2),
        # a role-only chunk at 4 ms does not count: TTFT 20; E2E 60; TPOT (60-20)/(5-1) = 10; chunk gaps 30 (3
        # tokens: per-token 10, 10, 10) and 10; accept (5-1)/4 = 1.0; lag 0
        _rec(1, 0, 0, [(4, 0), (20, 1), (50, 3), (60, 1)], 5, svc=4),
        # one token: TTFT 9-2 = 7 = E2E; no TPOT, no gap; accept (1-1)/2 = 0; lag 2 ms
        _rec(2, 0, 2, [(9, 1)], 1, svc=2),
        # failed: in no latency, but its lag (3 ms) counts
        _rec(3, 0, 3, [], None, error="HTTP 500"),
    ]
# run: accept_length Σ(n-1)/Σsvc = (2+4+0)/(2+4+2) = 0.75; SGLang's Σn/Σsvc = 9/8; ITL/chunk [10, 10, 30, 10]
# (mean 15); ITL/token [10]*6 (mean 10); TTFT [10, 20, 7] (median 10); TPOT [10, 10]; lag [1, 0, 2, 3] ms


def _one_dataset(root: str, recs: list[RequestRecord]) -> tuple[str, dict[str, Optional[float]]]:
    from cluster.dataset.store import DatasetStore
    from cluster.plan.runs import make_plan
    from cluster.config.loader import parse_spec_text

    plan = make_plan(parse_spec_text(ONE_SPEC))[0]
    reqs, chunks = request_batches(recs)
    m = summarize_run(reqs, chunks, duration_s=1.0)
    DatasetStore(root, "one").write_run(plan, RunRow(status="ok", duration_s=1.0, metrics=m), reqs, chunks)
    return plan.run_key, m


def test_every_consumer_gives_the_same_per_request_numbers(tmp_path: Path) -> None:
    from cluster.analysis.comparison import request_arrays
    from cluster.analysis.query import compare_from_requests, query
    from cluster.analysis.request_metrics import ACCEPT_LENGTH_SQL
    from cluster.kernel.gate import GateOutput
    from cluster.loadgen.gate import gate_accept_length

    root = str(tmp_path)
    recs = _three_records()
    run_key, m = _one_dataset(root, recs)
    # metrics summary
    assert (m["ttft_ms_mean"], m["ttft_ms_p50"]) == (pytest.approx(37 / 3), 10.0)
    assert (m["e2e_ms_mean"], m["tpot_ms_mean"]) == (pytest.approx(97 / 3), 10.0)
    assert (m["itl_chunk_ms_mean"], m["itl_token_ms_mean"]) == (15.0, 10.0)
    assert (m["accept_length"], m["sglang_accept_length"]) == (0.75, 9 / 8)
    assert (m["accept_length_p50"], m["lag_ms_p50"], m["lag_ms_max"]) == (1.0, 1.5, 3.0)
    # the SQL views, generated from the same definitions
    rm = query(Results.open(root, "one"), "SELECT request_index, ok, ttft_ms, e2e_ms, tpot_ms, accept_length, lag_ms "
                            "FROM request_metrics ORDER BY request_index")
    assert rm["ok"].tolist() == [True, True, True, False]
    assert rm["ttft_ms"].tolist()[:3] == [10.0, 20.0, 7.0] and rm["e2e_ms"].tolist()[:3] == [30.0, 60.0, 7.0]
    assert rm["tpot_ms"].tolist()[:2] == [10.0, 10.0] and rm["tpot_ms"].isna().tolist()[2:] == [True, True]
    assert rm["accept_length"].tolist()[:3] == [1.0, 1.0, 0.0] and rm["lag_ms"].tolist() == [1.0, 0.0, 2.0, 3.0]
    gaps = query(Results.open(root, "one"), "SELECT itl_chunk_ms, itl_token_ms, tokens FROM chunk_gaps "
                              "ORDER BY request_index, chunk_index")
    assert gaps["itl_chunk_ms"].tolist() == [10.0, 10.0, 30.0, 10.0]
    assert gaps["itl_token_ms"].tolist() == [10.0, 10.0, 10.0, 10.0] and gaps["tokens"].tolist() == [1, 1, 3, 1]
    agg = query(Results.open(root, "one"), f"SELECT {ACCEPT_LENGTH_SQL} AS a, avg(ttft_ms) AS ttft, avg(tpot_ms) AS tpot, "
                             "quantile_cont(lag_ms, 0.99) AS lag99 FROM request_metrics")
    assert agg["a"].iloc[0] == m["accept_length"] and agg["tpot"].iloc[0] == m["tpot_ms_mean"]
    assert agg["ttft"].iloc[0] == pytest.approx(m["ttft_ms_mean"], rel=1e-15)
    assert agg["lag99"].iloc[0] == pytest.approx(m["lag_ms_p99"], rel=1e-12)
    token_weighted = (gaps["itl_token_ms"] * gaps["tokens"]).sum() / gaps["tokens"].sum()
    assert (gaps["itl_chunk_ms"].mean(), token_weighted) == (m["itl_chunk_ms_mean"], m["itl_token_ms_mean"])
    # the comparison's per-request arrays (CI bootstrap, report CDFs and acceptance histograms)
    a = request_arrays(Results.open(root, "one"), [run_key])[run_key]
    assert a["ttft_ms"].tolist() == [10.0, 20.0, 7.0] and a["e2e_ms"].tolist() == [30.0, 60.0, 7.0]
    assert a["tpot_ms"].tolist() == [10.0, 10.0] and a["accept"].tolist() == [1.0, 1.0, 0.0]
    # compare from request rows
    cmp = compare_from_requests(Results.open(root, "one")).iloc[0]
    assert (cmp["ttft_ms_p50"], cmp["tpot_ms_mean"], cmp["output_tok_s"]) == (10.0, 10.0, m["output_tok_s"])
    # the correctness gate's acceptance: the same counts as gate answers give the same figure
    raw = {str(r.request_index): GateOutput(text="", completion_tokens=r.completion_tokens,
                                            spec_verify_ct=r.spec_verify_ct) for r in recs if r.ok}
    assert gate_accept_length(raw) == m["accept_length"] == 0.75


def test_numpy_and_sql_sides_of_each_definition_agree_exactly(tmp_path: Path) -> None:
    from cluster.analysis.metrics import token_chunks
    from cluster.analysis.query import query
    from cluster.analysis.request_metrics import REQUEST_QUANTITIES, chunk_gaps, request_columns

    rng = random.Random(11)
    recs = []
    for i in range(300):
        intended = rng.randint(0, 10**9)
        send = intended + rng.randint(0, 3 * 10**6)
        t, chunks = send + rng.randint(10**6, 10**8), []
        for _ in range(rng.randint(0, 9)):
            t += rng.randint(10**5, 5 * 10**7)
            chunks.append((t / MS, rng.choice([0, 1, 1, 2, 3])))
        recs.append(_rec(i, intended / MS, send / MS, chunks, None if rng.random() < 0.3 else rng.randint(1, 30),
                         svc=rng.choice([None, 0, rng.randint(1, 12)]), error="x" if rng.random() < 0.1 else None))
    _one_dataset(str(tmp_path), recs)
    reqs, chunk_rows = request_batches(recs)
    cols = request_columns(reqs)
    names = [q.name for q in REQUEST_QUANTITIES]
    sql = query(Results.open(str(tmp_path), "one"), f"SELECT {', '.join(names)} FROM request_metrics ORDER BY request_index")
    for q in REQUEST_QUANTITIES:
        np.testing.assert_array_equal(q.values(cols), sql[q.name].to_numpy(np.float64, na_value=np.nan), q.name)
    itl_chunk, tokens, itl_token = chunk_gaps(*token_chunks(reqs, chunk_rows, cols.ok))
    gaps = query(Results.open(str(tmp_path), "one"), "SELECT itl_chunk_ms, itl_token_ms, tokens FROM chunk_gaps "
                                       "ORDER BY request_index, chunk_index")
    np.testing.assert_array_equal(itl_chunk, gaps["itl_chunk_ms"].to_numpy())
    np.testing.assert_array_equal(itl_token, np.repeat(gaps["itl_token_ms"].to_numpy(), gaps["tokens"].to_numpy()))
    np.testing.assert_array_equal(tokens, gaps["tokens"].to_numpy())


def test_prefix_hit_rate_and_finish_reasons() -> None:
    from cluster.kernel.records import RequestRecord
    from cluster.loadgen.sink import request_batches

    def rec(i: int, cached: object, finish: str, tokens: int, error: object = None) -> RequestRecord:
        return RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=100,
                             max_tokens=8, chunk_arrival_ns=list(range(10, 10 + tokens)), chunk_tokens=[1] * tokens,
                             prompt_tokens=100, completion_tokens=tokens, cached_tokens=cached,  # type: ignore[arg-type]
                             finish_reason=finish, error=error)  # type: ignore[arg-type]

    reqs, chunks = request_batches([rec(0, 99, "stop", 3), rec(1, 0, "length", 8), rec(2, None, "stop", 5),
                                    rec(3, 50, "stop", 7, error="HTTP 500: boom")])
    m = summarize_run(reqs, chunks, 1.0)
    assert m["prefix_hit_rate"] == pytest.approx(99 / 200)  # the request without cached_tokens and the error are out
    assert (m["n_finish_stop"], m["n_finish_length"]) == (2.0, 1.0)
    assert m["eos_output_tokens_mean"] == pytest.approx(4.0)
