"""The accuracy task's checks on a real engine's dataset (tests/e2e/test_vllm_e2e.py): the tiny random-weight model
cannot do arithmetic, so these assert the pipeline — every item's rows in both phases, the accuracy with its Wilson
interval, the difference to the baseline and the verdict logic — rather than right answers."""

from __future__ import annotations

import math

import pyarrow as pa

from cluster.analysis.accuracy import accuracy_verdicts, wilson


def check_eval_rows(correctness: pa.Table, runs: list[dict[str, object]], n_items: int, baseline: str) -> None:
    rows = [r for r in correctness.to_pylist() if r.get("task") == "eval"]
    variants = sorted({str(r["variant"]) for r in rows})
    assert variants == sorted({str(r["variant"]) for r in runs}), variants
    for v in variants:
        mine = [r for r in rows if r["variant"] == v]
        alone = [r for r in mine if r["phase"] == "alone"]
        loaded = [r for r in mine if r["phase"] == "under_load"]
        assert len(alone) == n_items and all(r["counted"] for r in alone), alone
        assert all(r["expected"] and r["output_text"] is not None for r in alone), alone  # every item answered
        assert len(loaded) == n_items, loaded
        carrier = {str(r["run_key"]) for r in runs if r["variant"] == v}
        assert {r["run_key"] for r in loaded} <= carrier  # sent in one of the variant's measured windows
        for r in mine:  # an integer answer is correct exactly when the integer read equals the expected one
            assert r["correct"] is (r["got"] is not None and int(r["got"]) == int(r["expected"]))
    verdicts = accuracy_verdicts(correctness, baseline)
    assert set(verdicts) == set(variants)
    for v, a in verdicts.items():
        s = wilson(a.alone.correct, a.alone.counted)
        assert a.alone.counted == n_items and s.low is not None and s.high is not None
        assert 0.0 <= s.low <= (a.alone.rate or 0.0) <= s.high <= 1.0 and (a.alone.low, a.alone.high) == (s.low, s.high)
        if v == baseline:
            assert a.alone_vs_baseline is None and not a.invalid
            continue
        d = a.under_load_vs_baseline or a.alone_vs_baseline
        if d is not None:
            assert d.low <= d.diff <= d.high and math.isfinite(d.low)
            assert a.invalid is (d.high < 0)
