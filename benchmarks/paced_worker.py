"""sglbench's side of benchmarks/paced_clients.py: one load-generator window against the paced stub (or N processes
splitting it), written out as per-request TTFT and per-chunk ITL by the project's own metric definitions."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

CONTINUOUS = b',"continuous_usage_stats":true'


def worker(url: str, endpoint: str, streams: int, n: int, input_tokens: int, output_tokens: int, out: Path,
           rate: Optional[float], loop: str = "asyncio", gc_mode: str = "on", drop: bool = False,
           shard_index: int = 0, num_shards: int = 1, start_unix_s: Optional[float] = None,
           read_batch_us: Optional[int] = None) -> None:
    """One sglbench window against the stub; per-request TTFT and per-chunk ITL written for the parent.

    `drop`: each Arrow batch is counted and released, as a load actor does once the driver has it (the memory
    mode); the counts say whether every row left exactly once."""
    import gc

    import pyarrow as pa

    if loop == "asyncio":
        sys.modules["uvloop"] = None  # type: ignore[assignment]  # the runner then takes asyncio's own loop
    else:
        import uvloop  # noqa: F401  # the runner takes it when importable: fail here if it is not

    from cluster.analysis.request_metrics import TTFT, chunk_gaps, request_columns
    from cluster.engines.base import HttpRequest
    from cluster.engines.sglang import SGLangEngine
    from cluster.loadgen.datasets import PromptArray
    from cluster.loadgen.runner import run_load_point
    from cluster.kernel.window_job import WindowJob
    from cluster.kernel.runs import LoadPoint

    class NoContinuousUsage(SGLangEngine):
        """The OpenAI stream a server sends without continuous usage stats (final usage chunk only)."""

        def build_request(self, *a: Any, **kw: Any) -> HttpRequest:
            # a bytes edit, not a JSON round trip: this benchmark's own work must not count as the client's
            r = super().build_request(*a, **kw)
            body = r.body.replace(CONTINUOUS, b"", 1)
            assert body != r.body, "the engine no longer asks for continuous usage stats this way"
            return HttpRequest(r.path, body, r.headers)

    engine = NoContinuousUsage() if endpoint == "openai" else SGLangEngine()
    api = "native" if endpoint == "native" else "completions"
    rng = np.random.default_rng(0)
    prompts = PromptArray(rng.integers(100, 32000, (n, input_tokens), dtype=np.int32))
    kept: list[tuple[pa.RecordBatch, pa.RecordBatch]] = []
    dropped = {"requests": 0, "ok": 0, "tokens": 0, "chunk_rows": 0, "batches": 0}

    def on_batch(r: pa.RecordBatch, c: pa.RecordBatch) -> None:
        if not drop:
            kept.append((r, c))
            return
        dropped["requests"] += r.num_rows
        dropped["ok"] += r.column("error").null_count
        dropped["tokens"] += int(np.asarray(r.column("client_tokens")).sum())
        dropped["chunk_rows"] += c.num_rows
        dropped["batches"] += 1

    rb = (read_batch_us or 0) / 1e6
    load = LoadPoint("rate", rate, read_batch_s=rb) if rate else \
        LoadPoint("concurrency", float(streams), read_batch_s=rb)
    if gc_mode == "freeze":
        gc.collect()
        gc.freeze()
        gc.disable()
    res = run_load_point(engine, WindowJob(url, api, output_tokens, load, 0, True, 0.0, "stub", 300.0,
                                           scrape_metrics=False, batch_rows=4096, shard_index=shard_index,
                                           num_shards=num_shards, start_unix_s=start_unix_s), prompts,
                                           on_batch=on_batch)
    gc.enable()
    ttft = itl = np.zeros(0)
    completed, tokens = dropped["ok"], dropped["tokens"]
    if kept:
        # the project's own definitions: TTFT as the runs table computes it, ITL as one gap per token-bearing chunk
        reqs = pa.concat_batches([r for r, _ in kept])
        chunks = pa.concat_batches([c for _, c in kept])
        cols = request_columns(reqs)
        ttft = TTFT.values(cols)[cols.ok]
        completed = int(cols.ok.sum())
        tokens = int(cols.client_tokens[cols.ok].sum())
        ri = chunks.column("request_index").to_numpy()
        ok = np.isin(ri, reqs.column("request_index").to_numpy()[cols.ok])
        ri, ci = ri[ok], chunks.column("chunk_index").to_numpy()[ok]
        order = np.lexsort((ci, ri))
        itl = chunk_gaps(ri[order], chunks.column("arrival_ns").to_numpy()[ok][order],
                         chunks.column("tokens").to_numpy()[ok][order])[0]
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "sglbench.npz", ttft_ms=ttft, itl_ms=itl)
    (out / "sglbench.json").write_text(json.dumps({
        "completed": completed, "duration_s": res.duration_s, "output_tokens": tokens, "requests": res.n_requests,
        "every_row_once": not drop or (dropped["requests"] == res.n_requests == len(range(shard_index, n, num_shards))
                                       and dropped["chunk_rows"] == res.n_chunks and dropped["batches"] == res.batches),
        "batches": res.batches, "chunk_rows": res.n_chunks}))


def sharded_worker(argv: list[str], shards: int, out: Path) -> None:
    """The worker as `shards` processes splitting one window (shard i sends requests i, i + shards, ...; each has
    its share of the streams), started together 1 s from now; their figures merged as one client's."""
    start = time.time() + 1.0
    procs = [subprocess.Popen([*argv, "--shards", "1", "--shard-index", str(i), "--num-shards", str(shards),
                               "--start-unix-s", repr(start), "--out", str(out / f"shard{i}")])
             for i in range(shards)]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("a shard failed")
    ds = [json.loads((out / f"shard{i}" / "sglbench.json").read_text()) for i in range(shards)]
    arrs = [np.load(out / f"shard{i}" / "sglbench.npz") for i in range(shards)]
    np.savez(out / "sglbench.npz", ttft_ms=np.concatenate([a["ttft_ms"] for a in arrs]),
             itl_ms=np.concatenate([a["itl_ms"] for a in arrs]))
    merged = {k: sum(d[k] for d in ds) for k in ("completed", "output_tokens", "requests", "batches", "chunk_rows")}
    (out / "sglbench.json").write_text(json.dumps({**merged, "duration_s": max(d["duration_s"] for d in ds),
                                                   "every_row_once": all(d["every_row_once"] for d in ds)}))
