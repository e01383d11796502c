"""`results capacity` on a search that ended at a saturated probe: the answer is the bound one step past it, with
the saturation named, the same answer the driver's search stopped at (plan/capacity.at_saturation)."""

from __future__ import annotations

from pathlib import Path

from cluster.analysis.capacity import capacity_table, capacity_view
from cluster.analysis.results import Results
from cluster.config.loader import parse_spec_text
from cluster.dataset.store import DatasetStore
from cluster.kernel.run_row import RunRow
from cluster.plan.runs import expand_variants, plan_run, search_point

SPEC = """
version: 1
name: knee
model: {path: sim://m, engine: sim}
variants: [{name: base, baseline: true}]
workloads: [{name: w, input_tokens: 16, output_tokens: 8, num_requests: 8}]
load: {search: {slo_attainment: 0.9, over: concurrency, min: 1, max: 256}}
slo: {tpot_ms: 500}
"""


def test_a_search_stopped_past_the_knee_reads_as_a_saturated_bound(tmp_path: Path) -> None:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(str(tmp_path), "knee")
    store.write_experiment_meta({"spec": spec.model_dump(mode="json")})
    v = expand_variants(spec)[0]
    # every probe meets the SLO; tok/s 10 per request up to 8 running, then flat; TTFT 20 ms until 8, then grows with
    # the queue; in flight = the concurrency. 16 against 8: tok/s +0 %, TTFT +100 %, in flight +100 %: saturated,
    # and the search went one step past it (17) instead of on to 256
    for i, c in enumerate((1, 2, 4, 8, 16, 17)):
        p = plan_run(spec, v, spec.workloads[0], search_point(spec.load, c), 0, i)
        store.write_run(p, RunRow(status="ok", duration_s=10.0, metrics={
            "slo_attainment": 1.0, "output_tok_s": 10.0 * min(c, 8), "ttft_ms_p50": 20.0 * max(1.0, c / 8),
            "concurrency_mean": float(c)}))
    df = capacity_table(Results.open(str(tmp_path), "knee"), n_boot=200)
    row = df.iloc[0]
    assert row["statuses"] == "at_max" and row["saturated_at"] == 17
    assert str(row["saturated"]).startswith("saturated past c8: load +100%, output tok/s +0%")
    text = capacity_view(df).iloc[0]["capacity at SLO (concurrency)"]
    assert text.startswith(">= 17 (met where the server saturated, in 1/1 repeats: saturated past c8"), text
