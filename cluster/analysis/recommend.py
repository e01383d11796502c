"""`results recommend`: per workload and load point, the variant to serve and the evidence, or why none can be chosen.

The decision (`recommend`) is a pure function of one `Evidence` per (point, variant), read from the compare table:
the throughput speedup over the baseline with its 95 % interval and Holm-corrected verdict (compare's interval
machinery, cluster/analysis/comparison.py: one definition), the correctness gate's verdict, and the flags compare
carries. The rules, in order, at one point:

1. Nothing is chosen when the baseline is missing, has a run that cannot be vouched for (an invalid or failed
   repeat, throttled GPUs, clocks unlike the others': compare's `unvouched` column), fewer than MIN_REPEATS ok
   repeats (no interval) or failed the gate.
2. A variant that failed the gate is left out (named, with the gate's reasons). Nothing is chosen while another
   variant cannot be judged (an unvouched run, fewer than MIN_REPEATS ok repeats, no finite interval): a choice
   would ignore it, so the answer names it and why instead.
3. Of the rest, those compare calls significantly faster are the contenders; the best has the largest point
   speedup. Every contender whose point estimate lies inside the best's 95% interval ties with it (the best's own
   uncertainty cannot tell them apart; a noisy contender's wide interval does not make it a tie): when all tied
   are NEXTN depths the SMALLER depth is served (the same speed for fewer draft tokens) and the note says so; a tie that involves a
   variant without a depth is not broken: nothing is chosen, and the answer names the tied estimates.
4. With no contender: if every remaining variant is significantly slower the baseline is served ("serve without
   speculation there" for depths); if any is indistinguishable from the baseline, nothing is chosen (not
   significant after Holm's correction: the data does not tell them apart; an interval shown that excludes 1.0 but
   does not survive the correction is named as such).
5. A variant significantly slower than the baseline is named with its ratio ("nextn-3 is 0.87× the baseline at
   c64"), whatever is chosen, and a variant compare marks over-saturated at the point is named with the reason.

Throughput is the steady-state figure when compare carries a steady-state speedup for every variant at the point
and no steady stretch there is too short; otherwise the whole-window figure, and each point says which it used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pandas as pd
import pyarrow as pa

from cluster.kernel import stats
from cluster.kernel.load_shapes import load_shape
from cluster.analysis.metric_catalog import speedup_column
from cluster.analysis.query import baseline_of
from cluster.analysis.results import Results

MIN_REPEATS = 2
"""Ok repeats a side needs for an interval (stats.ratio_estimate gives none below two)."""

STEADY = "steady-state output tok/s"
WHOLE_WINDOW = "whole-window output tok/s"


@dataclass(frozen=True)
class Evidence:
    """One variant at one load point as compare measured it: what the decision reads."""

    workload: str
    load_kind: str
    load_value: float
    variant: str
    is_baseline: bool
    depth: Optional[int]
    """NEXTN draft steps (speculative_num_steps); None for a variant without speculation."""
    n_ok: int
    speedup: float
    """Variant over baseline throughput (> 1 = the variant is better); NaN without one."""
    speedup_lo: float
    speedup_hi: float
    verdict: str
    """compare's Holm-corrected verdict: stats.VERDICT_FASTER, VERDICT_SLOWER, VERDICT_NO_DIFFERENCE, ..."""
    gate_passed: Optional[bool]
    """The correctness gate's verdict for the variant; None when no gate ran."""
    gate_reasons: str
    unvouched: tuple[str, ...]
    """compare's flags that the cell's figures are not the variant's alone (invalid/failed repeats, throttling)."""
    metric: str
    """Which throughput the speedup is of: STEADY or WHOLE_WINDOW."""
    saturated: str = ""
    """Why the variant is over-saturated at this point (compare's mark, cluster/plan/saturation.py); "" when not."""
    gpus: Optional[int] = None
    """The GPUs its deployment holds (compare's gpus); None when not known (an endpoint not launched by sglbench)."""
    tok_s: float = math.nan
    """Its throughput of `metric` (the total over its GPUs), NaN without one."""
    tok_s_per_gpu: float = math.nan
    """tok_s per GPU (metric_catalog per_gpu), NaN when its GPUs are not known."""


