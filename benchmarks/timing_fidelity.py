"""Timing fidelity of the load generator against the simulator's fixed-latency mode (exact TTFT, fixed ITL).

The simulator (`python -m cluster.sim.server`, knobs fixed_ttft_ms / fixed_itl_ms) runs pinned to core 0 and
this client to core 1 (when there are two). Four parts:
  1. the simulator's own pacing ceiling: chunks/s against its own write timestamps (GET /sim_pacing), streams up
     (Poisson arrivals, so request handling is spread out as in a steady state);
  2. 64 closed-loop streams at 10 ms per chunk, 128 tokens: measured TTFT and ITL minus injected, p1/p50/p99,
     and the same errors split at the simulator's own write times (GET /sim_pacing?requests=1; both processes
     read one CLOCK_MONOTONIC): client arrival − simulator write per chunk, and TTFT as client send → simulator
     receipt → first write → client arrival;
  3. open-loop Poisson at 50 req/s, same outputs: client lag (actual − intended send) p50/p99/max;
  4. past the client's capacity on purpose: the lag says the client fell behind (runs-table verdict).

    python benchmarks/timing_fidelity.py [--quick] [--parts 1 2 3 4] [--streams 32 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any, Optional

import numpy as np

from cluster.engines.base import Prompt
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.runner import run_load_point
from cluster.kernel.window_job import WindowJob
from cluster.kernel.window import MeasuredWindow
from cluster.kernel.runs import LoadPoint
from cluster.server.process import free_port

MAX_CLIENT_LAG_MS = 10.0
"""The runs table's default `max_client_lag_ms` (cluster/config/experiment.py): a run past it is flagged invalid."""
ACCURATE_LATE_P99_US = 250.0
"""A chunk rate counts as paced accurately when the simulator's own write lateness p99 stays under this."""


