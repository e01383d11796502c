"""How many stream chunks/s one load generator sustains, and its client lag, against a near-zero-step-time server.

Server: the simulator (`python -m cluster.sim.server`, SGLBENCH_SIM time_scale 0) when it imports, else a
minimal in-file fake SGLang server in a subprocess. Both run on this machine, so they share its CPUs with the client.

    python benchmarks/loadgen.py [--server auto|sim|fake|both] [--requests 400] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Optional

from cluster.engines.base import Prompt
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen import pacing
from cluster.loadgen.runner import run_load_point
from cluster.kernel.window_job import WindowJob
from cluster.kernel.runs import LoadPoint
from cluster.server.process import free_port

SPEC_PATTERN = [1, 3, 2, 4]


def serve_fake(port: int) -> None:
    """Fake SGLang /generate: cumulative native chunks, several tokens per chunk, one event-loop yield per step."""
    from aiohttp import web

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body["sampling_params"]["max_new_tokens"])
        n_in = len(body.get("input_ids") or [])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        out = 0
        k = 0
        while out < n:
            out = min(n, out + SPEC_PATTERN[k % len(SPEC_PATTERN)])
            k += 1
            fin = {"type": "length", "length": n} if out == n else None
            meta = {"id": "b", "finish_reason": fin, "prompt_tokens": n_in, "completion_tokens": out,
                    "cached_tokens": 0}
            await resp.write(b"data: " + json.dumps({"text": "t" * out, "meta_info": meta}).encode() + b"\n\n")
            await asyncio.sleep(0)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def start_server(kind: str, port: int) -> subprocess.Popen[bytes]:
    if kind == "sim":
        argv = [sys.executable, "-m", "cluster.sim.server", "--model-path", "sim", "--port", str(port)]
        env = dict(os.environ, SGLBENCH_SIM=json.dumps({"time_scale": 0.0}))
    else:
        argv = [sys.executable, os.path.abspath(__file__), "--serve-fake", str(port)]
        env = dict(os.environ)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"{kind} server exited with {proc.returncode}: {err[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError(f"{kind} server not healthy within 60 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def measure(url: str, load: LoadPoint, n: int, max_tokens: int) -> dict[str, float]:
    prompts = [Prompt(input_ids=(100 + i, 101, 102, 103)) for i in range(n)]
    cpu0 = time.process_time()
    res = run_load_point(SGLangEngine(), WindowJob(url, "native", max_tokens, load, 0, True, 0.0, "m", 120.0,
                                                   scrape_metrics=False), prompts)
    cpu_s = time.process_time() - cpu0
    n_err = sum(1 for e in res.requests.column("error").to_pylist() if e is not None)
    chunks = res.chunks.num_rows
    tokens = sum(res.chunks.column("tokens").to_pylist())
    return {
        "chunks_per_s": chunks / res.duration_s,
        "tokens_per_s": tokens / res.duration_s,
        "client_cpu_us_per_chunk": 1e6 * cpu_s / max(1, chunks),
        "lag_p50_ms": res.lag_p50_ns / 1e6,
        "lag_p99_ms": res.lag_p99_ns / 1e6,
        "errors": n_err,
        "duration_s": res.duration_s,
    }


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", choices=["auto", "sim", "fake", "both"], default="auto")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, nargs="*", default=[16, 64])
    ap.add_argument("--rate", type=float, nargs="*", default=[50.0])
    ap.add_argument("--spin-ns", type=int, nargs="*", default=[pacing.SPIN_NS],
                    help="open-loop spin windows to compare (0 = timer only)")
    ap.add_argument("--serve-fake", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_fake is not None:
        serve_fake(args.serve_fake)
        return 0
    has_sim = importlib.util.find_spec("cluster.sim.server") is not None
    kinds = {"auto": ["sim" if has_sim else "fake"], "both": ["sim", "fake"]}.get(args.server, [args.server])
    loads = [LoadPoint("concurrency", float(c)) for c in args.concurrency] + [LoadPoint("rate", r) for r in args.rate]
    print(f"requests={args.requests} max_tokens={args.max_tokens} cpus={os.cpu_count()} (server shares them)")
    print(f"{'server':6} {'spin us':>7} {'load':>6} {'chunks/s':>9} {'tok/s':>9} {'cpu us/chunk':>12} {'lag p50 ms':>10} "
          f"{'lag p99 ms':>10} {'errors':>6} {'dur s':>6}")
    for kind in kinds:
        port = free_port()
        proc = start_server(kind, port)
        try:
            url = f"http://127.0.0.1:{port}"
            measure(url, LoadPoint("concurrency", 8.0), 16, 16)  # warm connections and the server
            runs = [(load, spin) for load in loads for spin in (args.spin_ns if load.kind == "rate" else [0])]
            for load, spin in runs:
                pacing.SPIN_NS = spin
                m = measure(url, load, args.requests, args.max_tokens)
                print(f"{kind:6} {spin / 1000:7.0f} {load.label:>6} {m['chunks_per_s']:9.0f} {m['tokens_per_s']:9.0f} "
                      f"{m['client_cpu_us_per_chunk']:12.1f} {m['lag_p50_ms']:10.3f} {m['lag_p99_ms']:10.3f} "
                      f"{m['errors']:6d} {m['duration_s']:6.2f}")
        finally:
            stop_server(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