@dataclass(frozen=True)
class Recommendation:
    """The answer at one load point: `serve` is None when nothing can be chosen, `because` says why either way."""

    workload: str
    load_kind: str
    load_value: float
    serve: Optional[str]
    depth: Optional[int]
    because: str
    speedup: float
    speedup_lo: float
    speedup_hi: float
    gate: str
    vouched: bool
    """Whether every run at the point is vouched for (no variant there carries an unvouched flag)."""
    metric: str
    notes: tuple[str, ...]
    gpus: Optional[int] = None
    """The GPUs of what is served (None: nothing chosen, or an endpoint whose GPUs are not known)."""
    tok_s: float = math.nan
    """The served variant's throughput of `metric`, and per GPU beside it."""
    tok_s_per_gpu: float = math.nan
    gpus_note: str = ""
    """per_gpu.gpus_note over the point's variants: "" when they hold the same known GPU count."""


def load_text(kind: str, value: float) -> str:
    """'c64' or 'r2.5': a load point as the schedule and the notes name it."""
    return load_shape(kind).short_label(value)


def ratio_text(e: Evidence) -> str:
    """'1.32× [1.21, 1.44]' (the point alone without a finite interval)."""
    if not (math.isfinite(e.speedup_lo) and math.isfinite(e.speedup_hi)):
        return f"{e.speedup:.2f}×"
    return f"{e.speedup:.2f}× [{e.speedup_lo:.2f}, {e.speedup_hi:.2f}]"


def gate_text(e: Evidence) -> str:
    if e.gate_passed is None:
        return "not run"
    return "passed" if e.gate_passed else f"failed ({e.gate_reasons or 'no reason stored'})"


def _unjudged(e: Evidence) -> Optional[str]:
    """Why a variant's speed cannot be judged at its point (None: it can)."""
    if e.unvouched:
        return f"{e.variant} is not vouched for here: {'; '.join(e.unvouched)}"
    if e.n_ok < MIN_REPEATS:
        return f"{e.variant} has {e.n_ok} ok repeat(s): no interval (needs {MIN_REPEATS}+)"
    if not (math.isfinite(e.speedup) and math.isfinite(e.speedup_lo) and math.isfinite(e.speedup_hi)):
        return f"{e.variant} has no speedup interval over the baseline"
    return None


def _ties(r: Evidence, best: Evidence) -> bool:
    """Whether contender r is indistinguishable from the best: its point lies inside the best's interval."""
    return best.speedup_lo <= r.speedup <= best.speedup_hi


def gpus_text(e: Evidence) -> str:
    """What the served variant holds, after the choice text: '; nextn holds 8 GPUs: 17.5 steady-state output tok/s
    per GPU' ("" when its GPUs are not known: an endpoint's, which the point's gpus note names)."""
    if e.gpus is None:
        return ""
    per = f": {e.tok_s_per_gpu:.1f} {e.metric} per GPU" if math.isfinite(e.tok_s_per_gpu) else ""
    return f"; {e.variant} holds {e.gpus} GPU{'s' if e.gpus != 1 else ''}{per}"


def _answer(rows: Sequence[Evidence], pick: Optional[Evidence], because: str, notes: list[str]) -> Recommendation:
    """The Recommendation at the point of `rows`: serve `pick` (None: nothing chosen) because ..."""
    from cluster.analysis.per_gpu import gpus_note

    first, nan = rows[0], math.nan
    vouched = not any(r.unvouched for r in rows)
    metric = next((r.metric for r in rows if r.is_baseline), first.metric)
    note = gpus_note({r.variant: r.gpus for r in rows})
    if note:
        notes = notes + [note]
    if pick is None:
        return Recommendation(first.workload, first.load_kind, first.load_value, None, None, because, nan, nan, nan,
                              "-", vouched, metric, tuple(notes), gpus_note=note)
    if pick.is_baseline:  # the baseline against itself: 1.0 by definition, no interval
        ratio = (1.0, nan, nan)
    else:
        ratio = (pick.speedup, pick.speedup_lo, pick.speedup_hi)
    return Recommendation(first.workload, first.load_kind, first.load_value, pick.variant, pick.depth,
                          because + gpus_text(pick), *ratio, gate_text(pick), vouched, metric, tuple(notes),
                          gpus=pick.gpus, tok_s=pick.tok_s, tok_s_per_gpu=pick.tok_s_per_gpu, gpus_note=note)


