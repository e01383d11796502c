"""Adaptive speculation against the fixed depths: which variants ran SGLang's --speculative-adaptive, each one's
speedup beside the best fixed depth's at every load point, and the measured depth schedule as an adaptive config."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import pandas as pd

from cluster.analysis.adaptive_runs import adaptive_variants
from cluster.analysis.query import baseline_of
from cluster.analysis.recommend import Evidence, Recommendations, load_text, ratio_text
from cluster.analysis.results import Results
from cluster.errors import UserError

@dataclass(frozen=True)
class AdaptiveLine:
    """One adaptive variant at one load point against the fastest fixed depth there (no speculation included)."""

    workload: str
    load_kind: str
    load_value: float
    variant: str
    adaptive: str
    """Its speedup over the baseline, '1.32× [1.21, 1.44]'."""
    best_fixed: str
    """The fixed depth (or the baseline: no speculation) with the largest point speedup there, and its speedup."""
    verdict: str


def _verdict(a: Evidence, b: Evidence) -> str:
    finite = all(math.isfinite(x) for x in (a.speedup_lo, a.speedup_hi, b.speedup_lo, b.speedup_hi))
    if not finite:
        return "no interval on one side: not judged"
    if a.speedup_lo > b.speedup_hi:
        return "adaptive faster (intervals apart)"
    if a.speedup_hi < b.speedup_lo:
        return "adaptive slower (intervals apart)"
    if b.speedup_lo <= a.speedup <= b.speedup_hi:
        return "tie: adaptive inside the best fixed depth's 95% interval"
    return "not told apart (intervals overlap)"


def adaptive_lines(evidence: Sequence[Evidence], adaptive: set[str]) -> list[AdaptiveLine]:
    """Per load point and adaptive variant: its speedup, the best fixed depth's (the baseline counts as depth 0) and
    how the two intervals compare."""
    points: dict[tuple[str, str, float], list[Evidence]] = {}
    for e in evidence:
        points.setdefault((e.workload, e.load_kind, e.load_value), []).append(e)
    out: list[AdaptiveLine] = []
    for (wl, kind, value), rows in sorted(points.items()):
        fixed = [e for e in rows if e.variant not in adaptive and (e.depth is not None or e.is_baseline)]
        if not fixed:
            continue
        best = max(fixed, key=lambda e: (e.speedup if math.isfinite(e.speedup) else -math.inf))
        label = f"{best.variant} (depth {best.depth})" if best.depth is not None else f"{best.variant} (no speculation)"
        for a in rows:
            if a.variant in adaptive:
                out.append(AdaptiveLine(wl, kind, value, a.variant, ratio_text(a), f"{label} {ratio_text(best)}",
                                        _verdict(a, best)))
    return out


def recommendation_lines(rec: Recommendations) -> list[AdaptiveLine]:
    """recommend's adaptive lines: its adaptive variants against the best fixed depth, from its own evidence."""
    return adaptive_lines(rec.evidence, set(rec.adaptive))


def adaptive_line_text(line: AdaptiveLine, multi_workload: bool) -> str:
    """'adaptive c8: adaptive 1.30× [...] vs best fixed nextn-2 (depth 2) 1.41× [...]: adaptive slower ...'."""
    where = f"{line.workload + ' ' if multi_workload else ''}{load_text(line.load_kind, line.load_value)}"
    return f"{where}: {line.variant} {line.adaptive} vs best fixed {line.best_fixed}: {line.verdict}"


def schedule_points(rec: Recommendations, workload: Optional[str]) -> tuple[str, list[tuple[int, int]], list[str]]:
    """(workload, [(concurrency, depth)], notes) of the depth schedule an adaptive config is written from: concurrency
    points only (a running batch is a count of requests), undecided points left out and named."""
    steps = [s for s in rec.schedule if s.load_kind == "concurrency"]
    names = sorted({s.workload for s in steps})
    if not names:
        raise UserError("no NEXTN depth schedule over concurrency load points to write (a schedule needs "
                        "speculative variants measured at concurrency points)", field="load.concurrency",
                        expected="concurrency points with NEXTN depths measured")
    if workload is None and len(names) > 1:
        raise UserError(f"the schedule has several workloads ({', '.join(names)}): name one", field="workload",
                        expected=f"one of {', '.join(names)}")
    wl = workload or names[0]
    if wl not in names:
        raise UserError(f"workload {wl!r} has no depth schedule (it has: {', '.join(names)})", field="workload",
                        expected=f"one of {', '.join(names)}")
    points: list[tuple[int, int]] = []
    notes: list[str] = []
    for s in steps:
        if s.workload != wl:
            continue
        if s.depth is None:
            notes.append(f"c{s.load_value:g} left out: {s.because}")
        elif float(s.load_value).is_integer():
            points.append((int(s.load_value), s.depth))
    if not points:
        raise UserError(f"workload {wl!r}: no load point has a decided depth ({'; '.join(notes)})", field="workload",
                        expected="at least one concurrency point where recommend chose a depth")
    return wl, points, notes


def adaptive_comparison_lines(results: Results, ci: pd.DataFrame) -> list[str]:
    """compare's lines for the adaptive variants of `results` over its compare_with_ci table (none: [])."""
    adaptive = adaptive_variants(results.runs())
    if not adaptive or ci.empty:
        return []
    from cluster.analysis.accuracy import gates_with_accuracy
    from cluster.analysis.recommend import evidence_from, gate_verdicts, run_depths

    correctness = results.table("correctness")
    gates = gates_with_accuracy(gate_verdicts(correctness), correctness, baseline_of(ci))
    lines = adaptive_lines(evidence_from(ci, run_depths(results.runs()), gates), adaptive)
    multi = len({x.workload for x in lines}) > 1
    return [adaptive_line_text(x, multi) for x in lines]
