"""Experiments on real SGLang 0.5.23 on the CPU through the sglbench driver: spec text, dataset reads, process checks."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd

from cluster.kernel.runs import RunPlan
from cluster.server.process import group_members, wait_group_gone
from cluster.config.loader import parse_spec_text
from cluster.config.experiment import ExperimentSpec

CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "SGLBENCH_CPU_STANDINS": "1"}
"""SGLang's CPU engine, and the stand-ins' has_amx platform hook (gated: it never acts on a GPU node)."""

MARK = "SGLBENCH_TEST_MARK"
"""An environment variable every test server (and so every process it forks) carries: the experiment name."""

HEALTH_TIMEOUT_S = 240
"""Server starts took 15-34 s on a quiet 2-core machine and up to 83 s under load."""


def cpu_args(max_running_requests: Optional[int] = 16) -> dict[str, Any]:
    """The CPU settings as ordinary server args, shared by every variant (so fairness sees no difference).

    Every variant, baseline included, runs `intel_amx` (the stand-in attention): NEXTN needs it on a CPU, and a
    baseline on another backend would compare attention kernels as well as speculation. Overlap scheduling is off
    for all: SGLang turns it off for speculative decoding on a CPU and would leave it on for the baseline.
    `max_running_requests` is explicit unless a test wants SGLang's own speculative default (48)."""
    args: dict[str, Any] = {"device": "cpu", "attention-backend": "intel_amx", "disable-cuda-graph": True,
                            "sleep-on-idle": True, "max-total-tokens": 8192, "enable-metrics": True,
                            "kv-cache-dtype": "bf16", "disable-overlap-schedule": True}
    if max_running_requests is not None:
        args["max-running-requests"] = max_running_requests
    return args


def spec_text(name: str, model: Path, python: Path, out: Path, variants: str, *, concurrency: str = "[4]",
              num_requests: int = 8, output_tokens: int = 32, max_running_requests: Optional[int] = 16,
              warmup_requests: int = 2, gate: str = "{enabled: true, check_answers: false, max_new_tokens: 32}",
              extra: str = "", health_timeout_s: float = HEALTH_TIMEOUT_S, repeats: int = 1) -> str:
    """One experiment's YAML: the tiny MiMo model at tp 1 from the tier's interpreter, CPU settings in server.args;
    every server carries SGLBENCH_TEST_MARK=<name> in its environment, so a test can find its own processes."""
    env = {**CPU_ENV, MARK: name}
    return f"""
version: 1
name: {name}
model: {{path: {model}, engine: sglang, tp: 1, served_name: tiny}}
engines: {{sglang: {{python: {python}}}}}
server:
  args: {json.dumps(cpu_args(max_running_requests))}
  env: {json.dumps(env)}
variants:
{variants}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: {output_tokens}, num_requests: {num_requests},
      prompts: {{source: random_ids, vocab_size: 900}}}}
load: {{concurrency: {concurrency}}}
warmup_requests: {warmup_requests}
correctness: {gate}
health_timeout_s: {health_timeout_s}
repeats: {repeats}
request_timeout_s: 300
max_client_lag_ms: 1000
output: {out}
{extra}
"""


def load(text: str) -> ExperimentSpec:
    return parse_spec_text(text)


def run(spec: ExperimentSpec, base_dir: Path, on_run: Optional[Callable[[Any, RunPlan, str], None]] = None,
        preflight: bool = True, log: Optional[list[str]] = None,
        on_driver: Optional[Callable[[Any], None]] = None, warn: Optional[Callable[[str], object]] = None) -> Any:
    """The driver as `sglbench run` drives it (Ray must be up): preflight, then Driver.run; on_run(driver, plan,
    status) after each run; on_driver(driver) before it starts (for watcher threads); warn(line): what the node's
    preflight could not check (stderr when None)."""
    from cluster.distributed.cluster_state import remote_preflight
    from cluster.distributed.driver import Driver

    holder: dict[str, Any] = {}
    lines = log if log is not None else []
    t0 = time.monotonic()

    def say(s: str) -> None:
        lines.append(s)
        print(f"[sglang_cpu {time.monotonic() - t0:6.1f} s] {s}", flush=True)

    def cb(p: RunPlan, status: str) -> None:
        say(f"run {p.variant.name} {p.load.label}: {status}")
        if on_run is not None:
            on_run(holder["drv"], p, status)

    drv = Driver(spec, base_dir, None, say, cb)
    holder["drv"] = drv
    if on_driver is not None:
        on_driver(drv)
    if preflight:
        drv.preflight = remote_preflight(spec, base_dir) if warn is None else remote_preflight(spec, base_dir, warn)
    return drv.run()


def table(result: Any, spec: ExperimentSpec, name: str) -> pd.DataFrame:
    path = Path(result.dataset_root) / spec.name / name
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def facts(result: Any, variant: str) -> Any:
    """The ServerFacts of a variant's (last) server start."""
    return result.servers[variant].facts


def assert_group_gone(pgid: int, what: str, timeout_s: float = 30.0) -> None:
    """No live process of the server's process group is left (checked by group id through /proc, never by name)."""
    left = wait_group_gone(pgid, timeout_s, poll_s=0.2)
    assert left == [], f"{what}: processes of server group {pgid} survived: {left}"


def marked_processes(name: str) -> list[int]:
    """Live processes whose environment carries MARK=name: this experiment's servers and everything they forked
    (found by the environment they inherited, never by a process name)."""
    import os

    want = f"{MARK}={name}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if want in env and state != b"Z":
            out.append(int(entry))
    return out


def assert_none_marked(name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    left = marked_processes(name)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = marked_processes(name)
    assert left == [], f"processes of experiment {name!r} survived: {[(p, proc_title(p)) for p in left]}"


def proc_title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def scheduler_of(pgid: int) -> Optional[int]:
    """The `sglang::scheduler` process among OUR server's process group (setproctitle names it)."""
    for pid in group_members(pgid):
        if proc_title(pid).startswith("sglang::scheduler"):
            return pid
    return None


def running_requests(base_url: str) -> float:
    """sglang:num_running_reqs summed over its label sets, from the server's own /metrics (0 when unreachable)."""
    import urllib.request

    from cluster.engines.prometheus import parse_prometheus, sum_metric

    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    return sum_metric(parse_prometheus(text), "sglang:num_running_reqs") or 0.0


def ideal_accept_length(steps: int, output_tokens: int) -> float:
    """Every draft accepted: the first token comes from prefill, the rest in verify steps of steps + 1 tokens."""
    import math

    return (output_tokens - 1) / math.ceil((output_tokens - 1) / (steps + 1))