def recommend_point(rows: Sequence[Evidence]) -> Recommendation:
    """The decision at one (workload, load point): rows hold one Evidence per variant there, the baseline among them."""
    base = next((r for r in rows if r.is_baseline), None)
    first = rows[0]
    where = load_text(first.load_kind, first.load_value)
    if base is None:
        return _answer(rows, None, f"no baseline ran at {where}: nothing to compare against", [])
    if base.unvouched:
        return _answer(rows, None, f"the baseline is not vouched for here: {'; '.join(base.unvouched)}", [])
    if base.n_ok < MIN_REPEATS:
        return _answer(rows, None, f"the baseline has {base.n_ok} ok repeat(s): no interval (needs "
                       f"{MIN_REPEATS}+ repeats)", [])
    if base.gate_passed is False:  # the reference answers are its own: a failed baseline gate voids every claim
        return _answer(rows, None, f"the baseline failed the correctness gate: {base.gate_reasons}", [])
    others = [r for r in rows if not r.is_baseline]
    # saturation is evidence, not a veto: the point's figures stand, the reader learns the server queues there
    notes = [f"{r.variant} is saturated at {where}: {r.saturated}" for r in rows if r.saturated]
    notes += [f"{r.variant} failed the correctness gate: {r.gate_reasons or 'no reason stored'}"
              for r in others if r.gate_passed is False]
    others = [r for r in others if r.gate_passed is not False]
    unjudged = [why for why in map(_unjudged, others) if why is not None]
    if unjudged:
        return _answer(rows, None, "; ".join(unjudged) + ": a choice here would ignore it", notes)
    usable = others
    slower = [r for r in usable if r.verdict == stats.VERDICT_SLOWER]
    for r in slower:
        tail = ": serve without speculation there" if r.depth is not None else ""
        notes.append(f"{r.variant} is {r.speedup:.2f}× the baseline at {where}{tail}")
    faster = [r for r in usable if r.verdict == stats.VERDICT_FASTER]
    if not faster:
        if not others:
            return _answer(rows, base, "no other variant passed the gate here" if notes else
                           "the baseline is the only variant here", notes)
        unclear = [r for r in usable if r.verdict != stats.VERDICT_SLOWER]
        if unclear:
            names = ", ".join(f"{r.variant} {ratio_text(r)}" for r in unclear)
            # an interval that excludes 1.0 can still be no significant difference after Holm's correction across
            # the table's comparisons: say so, or the answer contradicts the interval it prints
            holm = [r.variant for r in unclear if r.speedup_hi < 1.0 or r.speedup_lo > 1.0]
            why = ("the data does not tell them apart" if not holm else
                   f"{', '.join(holm)}: the interval shown excludes 1.0, but the difference is not significant after "
                   "Holm's correction across the table's comparisons")
            return _answer(rows, None, f"no variant differs significantly from the baseline ({names}): {why}",
                           notes)
        return _answer(rows, base, "every variant is significantly slower than the baseline here", notes)
    best = max(faster, key=lambda r: r.speedup)
    tied = [r for r in faster if r is best or _ties(r, best)]
    if len(tied) == 1:
        return _answer(rows, best, f"{best.variant} is {ratio_text(best)} the baseline, significantly faster",
                       notes)
    listed = ", ".join(f"{r.variant} {ratio_text(r)}" for r in tied)
    if all(r.depth is not None for r in tied):
        pick = min(tied, key=lambda r: (r.depth or 0, -r.speedup))
        notes.insert(0, f"tie within {best.variant}'s 95% interval ({listed}): the smaller depth, {pick.variant}, "
                        "is served (the same speed for fewer draft tokens)")
        return _answer(rows, pick, f"{pick.variant} is {ratio_text(pick)} the baseline, significantly faster; "
                       f"tied with {', '.join(r.variant for r in tied if r is not pick)} (smaller depth chosen)",
                       notes)
    return _answer(rows, None, f"{listed} are all significantly faster than the baseline and tie within the best's "
                   "95% interval: the data does not tell them apart", notes)


