"""sglbench's load generator against peer benchmark clients, side by side, on the paced C stub (and its burst mode).

Every client runs in its own process tree pinned to one core (the stub on the other), against
benchmarks/paced_stub.c: one SSE event per write() on a known schedule (TTFT, then one token every ITL), so
`client-reported − injected` is each client's own timing error. Per run it records the client's own
completed requests, duration, per-request TTFT and per-chunk ITL (each peer's detailed output; peers.py says
which peer reports what), the process tree's CPU seconds and peak RSS (psutil), the stub's own write lateness
(GET /stats; a run whose stub p99 lateness passes --stub-late-bound-us is discarded and said so), and the load
average. Clients alternate inside each repeat.

    python benchmarks/paced_clients.py saturation --streams 1024 --endpoints native openai-usage openai
    python benchmarks/paced_clients.py timing --streams 64 256
    python benchmarks/paced_clients.py openloop --rate 50
    python benchmarks/paced_clients.py cpu --streams 64          # CPU us per chunk and RSS above the import baseline
    python benchmarks/paced_clients.py saturation --burst        # the parser ceiling: whole responses in one write

Peers (SGLang's bench_serving, vLLM's bench serve, AIPerf, GuideLLM) come from their own venvs:
scripts/setup_sglang_client_venv.sh, scripts/setup_vllm_venv.sh, scripts/setup_peer_venvs.sh.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
# SGLBENCH_ROOT: run another checkout's load generator in the worker (an A/B of two versions in one run)
sys.path.insert(1, os.environ.get("SGLBENCH_ROOT") or str(Path(__file__).resolve().parents[1]))

import paced_stub  # noqa: E402
from paced_run import INPUT_TOKENS, Client, CpuShare, Result, run_client  # noqa: E402
from paced_worker import sharded_worker, worker  # noqa: E402
import peers  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]
TTFT_MS = 20.0
ITL_MS = 10.0


@dataclass
class Sglbench:
    """sglbench's load generator (cluster.loadgen.runner.run_load_point), full records kept.

    `loop`: "asyncio" hides uvloop from the worker, "uvloop" needs it importable in `python` (SGLBENCH_UVLOOP_PYTHON
    names an interpreter that has it); `gc`: "freeze" collects before the window and keeps the collector off for it
    (the runner itself always freezes what is alive when its window starts)."""

    name: str = "sglbench"
    python: str = sys.executable
    root: str = str(ROOT)
    loop: str = "asyncio"
    gc: str = "on"
    drop: bool = False
    shards: int = 1
    """Load-generator processes splitting the window (load.actors_per_server), started together."""
    read_batch_us: Optional[int] = None
    """The load point's read_batch_s (load.read_batch_ms) for this run, in µs (None: unset, as a spec's default)."""

    def available(self) -> bool:
        if self.loop != "uvloop":
            return True
        return subprocess.run([self.python, "-c", "import uvloop"], capture_output=True).returncode == 0

    def argv(self, base_url: str, endpoint: str, concurrency: int, num_requests: int, input_tokens: int,
             output_tokens: int, tokenizer_dir: Path, out_dir: Path,
             request_rate: Optional[float] = None) -> Optional[list[str]]:
        a = [self.python, str(Path(__file__).resolve()), "worker", "--url", base_url, "--endpoint", endpoint,
             "--streams", str(concurrency), "--requests", str(num_requests), "--input-tokens", str(input_tokens),
             "--output-tokens", str(output_tokens), "--out", str(out_dir), "--loop", self.loop, "--gc", self.gc,
             "--shards", str(self.shards)]
        if self.read_batch_us is not None:
            a += ["--read-batch-us", str(self.read_batch_us)]
        return a + (["--rate", repr(request_rate)] if request_rate else []) + (["--drop"] if self.drop else [])

    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": self.root, "SGLBENCH_ROOT": self.root}

    def parse(self, out_dir: Path) -> "peers.PeerResult":
        d = json.loads((out_dir / "sglbench.json").read_text())
        arr = np.load(out_dir / "sglbench.npz")
        return peers.PeerResult(completed=d["completed"], duration_s=d["duration_s"],
                                ttft_ms=arr["ttft_ms"].tolist(), itl_ms=arr["itl_ms"].tolist(),
                                output_tokens=d["output_tokens"],
                                notes=(f"{d['batches']} batches handed out, every row once: {d['every_row_once']}"
                                       if self.drop else "per-chunk arrival gaps, kernel receive stamps"))


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def clients_for(names: Sequence[str]) -> list[Client]:
    out: list[Client] = []
    for name in names:
        c: Client
        if name.startswith("sglbench"):  # sglbench[+uvloop][+gcfreeze][+shardsN][+readNus][@/other/checkout]
            spec, _, root = name.partition("@")
            opts = set(spec.split("+")[1:])
            shards = [o for o in opts if o.startswith("shards") and o[6:].isdigit() and int(o[6:]) >= 1]
            reads = [o for o in opts if o.startswith("read") and o.endswith("us") and o[4:-2].isdigit()]
            if not opts - set(shards) - set(reads) <= {"uvloop", "gcfreeze"} or len(shards) > 1 or len(reads) > 1 \
                    or spec.split("+")[0] != "sglbench":
                raise SystemExit(f"--clients {name}: expected sglbench[+uvloop][+gcfreeze][+shardsN][+readNus]"
                                 "[@checkout]")
            uv = "uvloop" in opts
            c = Sglbench(name=spec + (f"@{Path(root).name}" if root else ""),
                         python=os.environ.get("SGLBENCH_UVLOOP_PYTHON", sys.executable) if uv else sys.executable,
                         root=root or str(ROOT), loop="uvloop" if uv else "asyncio",
                         gc="freeze" if "gcfreeze" in opts else "on", shards=int(shards[0][6:]) if shards else 1,
                         read_batch_us=int(reads[0][4:-2]) if reads else None)
        else:
            c = peers.PEERS[name]
        if not c.available():
            print(f"# {name}: skipped (its venv is not built: see peers.py)", flush=True)
            continue
        out.append(c)
    return out


def _n_for(streams: int, duration_s: float, output_tokens: int) -> int:
    life_s = (TTFT_MS + (output_tokens - 1) * ITL_MS) / 1000.0
    return max(streams, int(streams * duration_s / life_s))


def _row(r: Result) -> str:
    return (f"{r.client:10} {r.endpoint:13} {r.streams:6d} {r.completed:8d} {r.chunks_s:10.0f} {r.cpu_s:7.1f} "
            f"{r.peak_rss_mb:7.0f} {r.stub.get('late_p99_us', float('nan')):9.0f} {r.load1:5.2f}"
            f"{'  DISCARDED: ' + r.discarded if r.discarded else ''}  {r.notes}")


@dataclass
class Table:
    results: list[Result] = field(default_factory=list)

    def medians(self, client: str, endpoint: str, streams: int) -> Optional[float]:
        xs = [r.chunks_s for r in self.results if (r.client, r.endpoint, r.streams) == (client, endpoint, streams)
              and not r.discarded]
        return statistics.median(xs) if xs else None


def client_share(c: Client, cpu_share: float, per_shard: bool) -> float:
    """The CPU a client's process tree may use, in cores: `cpu_share`, or that much for each of its load-generator
    processes with `per_shard` (how shards scale when each has its own CPU, short of one core per shard)."""
    share = cpu_share * (c.shards if per_shard and isinstance(c, Sglbench) else 1)
    if share > 1.0:
        raise SystemExit(f"--share-per-shard: {c.name} would need {share:g} of the one client core")
    return share


def saturation(clients: list[Client], stub: paced_stub.PacedStub, endpoints: list[str], streams: list[int],
               repeats: int, duration_s: float, output_tokens: int, tok_dir: Path, core: Optional[int],
               late_bound_us: float, cpu_share: float = 1.0, per_shard: bool = False) -> Table:
    t = Table()
    budgets = {c.name: client_share(c, cpu_share, per_shard) for c in clients}
    share = CpuShare(cpu_share) if cpu_share < 1.0 else None
    per_core = f"chunks/s ÷ {cpu_share:g} of a core (cgroup CFS quota)" if share else "one client core"
    if share is not None and per_shard:
        per_core = f"chunks/s ÷ ({cpu_share:g} of a core × load processes) (cgroup CFS quota)"
    if share is not None or stub.burst:
        # a client held below the offered rate (or offered whole responses) leaves bytes unread, so the stub's
        # writes wait on TCP backpressure: its lateness then measures the client, not the stub, and discards nothing
        late_bound_us = float("inf")
    print(f"\n# saturation: {output_tokens} tokens, TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms, ~{duration_s:g} s runs, "
          f"{repeats} repeats interleaved; chunks/s on the client's own clock, {per_core}")
    print(f"{'client':10} {'endpoint':13} {'streams':>6} {'done':>8} {'chunks/s':>10} {'cpu s':>7} {'rss MB':>7} "
          f"{'stub p99us':>9} {'load1':>5}")
    for ep in endpoints:
        for s in streams:
            for _ in range(repeats):
                for c in clients:
                    budget = budgets[c.name] if share is not None else 1.0
                    if share is not None:
                        share.set(budget)
                    n = _n_for(s, duration_s * budget, output_tokens)  # a throttled client finishes fewer
                    throttled0 = share.throttled_s() if share else 0.0
                    r = run_client(c, stub, ep, s, n, output_tokens, tok_dir, core, late_bound_us=late_bound_us,
                                   share=share)
                    if r is None:
                        continue
                    r.duration_s *= budget  # chunks/s per core
                    if share is not None:  # ~0 throttled: the client was not held at its share, not saturated
                        r.notes = (f"throttled {share.throttled_s() - throttled0:.1f} s; {budget:g} core: "
                                   f"{r.chunks_s * budget:.0f} chunks/s in all")
                    t.results.append(r)
                    print(_row(r), flush=True)
            names = [c.name for c in clients]
            med = {n: t.medians(n, ep, s) for n in names}
            sb = med.get("sglbench")
            line = ", ".join(f"{n} {v:.0f}" for n, v in med.items() if v)
            ratios = ", ".join(f"vs {n} {sb / v:.2f}x" for n, v in med.items() if v and n != "sglbench" and sb)
            print(f"## median chunks/s{' per core' if share else ''} {ep} c{s}: {line}; sglbench {ratios}",
                  flush=True)
            if per_shard and share is not None and sb:
                # the scaling figure: what N processes with N budgets deliver in all against one process with one
                one = sb * budgets["sglbench"]
                print(f"## {ep} c{s} in all: " + ", ".join(
                    f"{n} {v * budgets[n]:.0f} ({budgets[n]:g} core, {v * budgets[n] / one:.2f}x one process)"
                    for n, v in med.items() if v), flush=True)
    if share is not None:
        share.close()
    return t


def timing(clients: list[Client], stub: paced_stub.PacedStub, endpoint: str, streams: list[int], repeats: int,
           duration_s: float, output_tokens: int, tok_dir: Path, core: Optional[int], late_bound_us: float,
           rate: Optional[float] = None) -> None:
    what = f"open loop {rate:g} req/s" if rate else "closed loop"
    print(f"\n# timing error ({what}, {endpoint}): client-reported − injected (TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} "
          f"ms), ms; median over {repeats} repeats of each percentile; merged: chunk gaps under a tenth of the ITL "
          "per 10k gaps (two events of one stream given one time: a client that read late); stub max: its worst "
          "write lateness, ms (a stall of the whole machine shows there too)")
    print(f"{'client':10} {'streams':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p1':>8} {'ITL p50':>8} {'ITL p99':>8} "
          f"{'|ITL| p99':>9} {'merged':>7} {'stub p99us':>10} {'stub max':>8} {'load1':>5}  notes")
    for s in streams:
        per: dict[str, list[list[float]]] = {}
        for _ in range(repeats):
            for c in clients:
                n = int(rate * duration_s) if rate else _n_for(s, duration_s, output_tokens)
                r = run_client(c, stub, endpoint, s, n, output_tokens, tok_dir, core, rate=rate,
                               late_bound_us=late_bound_us)
                if r is None:
                    continue
                te, ie = r.ttft_ms - TTFT_MS, r.itl_ms - ITL_MS
                merged = float(np.count_nonzero(r.itl_ms < ITL_MS / 10)) * 1e4 / max(1, len(r.itl_ms))
                row = [_pct(te, 50), _pct(te, 99), _pct(ie, 1), _pct(ie, 50), _pct(ie, 99), _pct(np.abs(ie), 99),
                       merged, r.stub.get("late_p99_us", float("nan")), r.stub.get("late_max_us", float("nan")) / 1e3,
                       r.load1]
                tag = f"DISCARDED: {r.discarded}" if r.discarded else r.notes
                print(f"{c.name:10} {s:7d} " + " ".join(f"{v:+9.3f}" for v in row[:6]) +
                      f" {row[6]:7.1f} {row[7]:10.0f} {row[8]:8.1f} {row[9]:5.2f}  {tag}", flush=True)
                if not r.discarded:
                    per.setdefault(c.name, []).append(row)
        for name, rows in per.items():
            m = np.median(np.array(rows), axis=0)
            print(f"## {name:8} c{s}: TTFT err p50 {m[0]:+.3f} p99 {m[1]:+.3f}; ITL err p1 {m[2]:+.3f} p50 "
                  f"{m[3]:+.3f} p99 {m[4]:+.3f}, |ITL err| p99 {m[5]:.3f} ms; merged {m[6]:.1f} per 10k gaps",
                  flush=True)


def cpu_and_memory(clients: list[Client], stub: paced_stub.PacedStub, endpoint: str, streams: int, repeats: int,
                   duration_s: float, output_tokens: int, tok_dir: Path, core: Optional[int],
                   late_bound_us: float) -> None:
    """CPU µs per chunk at a fixed offered rate, in the streaming window (window_cpu_s: the primary figure) and over
    the whole run less a 1-request run's (imports, start-up), and peak RSS above that 1-request run's."""
    offered = streams * 1000.0 / ITL_MS
    print(f"\n# CPU per chunk at a fixed offered rate: {streams} streams × {1000 / ITL_MS:g} chunks/s = {offered:.0f} "
          f"chunks/s ({endpoint}), {repeats} repeats interleaved; window = between the first and last stub write; "
          "whole = run less the same client's 1-request run")
    print(f"{'client':24} {'chunks':>8} {'win us/ch':>9} {'whole us/ch':>11} {'rss MB':>7} {'base MB':>7} {'above':>6} "
          f"{'stub p99us':>10} {'load1':>5}")
    per: dict[str, list[float]] = {}
    base: dict[str, Result] = {}
    for _ in range(repeats):
        for c in clients:
            if isinstance(c, Sglbench):  # the load actor's path: batches handed out, not this script's arrays
                c = dataclasses.replace(c, drop=True)
            if c.name not in base:
                b = run_client(c, stub, endpoint, 1, 1, output_tokens, tok_dir, core, late_bound_us=1e12)
                if b is None:
                    continue
                base[c.name] = b
            r = run_client(c, stub, endpoint, streams, _n_for(streams, duration_s, output_tokens), output_tokens,
                           tok_dir, core, late_bound_us=late_bound_us)
            if r is None:
                continue
            b = base[c.name]
            whole = (r.cpu_s - b.cpu_s) / max(1, r.output_tokens) * 1e6
            print(f"{c.name:24} {r.output_tokens:8d} {r.window_us_per_chunk:9.2f} {whole:11.2f} {r.peak_rss_mb:7.0f} "
                  f"{b.peak_rss_mb:7.0f} {r.peak_rss_mb - b.peak_rss_mb:6.0f} "
                  f"{r.stub.get('late_p99_us', float('nan')):10.0f} {r.load1:5.2f}"
                  f"{'  DISCARDED: ' + r.discarded if r.discarded else ''}", flush=True)
            if not r.discarded:
                per.setdefault(c.name, []).append(r.window_us_per_chunk)
    med = {n: statistics.median(v) for n, v in per.items()}
    for n, v in med.items():
        ratios = ", ".join(f"{m / v:.2f}x less than {o}" for o, m in med.items() if not o.startswith("sglbench"))
        print(f"## {endpoint} c{streams} window CPU per chunk, median: {n} {v:.2f} us"
              + (f" ({ratios})" if n.startswith("sglbench") and ratios else ""), flush=True)


def memory(stub: paced_stub.PacedStub, streams: list[int], long_requests: int, output_tokens: int, tok_dir: Path,
           core: Optional[int]) -> None:
    """RSS per in-flight stream (peak RSS of short windows at each stream count) and RSS over one long window at the
    largest, every Arrow batch counted and released as a load actor's are once the driver has them."""
    c = Sglbench(drop=True)
    print(f"\n# memory: sglbench, {output_tokens}-token responses, batches of 4096 requests handed out and released")
    peaks: list[tuple[int, float]] = []
    for s in streams:
        r = run_client(c, stub, "native", s, 30 * s, output_tokens, tok_dir, core, late_bound_us=1e12)
        assert r is not None
        peaks.append((s, r.peak_rss_mb))
        print(f"streams {s:5d}: {r.completed} requests, peak RSS {r.peak_rss_mb:.0f} MB ({r.notes})", flush=True)
    for (s0, m0), (s1, m1) in zip(peaks, peaks[1:]):
        print(f"## RSS per extra in-flight stream, {s0}→{s1}: {(m1 - m0) * 1024 / (s1 - s0):.1f} KB", flush=True)
    if not long_requests:
        return
    trace: list[tuple[float, int]] = []
    r = run_client(c, stub, "native", streams[-1], long_requests, output_tokens, tok_dir, core,
                   late_bound_us=1e12, timeout_s=3600.0, trace=trace)
    assert r is not None and trace
    # the marks are fractions of the process's life: its last samples come after the window, once it has freed
    marks = [trace[min(len(trace) - 1, int(f * (len(trace) - 1)))] for f in (0.1, 0.25, 0.5, 0.75, 0.9)]
    print(f"long window: {r.completed} of {long_requests} requests at {streams[-1]} streams, {r.output_tokens} "
          f"tokens in {r.duration_s:.0f} s ({r.notes}); the prompts alone are "
          f"{long_requests * INPUT_TOKENS * 4 / 2**20:.0f} MB of int32 token ids")
    print("## RSS MB at " + ", ".join(f"{t:.0f} s: {b / 2**20:.0f}" for t, b in marks) +
          f"; peak {r.peak_rss_mb:.0f}; 25%→90% of the run: {(marks[-1][1] - marks[1][1]) / 2**20:+.0f} MB",
          flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("mode", choices=["saturation", "timing", "openloop", "cpu", "memory", "worker"])
    ap.add_argument("--clients", nargs="*", default=["sglbench", *peers.PEERS])
    ap.add_argument("--endpoints", nargs="*", default=["native", "openai-usage", "openai"])
    ap.add_argument("--streams", type=int, nargs="*", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--output-tokens", type=int, default=100)
    ap.add_argument("--rate", type=float, default=None, help="openloop: Poisson requests per second (default 50)")
    ap.add_argument("--burst", action="store_true", help="the stub writes each response whole (parser ceiling)")
    ap.add_argument("--no-realtime", action="store_true", help="run the stub as a normal process, not SCHED_FIFO")
    ap.add_argument("--stub-late-bound-us", type=float, default=1000.0)
    ap.add_argument("--long-requests", type=int, default=0, help="memory: one long window of this many requests")
    ap.add_argument("--client-cpu-share", type=float, default=1.0,
                    help="saturation: hold each client to this share of its core (cgroup v1 CFS quota)")
    ap.add_argument("--share-per-shard", action="store_true",
                    help="saturation: each sglbench+shardsN gets --client-cpu-share for each of its N processes")
    # worker mode (sglbench's own process)
    ap.add_argument("--url", default="")
    ap.add_argument("--endpoint", default="native")
    ap.add_argument("--requests", type=int, default=0)
    ap.add_argument("--input-tokens", type=int, default=INPUT_TOKENS)
    ap.add_argument("--out", default="")
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    ap.add_argument("--gc", choices=["on", "freeze"], default="on")
    ap.add_argument("--drop", action="store_true")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--shard-index", type=int, default=0)
    ap.add_argument("--num-shards", type=int, default=1)
    ap.add_argument("--start-unix-s", type=float, default=None)
    ap.add_argument("--read-batch-us", type=int, default=None)
    a = ap.parse_args(argv)
    if a.mode == "worker" and a.shards > 1:
        raw = list(sys.argv[1:] if argv is None else argv)
        i = raw.index("--shards")
        del raw[i:i + 2]
        i = raw.index("--out")
        del raw[i:i + 2]
        sharded_worker([sys.executable, str(Path(__file__).resolve()), *raw], a.shards, Path(a.out))
        return 0
    if a.mode == "worker":
        worker(a.url, a.endpoint, a.streams[0], a.requests, a.input_tokens, a.output_tokens, Path(a.out),
               a.rate, a.loop, a.gc, a.drop, a.shard_index, a.num_shards, a.start_unix_s, a.read_batch_us)
        return 0
    ncpu = len(os.sched_getaffinity(0))
    stub_core, client_core = (0, 1) if ncpu >= 2 else (None, None)
    if ncpu >= 2:
        os.sched_setaffinity(0, {0})  # this harness shares the stub's core, never the client's
    clients = clients_for(a.clients)
    with tempfile.TemporaryDirectory(prefix="paced-clients-") as tmp:
        binary = paced_stub.build(Path(tmp))
        tok_dir = Path(tmp) / "tokenizer"
        tok_python = next((p.python() for p in clients if isinstance(p, peers.Peer)), None)
        if tok_python is not None:
            peers.build_tokenizer(tok_dir, tok_python)
        print(f"cpus={ncpu} stub core {stub_core} client core {client_core} load1={os.getloadavg()[0]:.2f} "
              f"clients={[c.name for c in clients]} burst={a.burst}", flush=True)
        with paced_stub.PacedStub(binary, TTFT_MS, ITL_MS, a.output_tokens, burst=a.burst, cpu=stub_core,
                                  realtime=not a.no_realtime) as stub:
            print(f"stub SCHED_FIFO: {stub.realtime_granted}", flush=True)
            if a.mode == "saturation":
                saturation(clients, stub, a.endpoints, a.streams or [1024], a.repeats, a.duration_s,
                           a.output_tokens, tok_dir, client_core, a.stub_late_bound_us, a.client_cpu_share,
                           a.share_per_shard)
            elif a.mode == "timing":
                for ep in a.endpoints:
                    timing(clients, stub, ep, a.streams or [64, 256], a.repeats, a.duration_s, a.output_tokens,
                           tok_dir, client_core, a.stub_late_bound_us)
            elif a.mode == "openloop":
                for ep in a.endpoints:
                    timing(clients, stub, ep, [0], a.repeats, a.duration_s, a.output_tokens, tok_dir, client_core,
                           a.stub_late_bound_us, rate=a.rate or 50.0)
            elif a.mode == "memory":
                memory(stub, a.streams or [64, 1024], a.long_requests, a.output_tokens, tok_dir, client_core)
            else:
                for ep in a.endpoints:
                    for st in a.streams or [64]:
                        cpu_and_memory(clients, stub, ep, st, a.repeats, a.duration_s, a.output_tokens, tok_dir,
                                       client_core, a.stub_late_bound_us)
    return 0


if __name__ == "__main__":
    sys.exit(main())
