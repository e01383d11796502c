"""Repeats until sure through the driver on local Ray: a quiet variant stops once its output throughput's 95 %
interval is narrow, a noisy one (the simulator's window_speed_spread knob) runs to max, all on one server start per
variant; the decisions are in experiment.json; a resubmission with a larger max counts on from what is recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

# quiet: the default sim model at time_scale 0.3 (≈4 ms steps), its windows alike but for the machine's own jitter;
# noisy: every window's step times x 1 + 0.6 u (seed 4 draws 1.59, 0.68, 1.47, 1.12, 1.22, 0.46 at the six
# flushes), so its throughput varies by about 2x between repeats and no ±15 % interval is reached in 6
SPEC = """
version: 1
name: until
model: {{path: sim://until, engine: sim}}
server: {{args: {{max-running-requests: 4, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.3}}
variants:
  - {{name: quiet, baseline: true}}
  - {{name: noisy, sim: {{window_speed_spread: 0.6, seed: 4}}}}
workloads: [{{name: w, input_tokens: 16, output_tokens: 24, num_requests: 8}}]
load: {{concurrency: [2]}}
repeats: {{until: {{metric: output_tps, half_width_pct: 15}}, min: 3, max: {max}}}
warmup_requests: 0
max_client_lag_ms: 1000
output: {out}
"""


def _facts(out: Path) -> dict[str, dict[str, object]]:
    meta = json.loads((out / "until" / "experiment.json").read_text())
    return {f["variant"]: f for f in meta["repeats_until"]}


def test_quiet_stops_early_noisy_runs_to_max_and_a_resubmission_counts_on(ray_local: None, tmp_path: Path) -> None:
    from cluster.dataset.store import DatasetStore
    from cluster.distributed.driver import Driver

    out = tmp_path / "out"
    logs: list[str] = []
    result = Driver(parse_spec_text(SPEC.format(out=out, max=4)), tmp_path, None, logs.append,
                    lambda p, s: None).run()
    assert set(result.statuses.values()) == {"ok"}, result.statuses
    runs = DatasetStore(str(out), "until").read_table("runs").to_pandas()
    repeats = {v: sorted(g["repeat"]) for v, g in runs.groupby("variant")}
    assert repeats == {"quiet": [0, 1, 2], "noisy": [0, 1, 2, 3]}, (repeats, logs)
    # one server start per variant: every run of a variant carries its server's pid
    pids = {v: {json.loads(p)["server_pid"] for p in g["provenance_json"]} for v, g in runs.groupby("variant")}
    assert all(len(p) == 1 for p in pids.values()), pids
    facts = _facts(out)
    assert (facts["quiet"]["reason"], facts["quiet"]["repeats_done"]) == ("narrow", 3), facts
    assert float(facts["quiet"]["half_width_pct"]) <= 15  # type: ignore[arg-type]
    assert (facts["noisy"]["reason"], facts["noisy"]["repeats_done"]) == ("max", 4), facts
    assert float(facts["noisy"]["half_width_pct"]) > 15  # type: ignore[arg-type]
    assert any("[noisy] w c2: repeat 4 of at most 4" in line for line in logs), logs

    # max 6 now: quiet has its answer (no server starts for it); noisy goes on from its 4 recorded repeats
    logs.clear()
    again = Driver(parse_spec_text(SPEC.format(out=out, max=6)), tmp_path, None, logs.append,
                   lambda p, s: None).run()
    measured = {k: s for k, s in again.statuses.items() if s != "skipped"}
    assert len(measured) == 2 and set(again.servers) == {"noisy"}, (again.statuses, logs)
    runs = DatasetStore(str(out), "until").read_table("runs").to_pandas()
    assert sorted(runs[runs["variant"] == "noisy"]["repeat"]) == [0, 1, 2, 3, 4, 5]
    facts = _facts(out)
    assert (facts["noisy"]["reason"], facts["noisy"]["repeats_done"]) == ("max", 6), facts
    assert (facts["quiet"]["reason"], facts["quiet"]["repeats_done"]) == ("narrow", 3), facts
