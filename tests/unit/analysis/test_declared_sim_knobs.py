"""`results compare`'s unintended-differences warning: a simulator variant's own `sim:` knobs are declared, so they
are not an unintended difference; a knob nobody declared differently still is."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.analysis.comparison import unintended_differences
from cluster.analysis.results import Results
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.engines.sim_launch import SIM_KNOBS_KEY
from cluster.kernel.run_row import RunRow
from cluster.plan.runs import make_plan

SPEC = """
version: 1
name: knobs
model: {path: sim://m, engine: sim}
server: {args: {max-running-requests: 4, kv-cache-dtype: bf16, attention-backend: flashinfer}}
variants:
  - {name: quiet, baseline: true}
  - {name: noisy, sim: {window_speed_spread: 0.6, seed: 4}}
workloads:
  - {name: w, input_tokens: 16, output_tokens: 4, num_requests: 2}
load: {concurrency: [2]}
"""


def _write(tmp_path: Path, served: dict[str, dict[str, object]]) -> Results:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(str(tmp_path), "knobs")
    store.write_experiment_meta({"spec": spec.model_dump(mode="json")})
    for p in make_plan(spec):
        resolved = {"max_running_requests": 4, SIM_KNOBS_KEY: served[p.variant.name]}
        store.write_run(p, RunRow(status="ok", duration_s=1.0, resolved_args_json=json.dumps(resolved)))
    return Results.open(str(tmp_path), "knobs")


def test_declared_knobs_are_intended(tmp_path: Path) -> None:
    # the servers report exactly the knobs the spec gave each variant: before, the whole knob dump was a warning
    served = {"quiet": {"seed": 0, "window_speed_spread": 0.0, "time_scale": 1.0},
              "noisy": {"seed": 4, "window_speed_spread": 0.6, "time_scale": 1.0}}
    assert unintended_differences(_write(tmp_path, served)) == {}


def test_an_undeclared_knob_difference_is_still_reported(tmp_path: Path) -> None:
    # time_scale differs on the servers but not in the spec: it is reported, without the declared knobs
    served = {"quiet": {"seed": 0, "window_speed_spread": 0.0, "time_scale": 1.0},
              "noisy": {"seed": 4, "window_speed_spread": 0.6, "time_scale": 0.5}}
    diff = unintended_differences(_write(tmp_path, served))
    assert diff == {"noisy": {SIM_KNOBS_KEY: ({"time_scale": 1.0}, {"time_scale": 0.5})}}