def recommend(evidence: Sequence[Evidence]) -> list[Recommendation]:
    """One Recommendation per (workload, load kind, load value), in the order the points first appear."""
    points: dict[tuple[str, str, float], list[Evidence]] = {}
    for e in evidence:
        points.setdefault((e.workload, e.load_kind, e.load_value), []).append(e)
    return [recommend_point(rows) for rows in points.values()]


@dataclass(frozen=True)
class ScheduleStep:
    """One load point of a NEXTN depth schedule: the depth served (0: no speculation; None: undecided)."""

    workload: str
    load_kind: str
    load_value: float
    depth: Optional[int]
    variant: Optional[str]
    because: str


def depth_schedule(recs: Sequence[Recommendation], depths: Mapping[str, Optional[int]]) -> list[ScheduleStep]:
    """Which depth to serve at each load point, per workload and load kind, load ascending; empty when no variant
    has a depth. `depths`: variant -> its NEXTN depth (None without speculation)."""
    if not any(d is not None for d in depths.values()):
        return []
    out = []
    for r in sorted(recs, key=lambda r: (r.workload, r.load_kind, r.load_value)):
        if r.serve is None:
            out.append(ScheduleStep(r.workload, r.load_kind, r.load_value, None, None, f"undecided: {r.because}"))
        elif depths.get(r.serve) is None:
            out.append(ScheduleStep(r.workload, r.load_kind, r.load_value, 0, r.serve,
                                    f"no speculation ({r.serve}): {r.because}"))
        else:
            out.append(ScheduleStep(r.workload, r.load_kind, r.load_value, depths[r.serve], r.serve, r.because))
    return out


SPEEDUP_COLUMNS: tuple[tuple[str, str], ...] = ((speedup_column("steady_output_tps"), STEADY),
                                                (speedup_column("output_tok_s"), WHOLE_WINDOW))
"""compare's throughput speedup columns, preferred first (each with _lo, _hi and _verdict beside it)."""
TOTALS = {STEADY: "steady_output_tps", WHOLE_WINDOW: "output_tok_s"}
"""compare's column of each throughput a speedup is of (its per-GPU figure: `<column>_per_gpu`)."""


def _figure(r: Mapping[str, object], column: str) -> float:
    """A compare row's number (NaN when absent, null or not finite: pandas' NA and NaN alike)."""
    try:
        v = float(r.get(column))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _gpus(r: Mapping[str, object]) -> Optional[int]:
    v = _figure(r, "gpus")
    return int(v) if math.isfinite(v) else None


def _point_metric(cell: pd.DataFrame) -> tuple[str, str]:
    """(speedup column, metric name) for one point's compare rows: steady state when every variant there has a
    finite steady-state speedup and no steady stretch is too short, else the whole window."""
    col, name = SPEEDUP_COLUMNS[0]
    if col in cell.columns:
        finite = pd.to_numeric(cell[col], errors="coerce").notna().all()
        short = bool(cell["steady_short"].fillna(False).astype(bool).any()) if "steady_short" in cell else False
        if finite and not short:
            return col, name
    return SPEEDUP_COLUMNS[1]


