"""Start failures on real SGLang 0.5.23 servers run by the sglbench driver: a bad model path and a server that never
becomes healthy each give failed runs with the decisive reason, the next variant goes on, and no process survives.

The mid-window faults ride on servers other checks need (each real start costs ~35-60 s of the tier): the scheduler
and main-pid SIGKILLs on the echo experiment's (test_pipeline.py), the EngineActor kill on the mix server's
(test_pipeline_gate.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import pytest

from cpu_pipeline import load, run, spec_text, table

pytestmark = pytest.mark.ray


def _start_failure(name: str, model: Path, python: Path, tmp: Path, timeout_s: Optional[float]) -> tuple[Any, pd.DataFrame]:
    variants = """  - {name: first, baseline: true}
  - {name: second, args: {random-seed: 1}}"""
    extra = f"health_timeout_s: {timeout_s}" if timeout_s else ""
    text = spec_text(name, model, python, tmp / "out", variants, warmup_requests=0, gate="{enabled: false}")
    if extra:
        text = text.replace("health_timeout_s: 240", extra)
    spec = load(text)
    result = run(spec, tmp, preflight=False)
    return spec, table(result, spec, "runs")


def test_bad_model_path(ray_local: None, sglang_cpu_python: Path, tmp_path: Path) -> None:
    from cpu_pipeline import assert_none_marked
    from cluster.errors import UserError

    missing = tmp_path / "no-such-model"
    spec = load(spec_text("cpu-badpath", missing, sglang_cpu_python, tmp_path / "pre",
                          "  - {name: nextn, speculative: {algorithm: NEXTN, num_steps: 1}}", gate="{enabled: false}"))
    with pytest.raises(UserError):  # preflight probes the checkpoint before any server or GPU is touched
        run(spec, tmp_path)
    spec, runs = _start_failure("cpu-badpath", missing, sglang_cpu_python, tmp_path, None)
    assert list(runs.sort_values("order_index")["variant"]) == ["first", "second"], "the next variant went on"
    for _, row in runs.iterrows():
        assert row["status"] == "failed" and "server start failed" in row["failure_reason"], row.to_dict()
        print(f"[sglang_cpu] bad model path: {row['failure_reason']}")
        assert str(missing) in row["failure_reason"] or "no-such-model" in row["failure_reason"], row["failure_reason"]
    assert_none_marked("cpu-badpath")


def test_never_healthy(ray_local: None, sglang_cpu_python: Path, mimo_models: Path, tmp_path: Path) -> None:
    from cpu_pipeline import assert_none_marked

    t0 = time.monotonic()
    spec, runs = _start_failure("cpu-unhealthy", mimo_models / "echo", sglang_cpu_python, tmp_path, 4)
    assert time.monotonic() - t0 < 120
    assert list(runs.sort_values("order_index")["variant"]) == ["first", "second"], "the next variant went on"
    for _, row in runs.iterrows():
        assert row["status"] == "failed" and "not healthy after 4 s" in row["failure_reason"], row.to_dict()
    assert_none_marked("cpu-unhealthy")