class Sim:
    """The simulator in fixed-latency mode, pinned to `cores`; stopped by its own Popen handle."""

    def __init__(self, ttft_ms: float, itl_ms: float, cores: Optional[set[int]]) -> None:
        self.port = free_port()
        env = dict(os.environ, SGLBENCH_SIM=json.dumps({"fixed_ttft_ms": ttft_ms, "fixed_itl_ms": itl_ms}))
        self.proc = subprocess.Popen([sys.executable, "-m", "cluster.sim.server", "--model-path", "sim", "--port",
                                      str(self.port), "--max-running-requests", "4096"],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if cores:
            os.sched_setaffinity(self.proc.pid, cores)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("the simulator did not become healthy")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def flush(self) -> None:
        req = urllib.request.Request(self.url + "/flush_cache", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30):
            pass

    def pacing(self, requests: bool = False) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/sim_pacing" + ("?requests=1" if requests else ""), timeout=30) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out

    def cpu_s(self) -> float:
        """CPU seconds the simulator used so far (Linux /proc; nan elsewhere)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _head(i: int) -> tuple[int, int, int, int]:
    """Request i's prompt ids: unique per index, so the simulator's write log maps back to the client's record."""
    return (100 + i % 1000, 101 + i // 1000, 102, 103)


def _mono_minus_wall_ns() -> int:
    """CLOCK_MONOTONIC − wall clock (ns), from the tightest of several back-to-back reads."""
    best: Optional[tuple[int, int]] = None
    for _ in range(200):
        a = time.monotonic_ns()
        w = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - w)
    assert best is not None
    return best[1]


def _window(sim: Sim, n: int, tokens: int, load: LoadPoint) -> MeasuredWindow:
    prompts = [Prompt(input_ids=_head(i)) for i in range(n)]
    sim.flush()
    return run_load_point(SGLangEngine(), WindowJob(sim.url, "native", tokens, load, 1, True, 0.0, "sim", 120.0,
                                                    scrape_metrics=False), prompts)


def _pct(x: np.ndarray, qs: list[float]) -> list[float]:
    return [float(v) for v in np.percentile(x, qs)] if len(x) else [float("nan")] * len(qs)


def ceiling(cores: Optional[set[int]], streams: list[int], itl_ms: float, tokens: int, window_s: float) -> None:
    print(f"\n1. simulator pacing ceiling (fixed ITL {itl_ms:g} ms, {tokens} tokens; Poisson arrivals sized to keep "
          f"~N streams open; lateness = write start − due on the simulator's clock, write = transport.write call in us; "
          f"accurate: p99 < "
          f"{ACCURATE_LATE_P99_US:g} us)")
    print(f"{'streams':>7} {'target ch/s':>11} {'paced ch/s':>10} {'late p50 us':>11} {'late p99 us':>11} "
          f"{'late max us':>11} {'write p50':>9} {'write p99':>9} {'client lag p99 ms':>17}")
    sim = Sim(itl_ms, itl_ms, cores)
    best = 0.0
    try:
        for s in streams:
            life_s = tokens * itl_ms / 1000.0
            rate = s / life_s  # Little's law: rate × stream lifetime = streams open
            res = _window(sim, max(s, int(rate * window_s)), tokens, LoadPoint("rate", rate))
            p = sim.pacing()
            paced = p["writes"] / res.duration_s
            if p.get("late_p99_us", 1e9) < ACCURATE_LATE_P99_US:
                best = max(best, paced)
            print(f"{s:7d} {s * 1000 / itl_ms:11.0f} {paced:10.0f} {p['late_p50_us']:11.1f} {p['late_p99_us']:11.1f} "
                  f"{p['late_max_us']:11.1f} {p['write_call_p50_us']:9.1f} {p['write_call_p99_us']:9.1f} "
                  f"{res.lag_p99_ns / 1e6:17.3f}", flush=True)
    finally:
        sim.stop()
    print(f"   ceiling: {best:.0f} chunks/s paced accurately" if best else
          "   ceiling: no tested rate was paced accurately (see the lateness columns)")


def _line(name: str, e: np.ndarray, bound_ms: float = 0.5) -> None:
    p1, p50, p99, mx = _pct(e, [1, 50, 99, 100])
    ok = max(abs(p1), abs(p99)) <= bound_ms
    print(f"   {name:34} ms: p1 {p1:+.3f}  p50 {p50:+.3f}  p99 {p99:+.3f}  max {mx:+.3f}  "
          f"{'within' if ok else 'NOT within'} {bound_ms:g} ms at p1/p99")


def split(res: MeasuredWindow, log: list[dict[str, Any]], t0_mono_ns: int, ttft_ms: float, itl_ms: float,
          tokens: int, first_wave: int) -> None:
    """Measured − injected, and the same error split at the simulator's write times (one shared monotonic clock)."""
    r = res.requests
    n = r.num_rows
    by_head = {tuple(e["head"][:4]): e for e in log}
    send = r.column("actual_send_ns").to_numpy() + t0_mono_ns
    arr = res.chunks.column("arrival_ns").to_numpy().reshape(n, tokens) + t0_mono_ns
    recv = np.full(n, np.nan)
    wr = np.full((n, tokens), np.nan)
    for i in range(n):
        e = by_head.get(_head(i))
        if e is not None and len(e["writes_ns"]) == tokens:
            recv[i] = e["recv_ns"]
            wr[i] = e["writes_ns"]
    ok = ~np.isnan(recv)
    ttft_err = (arr[:, 0] - send) / 1e6 - ttft_ms
    itl_err = np.diff(arr, axis=1) / 1e6 - itl_ms
    steady = np.arange(n) >= first_wave  # requests sent after the first wave of simultaneous starts
    print(f"   matched {int(ok.sum())}/{n} requests to the simulator's write log")
    _line("TTFT − injected", ttft_err)
    _line("TTFT − injected, after wave 1", ttft_err[steady])
    _line("ITL − injected", itl_err.ravel())
    _line("ITL − injected, after wave 1", itl_err[steady].ravel())
    if not ok.any():
        return
    a, w, sd, rc = arr[ok], wr[ok], send[ok], recv[ok]
    st = steady[ok]
    print("   split at the simulator's write times (client error = client arrival − simulator write start):")
    _line("client: arrival − write, per chunk", ((a - w) / 1e6).ravel())
    _line("client: ITL error (Δarrival − Δwrite)", ((np.diff(a, axis=1) - np.diff(w, axis=1)) / 1e6).ravel())
    _line("sim: ITL error (Δwrite − ITL)", (np.diff(w, axis=1) / 1e6 - itl_ms).ravel())
    # a holds both sides' HTTP work: the client's request set-up and send, the simulator's parse up to its handler
    _line("TTFT a: client send → sim receipt", (rc - sd) / 1e6)
    _line("TTFT a, after wave 1", (rc - sd)[st] / 1e6)
    _line("TTFT b: receipt → 1st write − TTFT", (w[:, 0] - rc) / 1e6 - ttft_ms)
    _line("TTFT c: 1st write → client arrival", (a[:, 0] - w[:, 0]) / 1e6)
    _line("TTFT outside the pacer (a + c)", ((rc - sd) + (a[:, 0] - w[:, 0])) / 1e6)
    _line("TTFT outside the pacer, after wave 1", (((rc - sd) + (a[:, 0] - w[:, 0])) / 1e6)[st])


def closed_loop(cores: Optional[set[int]], ttft_ms: float, itl_ms: float, tokens: int, rounds: int,
                streams: int = 64) -> None:
    sim = Sim(ttft_ms, itl_ms, cores)
    try:
        cpu0_s, c0_s = sim.cpu_s(), time.process_time()
        res = _window(sim, streams * rounds, tokens, LoadPoint("concurrency", float(streams)))
        busy = ((sim.cpu_s() - cpu0_s) / res.duration_s, (time.process_time() - c0_s) / res.duration_s)
        t0_mono_ns = int(round(res.window_start_unix_s * 1e9)) + _mono_minus_wall_ns()
        p = sim.pacing(requests=True)
    finally:
        sim.stop()
    r = res.requests
    errors = r.num_rows - r.column("error").null_count
    print(f"\n2. {streams} streams, TTFT {ttft_ms:g} ms, ITL {itl_ms:g} ms, {tokens} tokens, {r.num_rows} requests, "
          f"{errors} errors ({res.n_chunks / res.duration_s:.0f} chunks/s), load1={os.getloadavg()[0]:.2f}, "
          f"CPU busy: simulator {busy[0]:.0%}, client {busy[1]:.0%} of a core")
    split(res, p.get("requests", []), t0_mono_ns, ttft_ms, itl_ms, tokens, streams)
    print(f"   simulator's own write lateness: p50 {p['late_p50_us']:.1f} us  p99 {p['late_p99_us']:.1f} us  "
          f"max {p['late_max_us']:.1f} us; write call p50 {p['write_call_p50_us']:.1f} us "
          f"p99 {p['write_call_p99_us']:.1f} us")


def open_loop(cores: Optional[set[int]], ttft_ms: float, itl_ms: float, tokens: int, rate: float, n: int) -> None:
    sim = Sim(ttft_ms, itl_ms, cores)
    try:
        res = _window(sim, n, tokens, LoadPoint("rate", rate))
    finally:
        sim.stop()
    lag = (res.requests.column("actual_send_ns").to_numpy() - res.requests.column("intended_send_ns").to_numpy())
    p50, p99, mx = _pct(lag / 1e6, [50, 99, 100])
    print(f"\n3. open loop Poisson {rate:g} req/s, {n} requests, {tokens} tokens at {itl_ms:g} ms: client lag ms "
          f"p50 {p50:.3f}  p99 {p99:.3f}  max {mx:.3f}  ({'<' if p99 < 1 else 'NOT <'} 1 ms at p99)")


def overload(cores: Optional[set[int]], rate: float, n: int, tokens: int) -> None:
    sim = Sim(0.0, 0.0, cores)
    try:
        res = _window(sim, n, tokens, LoadPoint("rate", rate))
    finally:
        sim.stop()
    lag_p99_ms = res.lag_p99_ns / 1e6
    achieved = res.n_requests / res.duration_s
    verdict = "client fell behind → run invalid" if lag_p99_ms > MAX_CLIENT_LAG_MS else "NOT flagged"
    print(f"\n4. past capacity: Poisson {rate:g} req/s asked, {achieved:.0f} req/s achieved; lag p50 "
          f"{res.lag_p50_ns / 1e6:.1f} ms p99 {lag_p99_ms:.1f} ms max {res.lag_max_ns / 1e6:.1f} ms "
          f"(max_client_lag_ms {MAX_CLIENT_LAG_MS:g}): {verdict}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer streams and requests")
    ap.add_argument("--parts", type=int, nargs="*", default=[1, 2, 3, 4])
    ap.add_argument("--streams", type=int, nargs="*", default=[64], help="part 2's closed-loop stream counts")
    args = ap.parse_args(argv)
    ncpu = len(os.sched_getaffinity(0))
    sim_cores = {0} if ncpu >= 2 else None
    if ncpu >= 2:
        os.sched_setaffinity(0, {1})
    print(f"cpus={ncpu} sim on {sim_cores} client on {os.sched_getaffinity(0)} load1={os.getloadavg()[0]:.1f}")
    if 1 in args.parts:
        streams = [64, 256, 512] if args.quick else [32, 64, 128, 256, 512, 1024]
        ceiling(sim_cores, streams, 10.0, 64, 3.0 if args.quick else 6.0)
    if 2 in args.parts:
        for n_streams in args.streams:
            closed_loop(sim_cores, 20.0, 10.0, 128, 2 if args.quick else 4, n_streams)
    if 3 in args.parts:
        open_loop(sim_cores, 20.0, 10.0, 128, 50.0, 250 if args.quick else 1000)
    if 4 in args.parts:
        overload(sim_cores, 20000.0, 3000, 8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
