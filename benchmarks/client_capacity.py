"""Client capacity side by side: SGLang 0.5.23's benchmark client vs sglbench's load generator on a zero-cost server.

Server: nginx (one worker) serving /work/shared/tools/sglang_stub.py's prebuilt 256-chunk SGLang-native streams
(cumulative chunks, input 128 / output 256). Each client runs in its own process, pinned to a core other than
nginx's where the machine has two; psutil samples its CPU time and RSS. sglbench's runs keep the full per-request
record (every chunk's arrival ns and token count, send times, server meta) as Arrow batches.

    python benchmarks/client_capacity.py                      # full: 20 s runs, 3 repeats, c = 1 16 64 256
    python benchmarks/client_capacity.py --quick              # 5 s runs, 1 repeat
    python benchmarks/client_capacity.py --clients sglbench --shards 1 2 --concurrency 64 256
    python benchmarks/client_capacity.py --long-requests 200000   # RSS over a long run, batches handed out

SGLang's client comes from .ci/venvs/sglang-client (scripts/setup_sglang_client_venv.sh).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
STUB = Path(os.environ.get("SGLBENCH_STUB", "/work/shared/tools/sglang_stub.py"))
SGLANG_PY = ROOT / ".ci/venvs/sglang-client/bin/python"
CHUNKS_PER_REQUEST = 256
INPUT_TOKENS = 128

TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
for i in range(3, 4096):
    vocab[f"w{i}"] = i
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>")
fast.save_pretrained(sys.argv[1])
"""


def sglang_entry(argv: list[str]) -> None:
    """Run `python -m sglang.benchmark.serving argv` (in the client venv, where torchvision is a CUDA-only wheel).

    SGLang's module imports its multimodal configs, which import torchvision; that wheel's C++ ops cannot load on
    CPU torch, so its fake-kernel registrations for them are skipped. The text benchmark never calls them.
    """
    import runpy

    import torch.library as tl

    orig = tl.register_fake

    def tolerant(op: Any, func: Any = None, /, **kw: Any) -> Any:
        if func is not None:
            try:
                return orig(op, func, **kw)
            except RuntimeError:
                return func

        def deco(f: Any) -> Any:
            try:
                return orig(op, **kw)(f)
            except RuntimeError:
                return f

        return deco

    tl.register_fake = tolerant
    import torchvision  # noqa: F401

    tl.register_fake = orig
    sys.argv = ["sglang.benchmark.serving", *argv]
    runpy.run_module("sglang.benchmark.serving", run_name="__main__")


def sglbench_worker(port: int, concurrency: int, n: int, shard_index: int, num_shards: int,
                    start_unix_s: Optional[float], out: str, drop: bool = False) -> None:
    """One sglbench load-generator process: a closed-loop window, full records kept; writes its figures as JSON.

    `drop`: each Arrow batch is counted and released, as a load actor does once it has handed the batch to the
    driver (the long-run memory check); otherwise every batch is kept in this process."""
    import numpy as np

    from cluster.engines.sglang import SGLangEngine
    from cluster.loadgen.datasets import PromptArray
    from cluster.loadgen.runner import run_load_point
    from cluster.kernel.window_job import WindowJob
    from cluster.kernel.runs import LoadPoint

    rng = np.random.default_rng(0)
    prompts = PromptArray(rng.integers(100, 32000, (n, INPUT_TOKENS), dtype=np.int32))  # built on send
    kept: list[Any] = []
    dropped = [0, 0, 0]

    def on_batch(r: Any, c: Any) -> None:
        if drop:
            dropped[0] += r.num_rows
            dropped[1] += c.num_rows
            dropped[2] += int(c.num_rows == r.column("num_chunks").to_numpy().sum())
        else:
            kept.append((r, c))

    cpu0 = time.process_time()
    res = run_load_point(SGLangEngine(), WindowJob(f"http://127.0.0.1:{port}", "native", CHUNKS_PER_REQUEST,
                                                   LoadPoint("concurrency", float(concurrency)), 0, True, 0.0, "stub",
                                                   120.0, scrape_metrics=False, batch_rows=1024,
                                                   shard_index=shard_index, num_shards=num_shards,
                                                   start_unix_s=start_unix_s), prompts, on_batch=on_batch)
    cpu_s = time.process_time() - cpu0
    n_err = sum(r.num_rows - r.column("error").null_count for r, _ in kept)
    full = all(c.num_rows == r.column("num_chunks").to_numpy().sum() for r, c in kept)
    if drop:
        full = dropped[0] == res.n_requests and dropped[1] == res.n_chunks and dropped[2] == res.batches
    Path(out).write_text(json.dumps({
        "requests": res.n_requests, "chunks": res.n_chunks, "duration_s": res.duration_s, "errors": n_err,
        "window_cpu_s": cpu_s, "batches": res.batches, "full_records": bool(full),
        "window_start_unix_s": res.window_start_unix_s,
    }))


