"""What the results-root checks cost a reader: results show's query and compare_from_requests, first and second call.

Usage: python benchmarks/results_root_checks.py [--requests-per-run 100000] [--keep DIR]
Writes 8 runs (2 variants x 2 concurrencies x 2 repeats) of `--requests-per-run` requests with 2 chunks each through
DatasetStore.write_run, then times, in this fresh process, the first call (every file's footer, types and
identity checked, the pages of the tables the statement reads verified) and the second (checks remembered per file
version). Compare with the same script at an older commit for the cost of the checks themselves.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Callable

from cluster.analysis.metrics import summarize_run
from cluster.analysis.query import compare_from_requests, query
from cluster.kernel.records import RequestRecord
from cluster.dataset.store import DatasetStore
from cluster.loadgen.sink import request_batches
from cluster.plan.runs import make_plan
from cluster.config.loader import parse_spec_text
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: big
model: {path: sim://m, engine: sim, tp: 1}
variants:
  - name: base
    baseline: true
  - name: other
workloads:
  - {name: w1, input_tokens: 16, output_tokens: 8, num_requests: 4}
load: {concurrency: [1, 2]}
repeats: 2
"""
SHOW_SQL = "SELECT order_index, variant, status, m_output_tok_s FROM runs ORDER BY order_index"


def build(root: str, per_run: int) -> None:
    store = DatasetStore(root, "big")
    for p in make_plan(parse_spec_text(SPEC)):
        recs = [RequestRecord(request_index=i, intended_send_ns=i * 1000, actual_send_ns=i * 1000 + 7,
                              prompt_tokens_sent=16, max_tokens=8,
                              chunk_arrival_ns=[i * 1000 + 50 + i % 13, i * 1000 + 90 + i % 7], chunk_tokens=[1, 2],
                              completion_tokens=3) for i in range(per_run)]
        reqs, chunks = request_batches(recs)
        store.write_run(p, RunRow(status="ok", duration_s=100.0, metrics=summarize_run(reqs, chunks, 100.0)),
                        reqs, chunks)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests-per-run", type=int, default=100_000)
    ap.add_argument("--keep", help="build into (or reuse) this directory and keep it")
    args = ap.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="sglbench-root-checks-")
    try:
        if not os.path.isdir(os.path.join(root, "big")):
            build(root, args.requests_per_run)
        size_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs) / 1e6
        print(f"dataset: 8 runs x {args.requests_per_run:,} requests, {size_mb:.0f} MB parquet")
        calls: tuple[tuple[str, Callable[[], object]], ...] = (
            ("results show query", lambda: query(Results.open(root, "big"), SHOW_SQL)),
            ("compare_from_requests", lambda: compare_from_requests(Results.open(root, "big"))))
        for name, call in calls:
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            print(f"{name:24s} first {times[0]:.3f} s, second {times[1]:.3f} s")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
