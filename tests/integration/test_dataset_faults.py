"""The dataset under a driver: a second driver on the same experiment is refused while the first runs, and a disk
that fills up mid-experiment gives a clean error, leaves nothing plain readers would count, and a resume finishes."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest

from cluster.dataset.atomic import WriteError
from cluster.dataset.lock import LOCK_FILE, DatasetLocked
from cluster.plan.runs import make_plan
from cluster.kernel.runs import RunPlan
from cluster.config.loader import parse_spec_text
from cluster.config.experiment import ExperimentSpec

pytestmark = pytest.mark.ray


def _spec(out: Path, name: str) -> ExperimentSpec:
    return parse_spec_text(f"""
version: 1
name: {name}
model: {{path: sim://dsfaults, engine: sim}}
sim: {{time_scale: 0.02}}
variants:
  - {{name: a, baseline: true}}
  - {{name: b, speculative: {{algorithm: NEXTN, num_steps: 1}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 12, num_requests: 6}}
load: {{concurrency: [1, 2, 3]}}
warmup_requests: 0
max_client_lag_ms: 1000
output: {out}
""")


def _driver(spec: ExperimentSpec, tmp: Path, on_run: Callable[[RunPlan, str], None] = lambda p, s: None) -> Any:
    from cluster.distributed.driver import Driver

    return Driver(spec, tmp, None, lambda s: None, on_run)


def _hive_leftovers(exp: Path) -> list[Path]:
    return [f for d in exp.iterdir() if d.is_dir() and not d.name.startswith("_") for f in d.rglob("*")
            if f.is_file() and (f.name.startswith(".") or not f.name.endswith(".parquet"))]


def test_second_driver_refused_while_the_first_runs(ray_local: None, tmp_path: Path) -> None:
    spec = _spec(tmp_path / "out", "twodrivers")
    refused: list[DatasetLocked] = []

    def on_run(p: RunPlan, status: str) -> None:
        if not refused:  # the first driver is mid-experiment and holds the lock: a second one starts now
            with pytest.raises(DatasetLocked) as ei:
                _driver(spec, tmp_path).run()
            refused.append(ei.value)

    result = _driver(spec, tmp_path, on_run).run()
    assert refused, "the second driver was started"
    msg = str(refused[0])
    assert f"pid {os.getpid()}" in msg and os.uname().nodename in msg and "command:" in msg
    assert str(tmp_path / "out" / "twodrivers") in msg
    assert set(result.counts()) == {"ok"}
    exp = tmp_path / "out" / "twodrivers"
    assert not (exp / LOCK_FILE).exists(), "released at the end"
    runs = pd.read_parquet(exp / "runs")
    assert len(runs) == len(make_plan(spec)) and not runs["run_key"].duplicated().any()
    again = _driver(spec, tmp_path).run()  # the lock is free again
    assert again.skipped == len(make_plan(spec))


def test_disk_full_mid_experiment_then_resume(ray_local: None, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path / "out", "diskfull")
    exp = tmp_path / "out" / "diskfull"
    full = {"on": False}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if full["on"] and os.readlink(f"/proc/self/fd/{fd}").startswith(str(exp)):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    def on_run(p: RunPlan, status: str) -> None:
        if p.variant.name == "a":  # the baseline's first run committed; then the disk is full for everyone
            full["on"] = True

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(WriteError) as ei:
        _driver(spec, tmp_path, on_run).run()
    err = ei.value
    assert err.os_errno == errno.ENOSPC and err.path is not None and err.path.startswith(str(exp))
    assert err.path in str(err) and "disk is full" in str(err)
    assert _hive_leftovers(exp) == []
    assert not (exp / LOCK_FILE).exists(), "released on the error"
    runs = pd.read_parquet(exp / "runs")
    committed = set(runs["run_key"])
    assert 1 <= len(committed) < len(make_plan(spec))
    reqs = pd.read_parquet(exp / "requests")
    assert set(reqs["run_key"]) <= committed, "no request of a run that never committed"
    assert len(reqs) == 6 * len(runs[runs["status"] != "failed"])

    full["on"] = False  # space freed: the resume finishes the experiment
    again = _driver(spec, tmp_path).run()
    assert again.skipped == len(committed & set(runs.loc[runs["status"] != "failed", "run_key"]))
    runs = pd.read_parquet(exp / "runs")
    assert len(runs) == len(make_plan(spec)) and set(runs["status"]) == {"ok"}
    reqs = pd.read_parquet(exp / "requests")
    assert len(reqs) == 6 * len(runs) and not reqs.duplicated(["run_key", "request_index"]).any()
    assert _hive_leftovers(exp) == []