def evidence_from(ci: pd.DataFrame, depths: Mapping[str, Optional[int]],
                  gates: Mapping[str, tuple[bool, str]]) -> list[Evidence]:
    """One Evidence per compare_with_ci row. `depths`: variant -> NEXTN depth; `gates`: variant -> (passed,
    reasons) of its correctness gate (a variant without one ran no gate)."""
    out: list[Evidence] = []
    if ci.empty:
        return out
    for _, cell in ci.groupby(["workload", "load_kind", "load_value"], sort=False):
        col, metric = _point_metric(cell)
        for r in cell.to_dict("records"):
            gate = gates.get(str(r["variant"]))
            out.append(Evidence(
                workload=str(r["workload"]), load_kind=str(r["load_kind"]), load_value=float(r["load_value"]),
                variant=str(r["variant"]), is_baseline=bool(r["is_baseline"]), depth=depths.get(str(r["variant"])),
                n_ok=int(r["n_runs"]), speedup=float(r[col]), speedup_lo=float(r[f"{col}_lo"]),
                speedup_hi=float(r[f"{col}_hi"]), verdict=str(r[f"{col}_verdict"]),
                gate_passed=None if gate is None else gate[0], gate_reasons="" if gate is None else gate[1],
                unvouched=tuple(r.get("unvouched") or ()), metric=metric, saturated=str(r.get("saturated") or ""),
                gpus=_gpus(r), tok_s=_figure(r, TOTALS[metric]), tok_s_per_gpu=_figure(r, f"{TOTALS[metric]}_per_gpu")))
    return out


def run_depths(runs: pd.DataFrame) -> dict[str, Optional[int]]:
    """variant -> its speculative depth (spec_num_steps) from the runs table; None without speculation."""
    out: dict[str, Optional[int]] = {}
    for v, g in runs.groupby("variant", sort=False):
        steps = pd.to_numeric(g["spec_num_steps"], errors="coerce").dropna()
        out[str(v)] = int(steps.iloc[0]) if len(steps) and g["spec_algorithm"].notna().any() else None
    return out


def gate_verdicts(correctness: pa.Table) -> dict[str, tuple[bool, str]]:
    """variant -> (passed, reasons) from the correctness table (its verdict repeats on each of the variant's rows)."""
    if correctness.num_rows == 0 or "variant_passed" not in correctness.column_names:
        return {}
    out: dict[str, tuple[bool, str]] = {}
    for r in correctness.select(["variant", "variant_passed", "variant_reasons"]).to_pylist():
        out.setdefault(str(r["variant"]), (bool(r["variant_passed"]), str(r["variant_reasons"] or "")))
    return out


@dataclass(frozen=True)
class Recommendations:
    """What `results recommend` prints: the answer per point, the depth schedule, the interval method."""

    points: tuple[Recommendation, ...]
    schedule: tuple[ScheduleStep, ...]
    baseline: Optional[str]
    ci_method: str
    adaptive: tuple[str, ...] = ()
    """Variants that ran SGLang's adaptive speculation: not candidates above (analysis/adaptive_vs_fixed.py puts each
    beside the best fixed depth, from `evidence`)."""
    evidence: tuple[Evidence, ...] = ()
    """Every variant's evidence per point, the adaptive ones included."""


RECOMMEND_N_BOOT = 2000
"""Bootstrap resamples of the one decision: `results recommend` and the answer `sglbench run` closes with both decide
with it (and RECOMMEND_SEED), or two near-tied depths can be named differently by the two."""
RECOMMEND_SEED = 0


def recommend_results(results: Results, n_boot: int = RECOMMEND_N_BOOT, seed: int = RECOMMEND_SEED) -> Recommendations:
    """Read compare (with intervals), the variants' depths and gate verdicts from `results` and decide."""
    from cluster.analysis.comparison import compare_with_ci

    ci = compare_with_ci(results, n_boot=n_boot, seed=seed)
    return decide(results, ci)


def decide(results: Results, ci: pd.DataFrame) -> Recommendations:
    """The recommendations over a compare_with_ci table of `results` (the report passes the one it computed)."""
    if ci.empty:
        return Recommendations((), (), None, "")
    depths = run_depths(results.runs())
    from cluster.analysis.accuracy import gates_with_accuracy

    correctness = results.table("correctness")
    gates = gates_with_accuracy(gate_verdicts(correctness), correctness, baseline_of(ci))
    from cluster.analysis.adaptive_runs import adaptive_variants

    adaptive = adaptive_variants(results.runs())
    evidence = evidence_from(ci, depths, gates)
    recs = recommend([e for e in evidence if e.variant not in adaptive])  # a schedule of fixed depths only
    return Recommendations(tuple(recs), tuple(depth_schedule(recs, depths)), baseline_of(ci),
                           str(ci.attrs.get("ci_method", "")), tuple(sorted(adaptive)), tuple(evidence))
