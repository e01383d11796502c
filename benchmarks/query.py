"""Time compare-from-request-rows, a free query and the run-level CI table over 10 million request rows.

Usage: python benchmarks/query.py [--runs 100] [--requests-per-run 100000] [--keep DIR]
Builds a synthetic dataset in a temp dir (requests scalar columns only, written with pyarrow in the store's layout,
plus the matching runs rows through DatasetStore), prints a timing table, and deletes the data at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cluster.analysis.comparison import compare_with_ci
from cluster.plan.runs import make_plan
from cluster.analysis.query import compare_from_requests, compare_table, query
from cluster.kernel.records import REQUESTS_SCHEMA
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: bench
model: {{path: sim://m, engine: sim, tp: 8}}
variants:
  - name: baseline
    baseline: true
  - name: nextn
    speculative: {{algorithm: NEXTN, num_steps: [1, 2, 3]}}
workloads:
  - {{name: chat, input_tokens: 128, output_tokens: 64, num_requests: {n}}}
load: {{concurrency: {conc}}}
repeats: {repeats}
"""

FREE_SQL = ("SELECT variant, load_value, count(*) AS n, "
            "quantile_cont((last_chunk_ns - actual_send_ns) / 1e6, 0.99) AS e2e_p99_ms, "
            "avg(coalesce(completion_tokens, client_tokens)) AS tokens "
            "FROM requests WHERE error IS NULL GROUP BY ALL ORDER BY ALL")


def _requests(rng: np.random.Generator, n: int, keys: dict[str, object], spec: bool) -> pa.Table:
    send = np.sort(rng.integers(0, 60_000_000_000, n)).astype(np.int64)
    ttft = rng.lognormal(np.log(80e6), 0.3, n).astype(np.int64)
    tokens = rng.integers(32, 97, n).astype(np.int32)
    decode = (tokens - 1) * rng.lognormal(np.log(12e6), 0.1, n)
    err = rng.random(n) < 0.001
    first = np.where(err, 0, send + ttft)
    cols: dict[str, pa.Array] = {}
    for f in REQUESTS_SCHEMA:
        if f.name in keys:
            cols[f.name] = pa.array([keys[f.name]], type=f.type).take(pa.array(np.zeros(n, dtype=np.int32)))
    cols.update({
        "request_index": pa.array(np.arange(n, dtype=np.int32)),
        "intended_send_ns": pa.array(send),
        "actual_send_ns": pa.array(send + rng.integers(0, 300_000, n)),
        "first_chunk_ns": pa.array(first, mask=err),
        "last_chunk_ns": pa.array(first + decode.astype(np.int64), mask=err),
        "num_chunks": pa.array(np.where(err, 0, tokens // (2 if spec else 1)).astype(np.int32)),
        "client_tokens": pa.array(np.where(err, 0, tokens).astype(np.int32)),
        "prompt_tokens_sent": pa.array(np.full(n, 128, dtype=np.int32)),
        "max_tokens": pa.array(np.full(n, 96, dtype=np.int32)),
        "prompt_tokens": pa.array(np.full(n, 128, dtype=np.int32), mask=err),
        "completion_tokens": pa.array(tokens, mask=err),
        "cached_tokens": pa.array(np.zeros(n, dtype=np.int32), mask=err),
        "spec_verify_ct": pa.array((tokens - 1) // 2 + 1, mask=err | (not spec)),
        "finish_reason": pa.array(["length"] * n, type=pa.string(), mask=err),
        "error": pa.array(["HTTP 500"] * n, type=pa.string(), mask=~err),
        "http_status": pa.array(np.where(err, 500, 200).astype(np.int32)),
    })
    for f in REQUESTS_SCHEMA:  # the optional columns (category, sessions, the workload audit's) as nulls
        if f.name not in cols:
            cols[f.name] = pa.nulls(n, type=f.type)
    return pa.Table.from_pydict(cols, schema=REQUESTS_SCHEMA)


def build(root: str, runs: int, per_run: int) -> None:
    """runs = 4 variants × concurrencies × repeats; each run's requests file written with pyarrow."""
    conc = [1, 2, 4, 8, 16, 32, 64, 128][: max(1, runs // 20)]
    repeats = max(1, runs // (4 * len(conc)))
    spec = parse_spec_text(SPEC.format(n=per_run, conc=conc, repeats=repeats))
    store = DatasetStore(root, "bench")
    rng = np.random.default_rng(0)
    for p in make_plan(spec):
        keys = {"run_key": p.run_key, "experiment": "bench", "variant": p.variant.name, "engine": "sim",
                "workload": p.workload.name, "load_kind": p.load.kind, "load_value": p.load.value,
                "repeat": p.repeat, "schema_version": 1}
        spec_run = p.variant.speculative is not None
        path = f"{root}/bench/requests/variant={p.variant.name}/{p.run_key}.parquet"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        t = _requests(rng, per_run, keys, spec_run)
        tok_s = float(np.sum(t.column("completion_tokens").fill_null(0).to_numpy())) / 60.0
        metrics = {"output_tok_s": tok_s, "ttft_ms_p50": 80.0 * rng.lognormal(0, 0.02),
                   "ttft_ms_p99": 160.0 * rng.lognormal(0, 0.05), "tpot_ms_mean": 12.0 * rng.lognormal(0, 0.02),
                   "e2e_ms_p99": 900.0 * rng.lognormal(0, 0.05), "accept_length": 2.3 if spec_run else None}
        store.write_run(p, RunRow(status="ok", duration_s=60.0, metrics=metrics))  # runs row = commit
        # write_run (no requests given) removes a requests file, so the rows are written after it
        # as the store writes it: the variant is the partition directory, not a column of the file
        pq.write_table(t.drop_columns(["variant"]), path, compression="zstd", write_page_checksum=True)


def _time(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--requests-per-run", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sglbench-query-bench-")
    try:
        t0 = time.perf_counter()
        build(tmp, args.runs, args.requests_per_run)
        build_s = time.perf_counter() - t0
        n_rows = int(query(Results.open(tmp, "bench"), "SELECT count(*) AS n FROM requests")["n"].iloc[0])
        n_runs = int(query(Results.open(tmp, "bench"), "SELECT count(*) AS n FROM runs")["n"].iloc[0])
        size_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp) for f in fs) / 1e6
        print(f"dataset: {n_rows:,} request rows, {n_runs} runs, {size_mb:.0f} MB parquet, built in {build_s:.1f} s; "
              f"{os.cpu_count()} CPUs")
        rows = [
            ("compare from request rows (DuckDB)", lambda: compare_from_requests(Results.open(tmp, "bench")), 2.0),
            ("free query (GROUP BY, p99)", lambda: query(Results.open(tmp, "bench"), FREE_SQL), None),
            ("compare_table (run-level means)", lambda: compare_table(Results.open(tmp, "bench")), None),
            ("CIs from run-level summaries (2000 boot)",
             lambda: compare_with_ci(Results.open(tmp, "bench"), n_boot=2000, request_level=False), None),
        ]
        print(f"{'operation':44s} {'median s':>9s} {'min s':>8s} {'target s':>9s} {'median/target':>14s}")
        for name, fn, target in rows:
            med, best = _time(fn, args.reps)
            tgt = f"{target:9.2f}" if target else f"{'-':>9s}"
            ratio = f"{med / target:14.2f}" if target else f"{'-':>14s}"
            print(f"{name:44s} {med:9.3f} {best:8.3f} {tgt} {ratio}")
        rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        print(f"peak RSS: {rss_gb:.2f} GB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
