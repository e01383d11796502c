"""Where repeats until sure stand on resubmission (distributed/repeat_stage.py), from hand-built runs tables."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from cluster.config.loader import parse_spec_text
from cluster.config.repeats import RepeatsUntil
from cluster.distributed.repeat_stage import RepeatsUntilSure
from cluster.distributed.run_records import ExperimentResult
from cluster.plan.runs import make_plan, plan_run

SPEC = ("version: 1\nname: x\nmodel: {path: sim://m, engine: sim}\nvariants: [{name: a}]\n"
        "workloads: [{name: w, input_tokens: 8, output_tokens: 8, num_requests: 8}]\nload: {concurrency: [1]}\n"
        "repeats: {until: {metric: output_tps, half_width_pct: 6}, min: 3, max: 5}\n")


class _Runs:
    """A store whose runs table holds these (run key, status, m_output_tok_s) rows."""

    def __init__(self, rows: list[tuple[str, str, float]]) -> None:
        self.rows = rows

    def read_table(self, name: str, columns: Any = None) -> pa.Table:
        keys, statuses, values = zip(*self.rows) if self.rows else ((), (), ())
        return pa.table({"run_key": list(keys), "status": list(statuses),
                         "m_output_tok_s": pa.array(list(values), pa.float64())})


def _stage(statuses_values: list[tuple[str, float]]) -> tuple[RepeatsUntilSure, Any]:
    spec = parse_spec_text(SPEC)
    assert isinstance(spec.repeats, RepeatsUntil)
    plans = make_plan(spec)
    v, w, lp = plans[0].variant, plans[0].workload, plans[0].load
    rows = [(plan_run(spec, v, w, lp, r, 0).run_key, st, val) for r, (st, val) in enumerate(statuses_values)]
    store: Any = _Runs(rows)
    stage = RepeatsUntilSure(spec, spec.repeats, store, ExperimentResult("root"), lambda s: None, len(plans))
    return stage, plans


def test_a_resubmission_goes_on_where_the_interval_is_still_wide_and_not_where_it_stopped() -> None:
    # 98, 100, 102: ±5.378 % (tests/unit/plan/test_repeats.py) <= 6 %: stopped narrow, nothing to measure
    stage, plans = _stage([("ok", 98.0), ("ok", 100.0), ("ok", 102.0)])
    assert not stage.pending(plans[0].variant, plans)
    # 90, 100, 110: wider than ±6 %, 3 of at most 5 done: go on, from repeat 3
    stage, plans = _stage([("ok", 90.0), ("ok", 100.0), ("ok", 110.0)])
    assert stage.pending(plans[0].variant, plans)
    d = stage.decision(plans[0].variant, plans[0].workload, plans[0].load)
    assert (d.reason, d.repeats_done, d.ok_values) == ("too wide", 3, 3)
    # a failed repeat is not done (it is measured again, as every failed run is)
    stage, plans = _stage([("ok", 98.0), ("failed", 0.0), ("ok", 102.0)])
    assert stage.decision(plans[0].variant, plans[0].workload, plans[0].load).repeats_done == 2


def test_a_variant_that_could_not_be_measured_does_not_start_again() -> None:
    # every planned repeat invalid (e.g. its gate failed): no value to narrow, no server started for it again
    stage, plans = _stage([("invalid", 50.0)] * 3)
    d = stage.decision(plans[0].variant, plans[0].workload, plans[0].load)
    assert (d.stop, d.reason, d.ok_values) == (False, "below min", 0)
    assert not stage.pending(plans[0].variant, plans)
