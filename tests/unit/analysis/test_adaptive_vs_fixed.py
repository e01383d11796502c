"""The adaptive variant beside the best fixed depth at each load point, and the schedule it is written from."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from cluster.analysis.adaptive_runs import adaptive_variants
from cluster.analysis.adaptive_vs_fixed import adaptive_line_text, adaptive_lines, schedule_points
from cluster.analysis.recommend import WHOLE_WINDOW, Evidence, Recommendations, ScheduleStep
from cluster.errors import UserError


def ev(variant: str, speedup: float, lo: float, hi: float, depth: int | None, load: float) -> Evidence:
    return Evidence("chat", "concurrency", load, variant, variant == "baseline", depth, 3, speedup, lo, hi,
                    "faster", True, "", (), WHOLE_WINDOW, "")


def test_adaptive_runs_are_those_whose_argv_asked_for_it() -> None:
    runs = pd.DataFrame({"variant": ["nextn-1", "adaptive", "baseline"],
                         "launch_argv_json": [json.dumps(["--speculative-num-steps", "1"]),
                                              json.dumps(["--speculative-adaptive", "--speculative-adaptive-config",
                                                          "a.json"]), None]})
    assert adaptive_variants(runs) == {"adaptive"}


def test_each_point_names_the_best_fixed_depth_and_how_adaptive_compares() -> None:
    evidence = [
        ev("baseline", 1.0, 1.0, 1.0, None, 1), ev("nextn-1", 1.5, 1.45, 1.55, 1, 1),
        ev("nextn-3", 2.0, 1.9, 2.1, 3, 1), ev("adaptive", 1.98, 1.9, 2.05, 3, 1),
        ev("baseline", 1.0, 1.0, 1.0, None, 8), ev("nextn-1", 1.3, 1.25, 1.35, 1, 8),
        ev("nextn-3", 0.9, 0.85, 0.95, 3, 8), ev("adaptive", 1.1, 1.05, 1.15, 3, 8),
        ev("baseline", 1.0, 1.0, 1.0, None, 64), ev("nextn-1", 0.8, 0.75, 0.85, 1, 64),
        ev("adaptive", 1.2, 1.1, 1.3, 1, 64),
    ]
    lines = adaptive_lines(evidence, {"adaptive"})
    assert [(x.load_value, x.best_fixed.split(" [")[0], x.verdict.split(" ")[0] + " " + x.verdict.split(" ")[1])
            for x in lines] == [
        (1, "nextn-3 (depth 3) 2.00×", "tie: adaptive"),
        (8, "nextn-1 (depth 1) 1.30×", "adaptive slower"),
        (64, "baseline (no speculation) 1.00×", "adaptive faster")]
    assert adaptive_line_text(lines[1], False) == (
        "c8: adaptive 1.10× [1.05, 1.15] vs best fixed nextn-1 (depth 1) 1.30× [1.25, 1.35]: adaptive slower "
        "(intervals apart)")


def test_a_point_without_intervals_is_not_judged() -> None:
    nan = math.nan
    lines = adaptive_lines([ev("baseline", 1.0, nan, nan, None, 1), ev("nextn-1", 1.2, nan, nan, 1, 1),
                            ev("adaptive", 1.1, nan, nan, 1, 1)], {"adaptive"})
    assert lines[0].verdict == "no interval on one side: not judged"


def _rec(*steps: ScheduleStep) -> Recommendations:
    return Recommendations((), steps, "baseline", "")


def test_the_schedule_written_is_the_concurrency_points_with_a_decided_depth() -> None:
    rec = _rec(ScheduleStep("chat", "concurrency", 1, 3, "nextn-3", ""),
               ScheduleStep("chat", "concurrency", 8, None, None, "undecided: tie"),
               ScheduleStep("chat", "concurrency", 64, 0, "baseline", "no speculation"),
               ScheduleStep("chat", "rate", 2.5, 1, "nextn-1", ""))
    wl, points, notes = schedule_points(rec, None)
    assert (wl, points) == ("chat", [(1, 3), (64, 0)]) and notes == ["c8 left out: undecided: tie"]
    with pytest.raises(UserError, match="has no depth schedule"):
        schedule_points(rec, "code")
    with pytest.raises(UserError, match="several workloads"):
        schedule_points(_rec(ScheduleStep("a", "concurrency", 1, 1, "n", ""),
                             ScheduleStep("b", "concurrency", 1, 1, "n", "")), None)


def test_run_ends_with_the_adaptive_lines_too() -> None:
    from cluster.analysis.recommend import recommend
    from cluster.commands.run_answer import answer_lines

    evidence = [ev("baseline", 1.0, 0.98, 1.02, None, 1), ev("nextn-2", 1.8, 1.75, 1.85, 2, 1),
                ev("adaptive", 1.5, 1.45, 1.55, 2, 1)]
    fixed = [e for e in evidence if e.variant != "adaptive"]
    rec = Recommendations(tuple(recommend(fixed)), (), "baseline", "", ("adaptive",), tuple(evidence))
    lines = answer_lines(rec, "exp", "results")
    assert lines[1].startswith("answer c1: serve nextn-2")
    assert lines[-1] == ("answer adaptive vs fixed c1: adaptive 1.50× [1.45, 1.55] vs best fixed nextn-2 (depth 2) "
                         "1.80× [1.75, 1.85]: adaptive slower (intervals apart)")
