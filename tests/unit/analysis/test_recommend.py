"""results recommend's decision on hand-built comparison rows (the arithmetic of each case in its comments)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import pandas as pd
import pyarrow as pa

from cluster.analysis.recommend import (STEADY, WHOLE_WINDOW, Evidence, depth_schedule, evidence_from,
                                        gate_verdicts, recommend, recommend_point)
from cluster.kernel.stats import VERDICT_FASTER, VERDICT_NO_DIFFERENCE, VERDICT_SLOWER

NAN = math.nan


def ev(variant: str, speedup: float = 1.0, lo: float = NAN, hi: float = NAN, verdict: str = "baseline", *,
       depth: Optional[int] = None, load: float = 1.0, n_ok: int = 3, gate: Optional[bool] = True,
       unvouched: tuple[str, ...] = (), metric: str = WHOLE_WINDOW, saturated: str = "") -> Evidence:
    return Evidence("chat", "concurrency", load, variant, variant == "baseline", depth, n_ok, speedup, lo, hi,
                    verdict, gate, "" if gate is not False else "answer 17 != 42", unvouched, metric, saturated)


def base(load: float = 1.0, **kw: object) -> Evidence:
    return ev("baseline", 1.0, 0.97, 1.03, "baseline", load=load, **kw)  # type: ignore[arg-type]


DEPTHS = {"baseline": None, "nextn-1": 1, "nextn-2": 2, "nextn-3": 3}


def sweep() -> list[Evidence]:
    """c1: every depth faster; c64: every depth slower than the baseline."""
    return [
        base(1.0),
        # best = nextn-3 at 1.50 [1.41, 1.60]; nextn-2's 1.45 lies inside it (1.41 <= 1.45 <= 1.60): a tie;
        # nextn-1's 1.30 does not (1.30 < 1.41), although its interval [1.20, 1.43] overlaps the best's: overlapping
        # intervals alone would make the noisier, slower depth the one served
        ev("nextn-1", 1.30, 1.20, 1.43, VERDICT_FASTER, depth=1),
        ev("nextn-2", 1.45, 1.38, 1.52, VERDICT_FASTER, depth=2),
        ev("nextn-3", 1.50, 1.41, 1.60, VERDICT_FASTER, depth=3),
        base(64.0),
        # at c64 every interval lies below 1 (hi 0.99, 0.94, 0.91): each depth loses
        ev("nextn-1", 0.95, 0.91, 0.99, VERDICT_SLOWER, depth=1, load=64.0),
        ev("nextn-2", 0.90, 0.86, 0.94, VERDICT_SLOWER, depth=2, load=64.0),
        ev("nextn-3", 0.87, 0.83, 0.91, VERDICT_SLOWER, depth=3, load=64.0),
    ]


def test_the_depth_schedule_ties_to_the_smaller_depth_and_names_the_losing_ones() -> None:
    c1, c64 = recommend(sweep())
    assert (c1.serve, c1.depth, c1.speedup, c1.speedup_lo, c1.speedup_hi) == ("nextn-2", 2, 1.45, 1.38, 1.52)
    assert c1.notes[0].startswith("tie within nextn-3's 95% interval (nextn-2 1.45× [1.38, 1.52], nextn-3 1.50× "
                                  "[1.41, 1.60]): the smaller depth, nextn-2, is served")
    assert "nextn-1" not in c1.notes[0] and c1.vouched and c1.gate == "passed"
    assert (c64.serve, c64.speedup) == ("baseline", 1.0)
    assert c64.because == "every variant is significantly slower than the baseline here"
    assert "nextn-3 is 0.87× the baseline at c64: serve without speculation there" in c64.notes
    assert len([n for n in c64.notes if "serve without speculation there" in n]) == 3
    steps = depth_schedule([c1, c64], DEPTHS)
    assert [(s.load_value, s.depth, s.variant) for s in steps] == [(1.0, 2, "nextn-2"), (64.0, 0, "baseline")]


def test_one_clear_winner_is_served_without_a_tie_note() -> None:
    # nextn-1 at 1.10 lies outside nextn-2's [1.30, 1.50]: no tie, the larger depth wins on its own
    r = recommend_point([base(), ev("nextn-1", 1.10, 1.05, 1.15, VERDICT_FASTER, depth=1),
                         ev("nextn-2", 1.40, 1.30, 1.50, VERDICT_FASTER, depth=2)])
    assert (r.serve, r.notes) == ("nextn-2", ())
    assert r.because == "nextn-2 is 1.40× [1.30, 1.50] the baseline, significantly faster"


def test_one_repeat_chooses_nothing_and_says_why() -> None:
    r = recommend_point([base(n_ok=1), ev("nextn-1", 1.3, NAN, NAN, "insufficient repeats", depth=1, n_ok=1)])
    assert r.serve is None and r.vouched  # its runs are fine, only too few
    assert r.because == "the baseline has 1 ok repeat(s): no interval (needs 2+ repeats)"
    r = recommend_point([base(), ev("nextn-1", 1.3, NAN, NAN, "insufficient repeats", depth=1, n_ok=1)])
    assert r.serve is None and "nextn-1 has 1 ok repeat(s): no interval (needs 2+)" in r.because


def test_intervals_that_include_one_choose_nothing() -> None:
    # nextn-1's [0.95, 1.09] holds 1.0 and nextn-2 is slower: no variant is better, but one may be as good
    r = recommend_point([base(), ev("nextn-1", 1.02, 0.95, 1.09, VERDICT_NO_DIFFERENCE, depth=1),
                         ev("nextn-2", 0.90, 0.85, 0.95, VERDICT_SLOWER, depth=2)])
    assert r.serve is None
    assert r.because == ("no variant differs significantly from the baseline (nextn-1 1.02× [0.95, 1.09]): the data "
                         "does not tell them apart")
    assert r.notes == ("nextn-2 is 0.90× the baseline at c1: serve without speculation there",)


def test_an_interval_below_one_that_holm_does_not_keep_is_named_not_called_overlapping() -> None:
    # the real-SGLang CPU demo at 3 repeats: nextn-3 0.79x [0.67, 0.96] excludes 1.0, yet after Holm's correction
    # over the table's comparisons compare's verdict is 'no significant difference'; the answer said "the intervals
    # overlap 1.0", contradicting the interval it printed
    r = recommend_point([base(), ev("nextn-3", 0.79, 0.67, 0.96, VERDICT_NO_DIFFERENCE, depth=3)])
    assert r.serve is None
    assert r.because == ("no variant differs significantly from the baseline (nextn-3 0.79× [0.67, 0.96]): nextn-3: "
                         "the interval shown excludes 1.0, but the difference is not significant after Holm's "
                         "correction across the table's comparisons")


def test_an_unvouched_run_blocks_the_point_it_would_otherwise_decide() -> None:
    throttled = ("repeat 1: GPUs throttled (thermal or power clock-event reasons) on 40% of the window's samples",)
    r = recommend_point([base(), ev("nextn-1", 1.3, 1.2, 1.4, VERDICT_FASTER, depth=1),
                         ev("tuned", 1.6, 1.5, 1.7, VERDICT_FASTER, unvouched=throttled)])
    assert r.serve is None and not r.vouched
    assert r.because == f"tuned is not vouched for here: {throttled[0]}: a choice here would ignore it"
    r = recommend_point([base(unvouched=("repeat 0 invalid: client lag p99 85 ms exceeds 50 ms",)),
                         ev("nextn-1", 1.3, 1.2, 1.4, VERDICT_FASTER, depth=1)])
    assert r.serve is None and r.because.startswith("the baseline is not vouched for here: repeat 0 invalid")


def test_a_variant_that_failed_the_gate_is_left_out_and_named() -> None:
    # the faster tuned variant answers wrongly: nextn-1 (1.3, its own interval above 1) is served
    r = recommend_point([base(), ev("tuned", 2.0, 1.9, 2.1, VERDICT_FASTER, gate=False),
                         ev("nextn-1", 1.3, 1.2, 1.4, VERDICT_FASTER, depth=1)])
    assert r.serve == "nextn-1"
    assert r.notes == ("tuned failed the correctness gate: answer 17 != 42",)
    r = recommend_point([base(gate=None), ev("nextn-1", 1.3, 1.2, 1.4, VERDICT_FASTER, depth=1, gate=None)])
    assert (r.serve, r.gate) == ("nextn-1", "not run")


def test_a_tie_with_a_variant_without_a_depth_is_not_broken() -> None:
    # tuned 1.35 lies inside nextn-2's [1.30, 1.50]: a tie between two kinds of variant, no rule picks one
    r = recommend_point([base(), ev("tuned", 1.35, 1.25, 1.45, VERDICT_FASTER),
                         ev("nextn-2", 1.40, 1.30, 1.50, VERDICT_FASTER, depth=2)])
    assert r.serve is None
    assert r.because.startswith("tuned 1.35× [1.25, 1.45], nextn-2 1.40× [1.30, 1.50] are all significantly faster")
    assert depth_schedule([r], {"tuned": None, "nextn-2": 2})[0].depth is None


def _ci(steady: bool, short: bool) -> pd.DataFrame:
    rows = []
    for v, whole, st in (("baseline", 1.0, 1.0), ("nextn-1", 1.2, 1.3)):
        row = {"workload": "chat", "load_kind": "concurrency", "load_value": 1.0, "variant": v,
               "is_baseline": v == "baseline", "n_runs": 3, "unvouched": [],
               "speedup_tok_s": whole, "speedup_tok_s_lo": whole - 0.1, "speedup_tok_s_hi": whole + 0.1,
               "speedup_tok_s_verdict": "baseline" if v == "baseline" else VERDICT_FASTER}
        if steady:
            row.update(speedup_steady_tps=st, speedup_steady_tps_lo=st - 0.1, speedup_steady_tps_hi=st + 0.1,
                       speedup_steady_tps_verdict="baseline" if v == "baseline" else VERDICT_FASTER,
                       steady_short=short and v == "nextn-1")
        rows.append(row)
    return pd.DataFrame(rows)


def test_steady_state_throughput_is_preferred_and_the_fallback_said() -> None:
    depths = {"baseline": None, "nextn-1": 1}
    (_, e), = [evidence_from(_ci(True, False), depths, {})]
    assert (e.metric, e.speedup, e.gate_passed) == (STEADY, 1.3, None)
    for ci in (_ci(False, False), _ci(True, True)):  # no steady column; a stretch too short at the point
        (_, e), = [evidence_from(ci, depths, {})]
        assert (e.metric, e.speedup) == (WHOLE_WINDOW, 1.2)
    (r,) = recommend(evidence_from(_ci(True, True), depths, {}))
    assert r.metric == WHOLE_WINDOW and r.serve == "nextn-1"


def test_gate_verdicts_read_the_correctness_table() -> None:
    t = pa.table({"variant": ["a", "a", "b"], "variant_passed": [True, True, False],
                  "variant_reasons": ["", "", "NaN output"]})
    assert gate_verdicts(t) == {"a": (True, ""), "b": (False, "NaN output")}
    assert gate_verdicts(pa.table({"variant": pa.array([], pa.string())})) == {}


def test_recommend_and_the_report_on_a_written_dataset(tmp_path: Path) -> None:
    """Three repeats of baseline vs NEXTN 1-3 written through the store: the command's table, its JSON, the
    report's section (synthetic step model of test_comparison: each depth beats the baseline at c1)."""
    import json

    from typer.testing import CliRunner

    from cluster.cli import app
    from tests.unit.analysis.test_comparison import build_dataset

    build_dataset(str(tmp_path), "rec", steps=[1, 2, 3], repeats=3, conc=(1, 8), n_requests=16, out_tokens=16)
    res = CliRunner().invoke(app, ["results", "recommend", "rec", "--root", str(tmp_path), "--n-boot", "300"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "what to serve per load point" in text and "depth schedule chat (concurrency): c1 → " in text
    res = CliRunner().invoke(app, ["results", "recommend", "rec", "--root", str(tmp_path), "--n-boot", "300",
                                   "--format", "json"])
    doc = json.loads(res.output)
    assert [p["load_value"] for p in doc["points"]] == [1.0, 8.0] and doc["baseline"] == "baseline"
    for p in doc["points"]:
        assert p["because"] and (p["serve"] is None or p["serve"].startswith("nextn-")), p
        assert p["metric"] in (STEADY, WHOLE_WINDOW)
    assert [s["load_value"] for s in doc["schedule"]] == [1.0, 8.0]
    res = CliRunner().invoke(app, ["results", "report", "rec", "--root", str(tmp_path), "--n-boot", "100",
                                   "--out", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "report" / "index.html").read_text()
    assert "<h2>Recommendation</h2>" in page and "depth schedule chat (concurrency): c1 → " in page
    res = CliRunner().invoke(app, ["results", "recommend", "nope", "--root", str(tmp_path)])
    assert res.exit_code == 2 and "not found" in res.output


def test_a_saturated_point_is_named_and_still_decided() -> None:
    sat = "TTFT p50 x3.1 and in-flight x2.0 against c32 while output tok/s grew x1.01"
    r = recommend_point([ev("baseline", 1.0, 0.97, 1.03, "baseline", load=64.0, saturated=sat),
                         ev("nextn-1", 0.90, 0.86, 0.94, VERDICT_SLOWER, depth=1, load=64.0)])
    assert r.serve == "baseline"
    assert r.notes[0] == f"baseline is saturated at c64: {sat}"