def _pin(pid: int, cores: Optional[set[int]]) -> None:
    if cores:
        try:
            os.sched_setaffinity(pid, cores)
        except OSError:
            pass


def _watch(procs: list[subprocess.Popen[bytes]], timeout_s: float,
           trace: Optional[list[tuple[float, int]]] = None) -> tuple[float, int]:
    """Wait for every process; return (CPU seconds summed over them, peak RSS bytes summed); `trace` gets (s, RSS)."""
    import psutil

    ps = [psutil.Process(p.pid) for p in procs]
    cpu = [0.0] * len(ps)
    peak = [0] * len(ps)
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while any(p.poll() is None for p in procs):
        for k, p in enumerate(ps):
            try:
                t = p.cpu_times()
                cpu[k] = t.user + t.system
                peak[k] = max(peak[k], p.memory_info().rss)
            except psutil.Error:
                pass
        if trace is not None:
            trace.append((time.monotonic() - t0, sum(peak)))
        if time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise RuntimeError("client run exceeded its time limit")
        time.sleep(0.05)
    return sum(cpu), sum(peak)


class Stub:
    """nginx serving the SGLang stub; started and stopped by its own Popen handle."""

    def __init__(self, cores: Optional[set[int]]) -> None:
        from cluster.server.process import free_port  # not at the top: --sglang-entry runs in SGLang's venv

        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise SystemExit("nginx not found: apt-get install -y nginx (Debian's nginx)")
        self.dir = tempfile.mkdtemp(prefix="sglbench-stub-")
        os.chmod(self.dir, 0o755)  # nginx started as root serves files as its unprivileged worker user
        self.port = free_port()
        subprocess.run([sys.executable, str(STUB), self.dir, str(self.port), str(free_port())], check=True,
                       stdout=subprocess.DEVNULL)
        self.proc = subprocess.Popen([nginx, "-c", f"{self.dir}/nginx.conf", "-p", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                    self.stop()
                    raise SystemExit(f"nginx did not start: {err[-500:]}")
                time.sleep(0.05)
        import psutil

        for p in [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children()]:
            _pin(p.pid, cores)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_sglang(port: int, c: int, n: int, tok_dir: str, cores: Optional[set[int]], tmp: str) -> dict[str, Any]:
    out = Path(tmp) / f"sgl-{c}-{time.monotonic_ns()}.jsonl"
    argv = [str(SGLANG_PY), str(Path(__file__).resolve()), "--sglang-entry", "--backend", "sglang",
            "--host", "127.0.0.1", "--port", str(port), "--dataset-name", "random-ids",
            "--random-input-len", str(INPUT_TOKENS), "--random-output-len", str(CHUNKS_PER_REQUEST),
            "--random-range-ratio", "1.0", "--num-prompts", str(n), "--max-concurrency", str(c),
            "--tokenizer", tok_dir, "--model", "stub", "--disable-tqdm", "--output-file", str(out)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pin(p.pid, cores)
    cpu_s, rss = _watch([p], 900)
    if p.returncode != 0 or not out.exists():
        err = p.stderr.read().decode(errors="replace") if p.stderr else ""
        raise RuntimeError(f"SGLang client failed ({p.returncode}): {err[-1500:]}")
    r = json.loads(out.read_text().splitlines()[-1])
    dur = float(r["duration"])
    return {"req_s": r["completed"] / dur, "chunks_s": r["completed"] * CHUNKS_PER_REQUEST / dur,
            "duration_s": dur, "completed": r["completed"], "cpu_s": cpu_s, "rss_mb": rss / 2**20, "errors": n - r["completed"]}


def run_sglbench(port: int, c: int, n: int, shards: int, cores_list: list[Optional[set[int]]],
                 tmp: str) -> dict[str, Any]:
    start = time.time() + 2.0 + 0.5 * shards  # after every shard's imports
    procs, outs = [], []
    for s in range(shards):
        out = Path(tmp) / f"sb-{c}-{s}-{time.monotonic_ns()}.json"
        argv = [sys.executable, str(Path(__file__).resolve()), "--sglbench-worker", "--port", str(port),
                "--concurrency", str(c), "--requests", str(n), "--shard-index", str(s), "--num-shards", str(shards),
                "--start-unix-s", repr(start), "--out", str(out)]
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _pin(p.pid, cores_list[s % len(cores_list)])
        procs.append(p)
        outs.append(out)
    cpu_s, rss = _watch(procs, 900)
    rs = []
    for p, out in zip(procs, outs):
        if p.returncode != 0 or not out.exists():
            err = p.stderr.read().decode(errors="replace") if p.stderr else ""
            raise RuntimeError(f"sglbench worker failed ({p.returncode}): {err[-1500:]}")
        rs.append(json.loads(out.read_text()))
    dur = max(r["duration_s"] for r in rs)
    req = sum(r["requests"] for r in rs)
    ch = sum(r["chunks"] for r in rs)
    return {"req_s": req / dur, "chunks_s": ch / dur, "duration_s": dur, "completed": req - sum(r["errors"] for r in rs),
            "cpu_s": cpu_s, "cpu_run_s": sum(r["window_cpu_s"] for r in rs), "rss_mb": rss / 2**20,
            "errors": sum(r["errors"] for r in rs), "full_records": all(r["full_records"] for r in rs),
            "chunk_rows": ch}


def long_run(port: int, n: int, cores: Optional[set[int]], tmp: str) -> None:
    """RSS over one long sglbench window whose batches leave the process as they fill (the load actor's path)."""
    out = Path(tmp) / "long.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--sglbench-worker", "--drop", "--port", str(port),
            "--concurrency", "64", "--requests", str(n), "--out", str(out)]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pin(p.pid, cores)
    trace: list[tuple[float, int]] = []
    cpu_s, peak = _watch([p], 3600, trace)
    if p.returncode != 0 or not out.exists():
        raise RuntimeError(f"long run failed: {(p.stderr.read() if p.stderr else b'').decode(errors='replace')[-1500:]}")
    r = json.loads(out.read_text())
    print(f"\nlong run: {r['requests']} requests, {r['chunks']} chunk rows in {r['batches']} batches of <= 1024 "
          f"requests, every row handed out once: {r['full_records']}; {r['chunks'] / r['duration_s']:.0f} chunks/s, "
          f"CPU {cpu_s:.1f} s")
    marks = [trace[min(len(trace) - 1, int(f * (len(trace) - 1)))] for f in (0.1, 0.25, 0.5, 0.75, 1.0)]
    print("   RSS MB at " + ", ".join(f"{t:.0f} s: {b / 2**20:.0f}" for t, b in marks) + f" (peak {peak / 2**20:.0f})")


def main(argv: Optional[list[str]] = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["--sglang-entry"]:
        sglang_entry(raw[1:])
        return 0
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 s runs, 1 repeat")
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 16, 64, 256])
    ap.add_argument("--clients", nargs="*", default=["sglang", "sglbench"], choices=["sglang", "sglbench"])
    ap.add_argument("--shards", type=int, nargs="*", default=[1], help="sglbench load-generator processes per run")
    ap.add_argument("--json", default=None, help="write every run's figures here")
    ap.add_argument("--long-requests", type=int, default=0,
                    help="only a long sglbench run of this many requests, reporting RSS over time")
    ap.add_argument("--drop", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sglbench-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--shard-index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--num-shards", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--start-unix-s", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(raw)
    if args.sglbench_worker:
        sglbench_worker(args.port, args.concurrency[0], args.requests, args.shard_index, args.num_shards,
                        args.start_unix_s, args.out, args.drop)
        return 0
    if args.quick:
        args.duration_s, args.repeats = 5.0, 1
    if "sglang" in args.clients and not SGLANG_PY.exists():
        print(f"{SGLANG_PY} missing: run scripts/setup_sglang_client_venv.sh", file=sys.stderr)
        return 2
    ncpu = len(os.sched_getaffinity(0))
    server_cores = {0} if ncpu >= 2 else None
    client_cores = {1} if ncpu >= 2 else None
    tmp = tempfile.mkdtemp(prefix="sglbench-cap-")
    stub = Stub(server_cores)
    rows: list[dict[str, Any]] = []
    if args.long_requests:
        try:
            long_run(stub.port, args.long_requests, client_cores, tmp)
        finally:
            stub.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        return 0
    try:
        tok_dir = str(Path(tmp) / "tokenizer")
        if "sglang" in args.clients:
            subprocess.run([str(SGLANG_PY), "-c", TOKENIZER_SCRIPT, tok_dir], check=True)
        print(f"cpus={ncpu} nginx on {server_cores} clients on {client_cores} load1={os.getloadavg()[0]:.1f} "
              f"duration>={args.duration_s:g}s repeats={args.repeats}", flush=True)
        startup_cpu_s = 0.0
        if "sglang" in args.clients:
            # SGLang's client spends seconds importing torch/transformers: one 1-request run measures that cost,
            # which cpu_run_s subtracts so per-chunk CPU compares the streaming work only
            startup_cpu_s = run_sglang(stub.port, 1, 1, tok_dir, client_cores, tmp)["cpu_s"]
            print(f"SGLang client startup CPU (1-request run): {startup_cpu_s:.1f} s", flush=True)
        configs = [("sglang", 1)] if "sglang" in args.clients else []
        configs += [("sglbench", s) for s in args.shards] if "sglbench" in args.clients else []
        for c in args.concurrency:
            rate: dict[tuple[str, int], float] = {}
            for rep in range(args.repeats):
                for client, shards in configs:
                    if shards > c:
                        continue  # a shard needs at least one of the window's concurrent streams
                    key = (client, shards)
                    if key not in rate:  # a short pilot sizes the run to last >= duration_s
                        n0 = max(4 * c, 64 if client == "sglang" else 200)
                        pilot = (run_sglang(stub.port, c, n0, tok_dir, client_cores, tmp) if client == "sglang" else
                                 run_sglbench(stub.port, c, n0, shards, _shard_cores(shards, client_cores), tmp))
                        rate[key] = pilot["req_s"]
                    n = max(c, math.ceil(rate[key] * args.duration_s * 1.1))
                    for _ in range(4):  # a run shorter than duration_s does not count: resize and rerun
                        m = (run_sglang(stub.port, c, n, tok_dir, client_cores, tmp) if client == "sglang" else
                             run_sglbench(stub.port, c, n, shards, _shard_cores(shards, client_cores), tmp))
                        rate[key] = m["req_s"]
                        if m["duration_s"] >= args.duration_s:
                            break
                        n = math.ceil(n * args.duration_s / max(m["duration_s"], 0.1) * 1.1)
                    if client == "sglang":
                        m["cpu_run_s"] = max(0.0, m["cpu_s"] - startup_cpu_s)
                    m.update(client=client, shards=shards, concurrency=c, repeat=rep, requests=n,
                             load1=os.getloadavg()[0])
                    rows.append(m)
                    print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in m.items()}),
                          flush=True)
    finally:
        stub.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    _summary(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _shard_cores(shards: int, client_cores: Optional[set[int]]) -> list[Optional[set[int]]]:
    if shards == 1 or client_cores is None:
        return [client_cores]
    return [None]  # more shards than free cores: let the kernel place them (they share cores with nginx)


def _summary(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'client':10} {'c':>4} {'req/s':>8} {'chunks/s':>10} {'spread':>15} {'cpu s':>7} {'run us/chunk':>12} "
          f"{'RSS MB':>7} {'ratio':>6}")
    base: dict[int, float] = {}
    for c in sorted({r["concurrency"] for r in rows}):
        for client, shards in sorted({(r["client"], r["shards"]) for r in rows if r["concurrency"] == c},
                                     key=lambda k: (k[0] != "sglang", k[1])):
            rs = [r for r in rows if r["concurrency"] == c and r["client"] == client and r["shards"] == shards]
            ch = [r["chunks_s"] for r in rs]
            med = statistics.median(ch)
            if client == "sglang":
                base[c] = med
            ratio = med / base[c] if c in base else float("nan")
            cpu = statistics.median(r["cpu_s"] for r in rs)
            per = statistics.median(1e6 * r["cpu_run_s"] / max(1, r["chunks_s"] * r["duration_s"]) for r in rs)
            name = client if client == "sglang" else f"sglbench×{shards}"
            print(f"{name:10} {c:4d} {statistics.median(r['req_s'] for r in rs):8.1f} {med:10.0f} "
                  f"{min(ch):7.0f}-{max(ch):<7.0f} {cpu:7.1f} {per:12.2f} {max(r['rss_mb'] for r in rs):7.0f} "
                  f"{ratio:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
