"""Repeats until sure through the driver on local Ray: a quiet variant stops once its output throughput's 95 %
interval is narrow, a noisy one (the simulator's window_speed_spread knob) runs to max, all on one server start per
variant; the decisions are in experiment.json; a resubmission with a larger max counts on from what is recorded.

The quiet variant's figures are wall-clock throughput of a simulated server, so the repeat at which its interval
narrows depends on the machine's jitter (3 on a quiet machine; 4 on the loaded 2-core CI runner, which failed an
earlier exact assertion). The test holds it to the rule, not to a count: it stops narrow, somewhere in [min, max],
with exactly that many runs recorded. Which repeat count the rule gives for given values is tested exactly, on
hand-built values, in tests/unit/plan/test_repeats.py.

Machine load tolerated: the quiet variant must reach a ±15 % interval by its fifth window; a run-level bootstrap's
95 % half-width at 5 runs is about 0.78x their spread (sd / mean), so lateness may make its windows' throughput vary
by up to ~19 % (~1.5 ms a step on its ~8 ms steps) between windows. Lateness only widens the noisy variant's interval
(its steps already vary 2x), so it runs to max whatever the load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

# quiet: the default sim model at time_scale 0.6 (≈8 ms steps: long enough that a loaded machine's few ms of
# event-loop lateness stay a small share), its windows alike but for that jitter;
# noisy: every window's step times x 1 + 0.6 u (seed 4 draws 1.59, 0.68, 1.47, 1.12, 1.22, 0.46 at the first six
# flushes), so its throughput varies by about 2x between repeats and no ±15 % interval is reached in 7
SPEC = """
version: 1
name: until
model: {{path: sim://until, engine: sim}}
server: {{args: {{max-running-requests: 4, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.6}}
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
    result = Driver(parse_spec_text(SPEC.format(out=out, max=5)), tmp_path, None, logs.append,
                    lambda p, s: None).run()
    assert set(result.statuses.values()) == {"ok"}, result.statuses
    runs = DatasetStore(str(out), "until").read_table("runs").to_pandas()
    repeats = {v: sorted(g["repeat"]) for v, g in runs.groupby("variant")}
    facts = _facts(out)
    quiet_done = int(facts["quiet"]["repeats_done"])  # type: ignore[call-overload]
    assert facts["quiet"]["reason"] == "narrow" and 3 <= quiet_done <= 5, (facts, logs)
    assert float(facts["quiet"]["half_width_pct"]) <= 15  # type: ignore[arg-type]
    assert repeats == {"quiet": list(range(quiet_done)), "noisy": [0, 1, 2, 3, 4]}, (repeats, logs)
    # one server start per variant: every run of a variant carries its server's pid
    pids = {v: {json.loads(p)["server_pid"] for p in g["provenance_json"]} for v, g in runs.groupby("variant")}
    assert all(len(p) == 1 for p in pids.values()), pids
    assert (facts["noisy"]["reason"], facts["noisy"]["repeats_done"]) == ("max", 5), facts
    assert float(facts["noisy"]["half_width_pct"]) > 15  # type: ignore[arg-type]
    assert any("[noisy] w c2: repeat 5 of at most 5" in line for line in logs), logs

    # max 7 now: quiet has its answer (no server starts for it); noisy goes on from its 5 recorded repeats
    logs.clear()
    again = Driver(parse_spec_text(SPEC.format(out=out, max=7)), tmp_path, None, logs.append,
                   lambda p, s: None).run()
    measured = {k: s for k, s in again.statuses.items() if s != "skipped"}
    assert len(measured) == 2 and set(again.servers) == {"noisy"}, (again.statuses, logs)
    runs = DatasetStore(str(out), "until").read_table("runs").to_pandas()
    assert sorted(runs[runs["variant"] == "noisy"]["repeat"]) == [0, 1, 2, 3, 4, 5, 6]
    assert sorted(runs[runs["variant"] == "quiet"]["repeat"]) == list(range(quiet_done))
    facts = _facts(out)
    assert (facts["noisy"]["reason"], facts["noisy"]["repeats_done"]) == ("max", 7), facts
    assert (facts["quiet"]["reason"], facts["quiet"]["repeats_done"]) == ("narrow", quiet_done), facts
