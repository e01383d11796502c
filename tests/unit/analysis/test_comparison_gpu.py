"""compare flags throttled runs and warns when a variant ran at other SM clocks than the baseline; J/token columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.analysis.comparison import CLOCK_MISMATCH_REL, compare_view, compare_with_ci
from cluster.dataset.store import DatasetStore
from cluster.plan.runs import make_plan
from cluster.config.loader import parse_spec_text
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: gpu
model: {path: sim://qwen, engine: sim, tp: 1}
variants:
  - {name: baseline, baseline: true}
  - {name: tuned}
  - {name: hot}
workloads:
  - {name: chat, input_tokens: 16, output_tokens: 16, num_requests: 8}
load: {concurrency: [1]}
repeats: 3
"""

CLOCKS = {"baseline": 2400.0, "tuned": 2400.0 * (1 + CLOCK_MISMATCH_REL / 2), "hot": 1500.0}


def _dataset(root: str) -> None:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(root, "gpu")
    for p in make_plan(spec):
        v = p.variant.name
        throttled = v == "hot" and p.repeat == 1
        metrics = {"output_tok_s": 70.0 + p.repeat, "n_ok": 8, "n_requests": 8,
                   "energy_j_per_output_token": 5.0 + 0.1 * p.repeat, "output_tok_s_per_w": 0.2,
                   "gpu_power_w_mean": 350.0, "sm_clock_mhz_mean": CLOCKS[v] + p.repeat,
                   "sm_clock_mhz_p10": CLOCKS[v], "sm_clock_mhz_min": CLOCKS[v] - 100,
                   "gpu_throttled": 1.0 if throttled else 0.0, "gpu_throttled_share": 0.4 if throttled else 0.0}
        store.write_run(p, RunRow(status="ok", duration_s=20.0, metrics=metrics))


def test_throttled_runs_and_clock_mismatch_are_warned(tmp_path: Path) -> None:
    _dataset(str(tmp_path))
    df = compare_with_ci(Results.open(str(tmp_path), "gpu"), n_boot=200, request_level=False).set_index("variant")
    hot = df.loc["hot", "warnings"]
    assert any("repeat 1: GPUs throttled" in w and "40%" in w and "1400 MHz" in w for w in hot), hot
    assert any("SM clock mean 1501 MHz vs the baseline's 2401 MHz" in w for w in hot), hot
    assert not any("clock" in w for w in df.loc["tuned", "warnings"]), "within the threshold: no warning"
    assert not any("throttled" in w for w in df.loc["baseline", "warnings"])
    assert df.loc["baseline", "energy_j_per_output_token"] == pytest.approx(5.1)
    assert df.loc["baseline", "energy_j_per_output_token_lo"] <= 5.1 <= df.loc["baseline",
                                                                             "energy_j_per_output_token_hi"]
    view = compare_view(df.reset_index())
    assert list(view["J/token"])[0].startswith("5.10 [") and "tok/s per W" in view.columns
