"""Capacity at an SLO on hand-built runs: each repeat's answer is the highest meeting load below the lowest miss,
the interval is over repeats, the ratio is paired by repeat, and bounds or incomplete searches give no value."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.analysis.capacity import capacity_table, capacity_view
from cluster.dataset.store import DatasetStore
from cluster.plan.runs import expand_variants, plan_run, search_point
from cluster.config.loader import parse_spec_text
from cluster.analysis.results import Results
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: cap
model: {path: sim://m, engine: sim}
variants: [{name: base, baseline: true}, {name: fast}, {name: odd}]
workloads: [{name: w, input_tokens: 16, output_tokens: 8, num_requests: 8}]
load: {search: {slo_attainment: 0.9, over: concurrency, min: 1, max: 16}}
slo: {tpot_ms: 50}
repeats: 3
"""

# per variant and repeat: the probes a search would have taken and each one's attainment (1.0 meets, 0.5 misses)
PROBES = {
    # capacity 4, 4, 5 per repeat (mean 13/3 = 4.33)
    "base": [{1: 1.0, 2: 1.0, 4: 1.0, 8: 0.5, 6: 0.5, 5: 0.5}, {1: 1.0, 2: 1.0, 4: 1.0, 8: 0.5, 6: 0.5, 5: 0.5},
             {1: 1.0, 2: 1.0, 4: 1.0, 8: 0.5, 6: 0.5, 5: 1.0}],
    # capacity 8, 9, 8 (mean 25/3 = 8.33): ratio to the baseline 8.33 / 4.33 = 1.92
    "fast": [{1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 0.5, 12: 0.5, 10: 0.5, 9: 0.5},
             {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 0.5, 12: 0.5, 10: 0.5, 9: 1.0},
             {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 0.5, 12: 0.5, 10: 0.5, 9: 0.5}],
    # repeat 0 meets at max (16: a bound), repeat 1's probe at 8 was invalid (incomplete), repeat 2 found 3
    "odd": [{1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0}, {1: 1.0, 2: 1.0, 4: 1.0, 8: "invalid"},
            {1: 1.0, 2: 1.0, 4: 0.5, 3: 1.0}],
}


def _build(root: str) -> None:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(root, "cap")
    store.write_experiment_meta({"spec": spec.model_dump(mode="json")})
    variants = {v.name: v for v in expand_variants(spec)}
    w, i = spec.workloads[0], 0
    for name, repeats in PROBES.items():
        for r, probes in enumerate(repeats):
            for load, att in probes.items():
                p = plan_run(spec, variants[name], w, search_point(spec.load, load), r, i)
                i += 1
                status = "invalid" if att == "invalid" else "ok"
                store.write_run(p, RunRow(status=status, duration_s=10.0,
                                          metrics={"slo_attainment": None if status != "ok" else att}))


def test_each_repeat_is_bracketed_and_the_variants_compared(tmp_path: Path) -> None:
    _build(str(tmp_path))
    df = capacity_table(Results.open(str(tmp_path), "cap"), n_boot=500).set_index("variant")
    assert df.loc["base", "capacity"] == pytest.approx(13 / 3) and df.loc["base", "n_found"] == 3
    assert df.loc["fast", "capacity"] == pytest.approx(25 / 3)
    assert df.loc["base", "capacity_lo"] <= 13 / 3 <= df.loc["base", "capacity_hi"]
    assert df.loc["fast", "speedup"] == pytest.approx((25 / 3) / (13 / 3))
    assert df.loc["fast", "speedup_lo"] > 1 and df.loc["fast", "speedup_verdict"] == "faster"
    # a bound and an incomplete search: no value, no interval, no ratio; the invalid probe is named
    odd = df.loc["odd"]
    assert odd["statuses"] == "at_max,incomplete,found" and odd["n_found"] == 1
    assert odd["capacity"] != odd["capacity"]  # NaN
    assert odd["not_ok_probes"] == "repeat 1: 8 invalid" and odd["speedup_verdict"] == ""
    view = capacity_view(df.reset_index()).set_index("variant")
    assert view.loc["fast", "vs baseline"].endswith("higher")
    assert view.loc["odd", "capacity at SLO (concurrency)"] == "no value (1 at_max, 1 incomplete, 1 found of 3 repeats)"


def test_an_experiment_without_a_search_has_no_capacity_table(tmp_path: Path) -> None:
    _build(str(tmp_path))
    store = DatasetStore(str(tmp_path), "cap")
    meta = store.read_experiment_meta() or {}
    meta["spec"]["load"]["search"] = None
    store.write_experiment_meta(meta)
    assert capacity_table(Results.open(str(tmp_path), "cap")).empty
