"""The driver's peak memory for one window of 10^6 chunks: read back after streaming (before) or summarised while
streaming (after, the driver's WindowSummary).

A producer process plays the load actor: hand-built records (`--requests` requests of `--chunks` one-token chunks)
go through the load generator's RecordSink and leave as Arrow batch pairs on a pipe. A consumer process
plays the driver: every batch pair is spooled by a RunWriter (as PointRunner does) and the run row is built by
build_run_row, either the old way, kept here (`read-back`: the spooled requests and chunks read back, the lag
computed from them) or the new one (`summary`: each pair folded into a WindowSummary on its way). Each consumer is a
fresh process; its peak is ru_maxrss minus its RSS just before the first batch, so imports are not counted.

    python benchmarks/window_memory.py [--requests 10000] [--chunks 100] [--batch-rows 4096]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from cluster.kernel.records import RequestRecord

SPEC = """
version: 1
name: window-memory
model: {path: sim://window-memory, engine: sim}
variants:
  - {name: base, baseline: true}
workloads:
  - {name: w, input_tokens: 16, output_tokens: %d, num_requests: %d}
load: {concurrency: [64]}
"""


def produce(n_requests: int, chunks: int, batch_rows: int) -> None:
    """The load actor's side: records through the RecordSink, each batch pair pickled onto stdout (Arrow batches
    pickle as Arrow IPC, as they travel through Ray)."""
    from cluster.loadgen.sink import RecordSink

    out = sys.stdout.buffer
    sink = RecordSink(n_requests, batch_rows, lambda r, c: pickle.dump((r, c), out, protocol=5))
    for i in range(n_requests):
        send_ns = i * 2_000_000 + (i * 7919) % 500_000
        start = send_ns + 20_000_000 + (i * 104_729) % 5_000_000
        arrivals = [start + k * 4_000_000 + (i * k * 31) % 900_000 for k in range(chunks)]
        rec = RequestRecord(request_index=i, intended_send_ns=i * 2_000_000, actual_send_ns=send_ns,
                            prompt_tokens_sent=16, max_tokens=chunks, chunk_arrival_ns=arrivals,
                            chunk_tokens=[1] * chunks, prompt_tokens=16, completion_tokens=chunks,
                            finish_reason="length", http_status=200)
        sink.add(rec, arrivals[-1])
    sink.flush()
    out.flush()


def _pairs() -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch]]:
    """The batch pairs back from stdin, one at a time."""
    src = sys.stdin.buffer
    while True:
        try:
            yield pickle.load(src)
        except EOFError:
            return


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def consume(mode: str, out_dir: str, n_requests: int, chunks: int, spool: bool) -> None:
    """The driver's side: spool every batch pair (unless not `spool`, summary only) and build the run row, `mode`
    read-back or summary."""
    from cluster.analysis.request_metrics import requests_lag
    from cluster.analysis.run_row import build_run_row
    from cluster.config.loader import parse_spec_text
    from cluster.dataset.store import DatasetStore
    from cluster.dataset.writer import RunWriter
    from cluster.distributed.window_summary import WindowSummary
    from cluster.kernel.run_facts import GateVerdict, SegmentFacts, ServerFacts
    from cluster.kernel.window import MeasuredWindow
    from cluster.plan.runs import make_plan

    spec = parse_spec_text(SPEC % (chunks, n_requests))
    p = make_plan(spec)[0]
    server = ServerFacts(pid=1, pgid=1, port=1, port_attempts=1, base_url="http://127.0.0.1:1", argv=[], env={},
                         cuda_visible_devices="", gpu_ids=[], node_id="n", hostname="h", startup_s=0.0,
                         started_unix_s=0.0, infos={}, resolved_args={}, log_path="", server_pid=None,
                         server_saw_cuda_visible_devices=None, environment={})
    segment = SegmentFacts(None, None, None, "", "n", 1, GateVerdict(True, (), None))
    writer = RunWriter(DatasetStore(out_dir, spec.name), p)
    summary = WindowSummary()
    base_rss = _rss_bytes()
    n_chunks = 0
    for requests, chunk_batch in _pairs():
        if spool:
            writer.write("requests", requests)
            writer.write("chunks", chunk_batch)
        n_chunks += chunk_batch.num_rows
        if mode == "summary":
            summary.add(requests, chunk_batch)
    shard = MeasuredWindow(requests=pa.table({}), chunks=pa.table({}), window_start_unix_s=1.0e9,
                           duration_s=n_requests * 0.002 + chunks * 0.004 + 0.03, lag_p50_ns=0, lag_p99_ns=0,
                           counters_before={}, counters_after={}, n_requests=n_requests, n_chunks=n_chunks)
    if mode == "summary":
        out = summary.merged([shard], 0, True, None)
    else:  # PointRunner._stream_window before the summary: the spooled tables read back into the driver
        requests_all, chunks_all = writer.read("requests"), writer.read("chunks")
        lag = requests_lag(requests_all)
        assert lag is not None
        t0 = shard.window_start_unix_s  # the merge of the shards' records as it was: duration from their ends
        out = MeasuredWindow(requests=requests_all, chunks=chunks_all, window_start_unix_s=t0,
                             duration_s=shard.window_start_unix_s + shard.duration_s - t0,
                             lag_p50_ns=round(lag.p50_ns), lag_p99_ns=round(lag.p99_ns), lag_max_ns=round(lag.max_ns), counters_before={}, counters_after={}, flushed=True,
                             n_requests=n_requests, n_chunks=n_chunks)
    row = build_run_row(p, out, server, segment, spec, [], None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base_rss
    writer.abort()
    print(json.dumps({"mode": mode, "chunks": n_chunks, "requests": row.n_requests, "status": row.status,
                      "driver_peak_mb": round(peak / 2**20, 1),
                      "metrics_sha256": hashlib.sha256(row.metrics_json.encode()).hexdigest()[:16]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--chunks", type=int, default=100, help="one-token chunks per request")
    ap.add_argument("--batch-rows", type=int, default=4096)
    ap.add_argument("--no-spool", action="store_true",
                    help="summary only, without the RunWriter: the driver's row building alone")
    ap.add_argument("--produce", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--consume", choices=["read-back", "summary"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.produce:
        produce(a.requests, a.chunks, a.batch_rows)
        return
    if a.consume:
        consume(a.consume, a.out, a.requests, a.chunks, not a.no_spool)
        return
    me = [sys.executable, str(Path(__file__).resolve()), "--requests", str(a.requests), "--chunks", str(a.chunks),
          "--batch-rows", str(a.batch_rows)]
    results = []
    for mode in ("summary",) if a.no_spool else ("read-back", "summary"):
        with tempfile.TemporaryDirectory() as out:
            producer = subprocess.Popen(me + ["--produce"], stdout=subprocess.PIPE)
            got = subprocess.run(me + ["--consume", mode, "--out", out] + ["--no-spool"] * a.no_spool, stdin=producer.stdout, capture_output=True,
                                 text=True, check=False)
            assert producer.stdout is not None
            producer.stdout.close()
            if producer.wait() != 0 or got.returncode != 0:
                raise SystemExit(f"{mode} failed: {got.stderr[-2000:]}")
            results.append(json.loads(got.stdout.strip().splitlines()[-1]))
    for r in results:
        print(f"{r['mode']:>9}: {r['chunks']:,} chunks of {r['requests']:,} requests, run {r['status']}, "
              f"driver peak +{r['driver_peak_mb']} MB over its RSS before the first batch, metrics {r['metrics_sha256']}")
    if a.no_spool:
        return
    before, after = results
    same = "identical" if before["metrics_sha256"] == after["metrics_sha256"] else "DIFFERENT"
    print(f"driver peak: {before['driver_peak_mb']} MB before (read-back), {after['driver_peak_mb']} MB after "
          f"(summary), {before['driver_peak_mb'] / max(after['driver_peak_mb'], 0.1):.1f}x less; run rows {same}")


if __name__ == "__main__":
    main()
