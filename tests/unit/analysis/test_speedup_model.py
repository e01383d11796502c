"""The speedup model on hand-built runs: the fit recovers known coefficients, the leave-one-out error is the one
computed by hand, and the PREDICTED depths name unmeasured loads only (cluster/analysis/speedup_model.py,
speedup_predict.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import pytest

from cluster.analysis.speedup_model import RunPoint, fit_variant, leave_one_out, loo_summary, predict_speedup
from cluster.analysis.speedup_predict import predict_depths, prediction_lines, unmeasured_loads


def point(variant: str, depth: Optional[int], load: float, step_ms: float, ttft_ms: float = 5.0,
          accept: float = 1.0, input_tokens: float = 100.0, output_tokens: float = 11.0,
          workload: str = "chat") -> RunPoint:
    """A run whose output tok/s is what a closed loop of `load` requests gives: load·n / E2E, with
    E2E = TTFT + (n − 1)·step/A (the model's own relation, so a linear truth is recovered exactly)."""
    e2e_ms = ttft_ms + (output_tokens - 1) * step_ms / accept
    return RunPoint(variant, depth, workload, load, load, input_tokens, output_tokens, step_ms, ttft_ms, accept,
                    load * output_tokens * 1000.0 / e2e_ms)


def test_fit_recovers_known_coefficients() -> None:
    # step_ms = 10 + 0.5·b + 0.01·L and ttft_ms = 20 + 2·b over b in {1, 2, 4, 8} and L in {100, 1000}:
    # two input lengths, so L is a regressor; the data is exact, so least squares returns the coefficients
    pts = [point("nextn-2", 2, b, 10 + 0.5 * b + 0.01 * n, ttft_ms=20 + 2 * b, accept=2.5, input_tokens=n)
           for b in (1, 2, 4, 8) for n in (100, 1000)]
    m, why = fit_variant(pts)
    assert m is not None, why
    assert m.step.names == ("1", "b", "L")
    assert m.step.coef == pytest.approx((10, 0.5, 0.01), abs=1e-9)
    assert m.ttft.coef == pytest.approx((20, 2, 0), abs=1e-9)
    # E2E at b = 16, L = 100, n = 11: step 10 + 8 + 1 = 19, TTFT 52, so 52 + 10·19/2.5 = 128 ms
    assert m.e2e_ms("chat", 16, 100, 11)[0] == pytest.approx(128)


def test_one_input_length_leaves_L_out_and_one_batch_has_no_model() -> None:
    m, _ = fit_variant([point("baseline", None, b, 8 + 2 * b) for b in (1, 2, 4)])
    assert m is not None and m.step.names == ("1", "b") and m.step.coef == pytest.approx((8, 2))
    none, why = fit_variant([point("baseline", None, 4, 16), point("baseline", None, 4, 17)])
    assert none is None and "one concurrency" in why


def three_points() -> list[RunPoint]:
    """Baseline steps 10, 12, 16 ms at c1, c2, c4 (exactly 8 + 2b); nextn-1 (A = 2) 14, 16, 22 ms (not a line);
    TTFT 5 ms throughout, 11 output tokens. E2E = 5 + 10·step/A: baseline 105, 125, 165; nextn-1 75, 85, 115.
    Measured speedups 105/75 = 1.4, 125/85 = 1.470588, 165/115 = 1.434783."""
    return ([point("baseline", None, c, s) for c, s in ((1, 10), (2, 12), (4, 16))] +
            [point("nextn-1", 1, c, s, accept=2.0) for c, s in ((1, 14), (2, 16), (4, 22))])


def test_leave_one_out_by_hand_on_three_points() -> None:
    # leave c1 out: baseline line through (2,12),(4,16) = 8 + 2b -> 10 at b=1, E2E 105; nextn-1 through (2,16),(4,22)
    #   = 10 + 3b -> 13, E2E 5 + 5·13 = 70; predicted 105/70 = 1.5, measured 1.4: error +0.1
    # leave c2 out: baseline 8 + 2b -> 12, E2E 125; nextn-1 through (1,14),(4,22) = 34/3 + 8b/3 -> 50/3,
    #   E2E 5 + 250/3 = 265/3; predicted 375/265 = 1.415094, measured 1.470588: error -0.055494
    # leave c4 out: baseline 8 + 2b -> 16, E2E 165; nextn-1 through (1,14),(2,16) = 12 + 2b -> 20, E2E 105;
    #   predicted 165/105 = 1.571429, measured 1.434783: error +0.136646
    errors = {e.load_value: e for e in leave_one_out(three_points(), "baseline")}
    assert errors[1].predicted == pytest.approx(1.5) and errors[1].measured == pytest.approx(1.4)
    assert errors[2].predicted == pytest.approx(375 / 265) and errors[2].error == pytest.approx(-0.055494, abs=1e-6)
    assert errors[4].predicted == pytest.approx(165 / 105) and errors[4].error == pytest.approx(0.136646, abs=1e-6)
    s = loo_summary(list(errors.values()))
    # mean |error| = (0.1 + 0.055494 + 0.136646) / 3 = 0.097380; in % of the measured: 7.1429, 3.7736, 9.5238 -> 6.8134
    assert s.n == 3 and s.mean_abs == pytest.approx(0.097380, abs=1e-6)
    assert s.mean_abs_pct == pytest.approx(6.8134, abs=1e-3)
    assert s.worst is not None and s.worst.load_value == 4


def test_two_loads_give_no_leave_one_out() -> None:
    """With two concurrencies, leaving one out leaves each variant a single running batch: nothing predicted."""
    pts = [p for p in three_points() if p.load_value != 4]
    assert leave_one_out(pts, "baseline") == []
    assert loo_summary([]).n == 0


def test_predicted_depths_at_unmeasured_loads_and_the_next_to_measure() -> None:
    # baseline step 8 + 2b, nextn-1 (A = 2) step 12 + 2b and nextn-2 (A = 2.6) step 10 + 4b, TTFT 5, n = 11:
    # at c2  baseline E2E 125, nextn-1 5 + 5·16 = 85 (1.47×), nextn-2 5 + 10·18/2.6 = 74.2 (1.68×): depth 2
    # at c16 baseline 405, nextn-1 5 + 5·44 = 225 (1.80×), nextn-2 5 + 10·74/2.6 = 289.6 (1.40×): depth 1
    pts = []
    for c in (1, 4, 8):
        for rep, jitter in ((0, -0.1), (1, 0.1)):  # two repeats per load: residual degrees of freedom, errors
            pts += [point("baseline", None, c, 8 + 2 * c + jitter),
                    point("nextn-1", 1, c, 12 + 2 * c - jitter, accept=2.0),
                    point("nextn-2", 2, c, 10 + 4 * c + jitter, accept=2.6)]
    pred = predict_depths(pts, "baseline")
    assert unmeasured_loads([1, 4, 8]) == [2, 16]
    by_load = {p.load_value: p for p in pred.predicted}
    assert set(by_load) == {2, 16}, "only loads that were not measured"
    assert (by_load[2].depth, by_load[2].variant, by_load[2].extrapolated) == (2, "nextn-2", False)
    assert by_load[2].speedup.value == pytest.approx(125 / (5 + 180 / 2.6), rel=0.01)
    assert (by_load[16].depth, by_load[16].extrapolated) == (1, True)
    assert math.isfinite(by_load[16].speedup.se) and by_load[16].speedup.se > 0
    assert pred.measure_next is not None and pred.measure_next.load_value in (2, 16)
    lines = prediction_lines(pred, multi=False)
    assert lines[0].startswith("PREDICTED speedup model") and "leave-one-out error over 6" in lines[0]
    assert any(line.startswith("PREDICTED c2 → depth 2 (nextn-2)") for line in lines)
    assert lines[-1].startswith("measure next: c")


def test_predict_speedup_of_a_variant_against_itself_is_one() -> None:
    m, _ = fit_variant([point("baseline", None, b, 8 + 2 * b) for b in (1, 2, 4)])
    assert m is not None and predict_speedup(m, m, "chat", 32, 100, 11).value == pytest.approx(1.0)


def test_recommend_prints_predictions_apart_and_never_in_a_verdict(tmp_path: Path) -> None:
    """`results recommend` on three measured concurrencies: the measured answer is the one recommend_results
    decides (points at c1, c4, c16 only), and the PREDICTED lines name unmeasured loads (c2, c8, c32) after it."""
    import json

    from typer.testing import CliRunner

    from cluster.analysis.recommend import recommend_results
    from cluster.analysis.results import Results
    from cluster.cli import app
    from tests.unit.analysis.test_comparison import build_dataset

    root = str(tmp_path)
    build_dataset(root, "one", steps=[1, 2], repeats=2, conc=(1, 4, 16), n_requests=16, out_tokens=16)
    res = CliRunner().invoke(app, ["results", "recommend", "one", "--root", root, "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("PREDICTED"))
    assert "leave-one-out error over 6 measured (point, variant) pairs" in lines[first]
    predicted = [line for line in lines if line.startswith("PREDICTED c")]
    assert [line.split(" → ")[0] for line in predicted] == ["PREDICTED c2", "PREDICTED c8", "PREDICTED c32"]
    assert "extrapolated" in predicted[-1] and lines[lines.index(predicted[-1]) + 1].startswith("measure next: c")
    assert not any("PREDICTED" in line for line in lines[:first]), "nothing predicted above the block"
    doc = json.loads(CliRunner().invoke(app, ["results", "recommend", "one", "--root", root, "--n-boot", "200",
                                              "--format", "json"]).output)
    rec = recommend_results(Results.open(root, "one"), n_boot=200)
    assert [p["load_value"] for p in doc["points"]] == [1, 4, 16] == [r.load_value for r in rec.points]
    assert [p["serve"] for p in doc["points"]] == [r.serve for r in rec.points]
    assert [d["load_value"] for d in doc["predicted"]["depths"]] == [2, 8, 32]
    assert doc["predicted"]["loo"]["n"] == 6


def test_repeats_at_one_concurrency_give_no_model_whatever_their_running_batch() -> None:
    """Before: two repeats at c4 whose running batches differ by noise (3.9, 4.1) were fitted as a line in b."""
    from dataclasses import replace

    pts = [replace(point("baseline", None, 4, s), running_batch=b) for s, b in ((16, 3.9), (17, 4.1))]
    none, why = fit_variant(pts)
    assert none is None and "one concurrency" in why


@pytest.mark.parametrize("case", ["no depth", "depth at one load", "no positive time"])
def test_degenerate_runs_predict_nothing_in_one_line_saying_why(case: str) -> None:
    """Before: a depth with no finite prediction left the baseline alone, printed as 'no speculation: 1.00×'; a
    depth measured at one load never reached this check (its noise line was fitted)."""
    base = [point("baseline", None, c, 8 + 2 * c) for c in (1, 2, 4)]
    spec = {"no depth": [],
            "depth at one load": [point("nextn-1", 1, 4, 22, accept=2.0), point("nextn-1", 1, 4, 23, accept=2.0)],
            # step 30 − 4b: negative at c8, the one unmeasured load
            "no positive time": [point("nextn-1", 1, c, 30 - 4 * c, accept=2.0) for c in (1, 2, 4)]}[case]
    pred = predict_depths(base + spec, "baseline")
    assert pred.predicted == () and pred.measure_next is None
    want = {"no depth": "NEXTN variant (measured: baseline c1, c2, c4)",
            "depth at one load": "two or more concurrencies per variant, the baseline and a NEXTN depth (measured: "
                                 "baseline c1, c2, c4; nextn-1 c4)",
            "no positive time": "no depth's fitted lines give a positive time at c8"}[case]
    assert want in pred.why_none
    lines = prediction_lines(pred, multi=False)
    assert not any("1.00×" in line or "no speculation" in line for line in lines)
    assert lines[-1] == f"PREDICTED: nothing: {pred.why_none}"


def test_no_speculation_names_the_fastest_depth_not_the_baseline_against_itself() -> None:
    # nextn-1 accepts nothing (A = 1) and steps 10 + 3b against the baseline's 8 + 2b: slower at every load
    pts = ([point("baseline", None, c, 8 + 2 * c) for c in (1, 2, 4)] +
           [point("nextn-1", 1, c, 10 + 3 * c) for c in (1, 2, 4)])
    (p,) = predict_depths(pts, "baseline").predicted
    assert p.depth == 0 and p.runner_up == "nextn-1"
    line = next(line for line in prediction_lines(predict_depths(pts, "baseline"), False) if "c8" in line)
    # at c8: baseline E2E 5 + 10·24 = 245, nextn-1 5 + 10·34 = 345: 245/345 = 0.71×
    assert line.startswith("PREDICTED c8 → no speculation: every depth predicted slower, the fastest nextn-1 0.71×")
    assert "1.00×" not in line


def test_recommend_on_one_concurrency_predicts_nothing_and_says_why(tmp_path: Path) -> None:
    """The run seen in review: one measured load (c4, two repeats). Before: 'PREDICTED c8 → no speculation: 1.00×'
    and depths at c1, c2 from lines fitted through the repeats' noise."""
    import json

    from typer.testing import CliRunner

    from cluster.cli import app
    from tests.unit.analysis.test_comparison import build_dataset

    root = str(tmp_path)
    build_dataset(root, "one", steps=[1, 2], repeats=2, conc=(4,), n_requests=16, out_tokens=16)
    res = CliRunner().invoke(app, ["results", "recommend", "one", "--root", root, "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    predicted = [line for line in res.output.splitlines() if "PREDICTED" in line or "measure next" in line]
    assert predicted == ["PREDICTED: nothing: the model needs runs at two or more concurrencies per variant, the "
                         "baseline and a NEXTN depth (measured: c4)"]
    doc = json.loads(CliRunner().invoke(app, ["results", "recommend", "one", "--root", root, "--n-boot", "200",
                                              "--format", "json"]).output)
    assert doc["predicted"]["depths"] == [] and doc["predicted"]["measure_next"] is None
    assert doc["predicted"]["why_none"] == predicted[0].removeprefix("PREDICTED: nothing: ")
