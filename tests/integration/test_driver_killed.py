"""The driver is SIGKILLed mid-experiment, then the same experiment is submitted again: no server survives, no file
is partial, and the second run resumes by run key without duplicating finished runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from cluster.plan.runs import make_plan
from cluster.config.loader import load_spec

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]


def _procs_with(marker: str) -> list[int]:
    """Pids whose command line contains marker (read-only /proc scan: nothing is killed by name)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                out.append(int(name))
        except OSError:
            continue
    return out


def _driver(spec_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "cluster.distributed.driver", str(spec_path)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Clean up whatever the driver's own process group left (its local Ray), by our handle."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def test_driver_killed_then_resubmitted(tmp_path: Path) -> None:
    marker = f"sim://driver-kill-{uuid.uuid4().hex[:8]}"
    spec_path = tmp_path / "exp.yaml"
    spec_path.write_text(f"""
version: 1
name: driverkill
model: {{path: "{marker}", engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.3}}
variants:
  - {{name: a, baseline: true}}
  - {{name: b, speculative: {{algorithm: NEXTN, num_steps: 2}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 24, num_requests: 8}}
load: {{concurrency: [1, 2, 4]}}
warmup_requests: 0
max_client_lag_ms: 1000
output: results
""")
    spec = load_spec(spec_path)
    runs_dir = tmp_path / "results" / "driverkill" / "runs"
    first = _driver(spec_path, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = list(runs_dir.rglob("*.parquet")) if runs_dir.exists() else []
            if len(done) >= 2:
                break
            assert first.poll() is None, first.stdout.read().decode() if first.stdout else ""
            time.sleep(0.2)
        assert len(done) >= 2, "the driver never finished two runs"
        first.send_signal(signal.SIGKILL)  # the driver only: Ray and the servers must clean up after it
        first.wait(timeout=10)
        deadline = time.monotonic() + 60
        while _procs_with(marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _procs_with(marker) == [], "a server outlived the killed driver"
    finally:
        _stop_group(first)

    base = tmp_path / "results" / "driverkill"
    partial = [p for p in base.rglob("*") if p.is_file() and (p.name.startswith(".") or p.suffix == ".tmp")]
    finished_before = set(pd.read_parquet(base / "runs")["run_key"])
    assert partial == [] and 2 <= len(finished_before) < len(make_plan(spec))

    second = _driver(spec_path, tmp_path)
    try:
        out, _ = second.communicate(timeout=300)
        assert second.returncode == 0, out.decode()
    finally:
        _stop_group(second)
    runs = pd.read_parquet(base / "runs")
    reqs = pd.read_parquet(base / "requests")
    assert sorted(runs["run_key"]) == sorted(p.run_key for p in make_plan(spec))
    assert set(runs["status"]) == {"ok"}
    assert not reqs.duplicated(["run_key", "request_index"]).any() and len(reqs) == 8 * len(runs)
    assert f'"skipped": {len(finished_before)}' in out.decode()
    assert _procs_with(marker) == []
