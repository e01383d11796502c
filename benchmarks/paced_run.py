"""One client run against the paced stub: its process tree pinned to a core and held to a CPU share, its CPU, RSS and
the stub's lateness sampled while it runs, and what it measured read back (benchmarks/paced_clients.py's runs)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

import numpy as np

import paced_stub
import peers

INPUT_TOKENS = 128


@dataclass
class Result:
    """One client run's figures (the client's own clock for duration, TTFT and ITL)."""

    client: str
    endpoint: str
    streams: int
    completed: int
    duration_s: float
    output_tokens: int
    ttft_ms: np.ndarray
    itl_ms: np.ndarray
    cpu_s: float
    peak_rss_mb: float
    stub: dict[str, float]
    load1: float
    notes: str = ""
    discarded: str = ""
    window_cpu_s: float = 0.0
    """The tree's CPU seconds between the samples that saw the stub's first and last event write: the streaming
    window alone, without imports, start-up or the client's own summary at the end."""
    window_events: int = 0
    """Events the stub wrote between those two samples."""

    @property
    def window_us_per_chunk(self) -> float:
        return self.window_cpu_s / self.window_events * 1e6 if self.window_events else float("nan")

    @property
    def chunks_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0


class Client(Protocol):
    @property
    def name(self) -> str: ...

    def available(self) -> bool: ...

    def argv(self, base_url: str, endpoint: str, concurrency: int, num_requests: int, input_tokens: int,
             output_tokens: int, tokenizer_dir: Path, out_dir: Path,
             request_rate: Optional[float] = None) -> Optional[list[str]]: ...

    def env(self) -> dict[str, str]: ...

    def parse(self, out_dir: Path) -> "peers.PeerResult": ...


CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_PERIOD_US = 10_000
"""A short CFS period: a client held to a share of a core runs in slices of share × 10 ms, not share × 100 ms."""


class CpuShare:
    """A cgroup-v1 CPU controller group holding a client's process tree to `share` of one core (CFS bandwidth):
    at saturation the client, not the stub, is then the bottleneck, and chunks/s ÷ share is its rate per core."""

    def __init__(self, share: float) -> None:
        self.path = CGROUP_CPU / f"sglbench-paced-{os.getpid()}"
        self.path.mkdir(exist_ok=True)
        (self.path / "cpu.cfs_period_us").write_text(str(CGROUP_PERIOD_US))
        self.set(share)

    def set(self, share: float) -> None:
        """Hold the group to `share` of one core from now on."""
        (self.path / "cpu.cfs_quota_us").write_text(str(max(1000, int(share * CGROUP_PERIOD_US))))

    def enter(self) -> None:
        """In the child before exec: everything it starts stays in the group."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def throttled_s(self) -> float:
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(stat.get("throttled_time", 0)) / 1e9

    def close(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


def _tree(pid: int) -> list[Any]:
    import psutil

    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


def _child_setup(core: Optional[int], share: Optional[CpuShare]) -> None:
    if core is not None:
        os.sched_setaffinity(0, {core})
    if share is not None:
        share.enter()


def run_client(c: Client, stub: paced_stub.PacedStub, endpoint: str, streams: int, n: int, output_tokens: int,
               tok_dir: Path, core: Optional[int], rate: Optional[float] = None,
               late_bound_us: float = 1000.0, timeout_s: float = 900.0,
               trace: Optional[list[tuple[float, int]]] = None, share: Optional[CpuShare] = None
               ) -> Optional[Result]:
    """One run of one client: its tree pinned to `core`, CPU and RSS sampled every 50 ms (appended to `trace` as
    (s since start, bytes) when given); None if unsupported."""
    import psutil

    with tempfile.TemporaryDirectory(prefix=f"paced-{c.name}-") as tmp:
        out = Path(tmp)
        try:
            argv = c.argv(stub.base_url, endpoint, streams, n, INPUT_TOKENS, output_tokens, tok_dir, out, rate)
        except peers.NotSupported:
            return None
        if argv is None:
            return None
        stub.reset_stats()
        env = dict(os.environ, **c.env())
        with open(out / "client.log", "wb") as log:  # the child holds its own copy of the descriptor
            p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
                                 preexec_fn=lambda: _child_setup(core, share))
        cpu: dict[int, float] = {}
        peak = 0
        loads: list[float] = []
        started = time.monotonic()
        deadline = started + timeout_s
        first: Optional[tuple[float, float]] = None  # (tree CPU s, stub events) at the first sample with events
        last: Optional[tuple[float, float]] = None  # ... at the latest sample whose event count moved
        polls = 0
        while p.poll() is None:
            rss = 0
            for q in _tree(p.pid):
                try:
                    t = q.cpu_times()
                    cpu[q.pid] = t.user + t.system + t.children_user + t.children_system
                    rss += q.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
            if first is None or polls % 10 == 0:  # the stub's counters every 0.5 s once the window has begun
                events = stub.stats()["events"]
                now_cpu = sum(cpu.values())
                if events > 0 and first is None:
                    first = (now_cpu, events)
                elif first is not None and events > (last or first)[1]:
                    last = (now_cpu, events)
            polls += 1
            if trace is not None:
                trace.append((time.monotonic() - started, rss))
            loads.append(os.getloadavg()[0])
            if time.monotonic() > deadline:
                p.kill()
                p.wait()
                raise RuntimeError(f"{c.name} ran past {timeout_s:g} s")
            time.sleep(0.05)
        st = stub.stats()
        if p.returncode != 0:
            tail = (out / "client.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{c.name} {endpoint} c{streams} failed ({p.returncode}):\n{tail}")
        r = c.parse(out)
    res = Result(c.name, endpoint, streams, r.completed, r.duration_s, r.output_tokens,
                 np.asarray(r.ttft_ms, dtype=np.float64), np.asarray(r.itl_ms, dtype=np.float64),
                 sum(cpu.values()), peak / 2**20, st, max(loads) if loads else os.getloadavg()[0], r.notes)
    if first is not None and last is not None:
        res.window_cpu_s, res.window_events = last[0] - first[0], int(last[1] - first[1])
    if st.get("late_p99_us", 0.0) > late_bound_us:
        res.discarded = f"stub late: p99 {st['late_p99_us']:.0f} us > {late_bound_us:g} us"
    return res
