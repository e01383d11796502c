"""PREDICTED depths at loads that were not measured: the speedup model (cluster/analysis/speedup_model.py) read from
an experiment's ok closed-loop runs, each NEXTN depth's predicted speedup at unmeasured concurrencies, the depth it
names there, the leave-one-out error on the measured points and the load to measure next. Never a verdict: the
measured recommendation (cluster/analysis/recommend.py) is decided without it and printed apart."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pandas as pd

from cluster.analysis.results import Results
from cluster.input_files import JsonObject
from cluster.analysis.speedup_model import (LooError, LooSummary, RunPoint, Speedup, VariantModel, fit_models,
                                            leave_one_out, loo_summary, predict_speedup, workload_lengths)

_RUN_COLUMNS = ("m_concurrency_mean", "m_input_tok_s", "m_output_tok_s", "m_request_throughput_rps",
                "m_tpot_ms_mean", "m_ttft_ms_mean", "m_accept_length")


def points_from_runs(runs: pd.DataFrame, depths: Mapping[str, Optional[int]], keep: Sequence[str]) -> list[RunPoint]:
    """One RunPoint per ok closed-loop run of a variant in `keep` with every figure the model reads finite."""
    if runs.empty or any(c not in runs.columns for c in _RUN_COLUMNS):
        return []
    ok = runs[(runs["status"] == "ok") & (runs["load_kind"] == "concurrency") & runs["variant"].isin(list(keep))]
    out = []
    for r in ok.to_dict("records"):
        depth = depths.get(str(r["variant"]))
        rps = float(r["m_request_throughput_rps"] or math.nan)
        accept = float(r["m_accept_length"]) if depth is not None and r["m_accept_length"] is not None else 1.0
        figures = (float(r["m_concurrency_mean"] or math.nan), float(r["m_input_tok_s"] or math.nan) / rps,
                   float(r["m_output_tok_s"] or math.nan) / rps, float(r["m_tpot_ms_mean"] or math.nan) * accept,
                   float(r["m_ttft_ms_mean"] or math.nan), float(r["m_output_tok_s"] or math.nan))
        if not all(math.isfinite(x) and x > 0 for x in figures) or not math.isfinite(accept):
            continue
        b, n_in, n_out, step, ttft, tps = figures
        out.append(RunPoint(str(r["variant"]), depth, str(r["workload"]), float(r["load_value"]), b, n_in, n_out,
                            step, ttft, accept, tps))
    return out


def unmeasured_loads(measured: Sequence[float]) -> list[float]:
    """Powers of two from 1 to twice the largest measured concurrency that were not measured."""
    if not measured:
        return []
    top, out, c = 2 * max(measured), [], 1.0
    while c <= top:
        if all(abs(c - m) > 1e-9 for m in measured):
            out.append(c)
        c *= 2
    return out


@dataclass(frozen=True)
class PredictedDepth:
    """The depth the model names at one unmeasured load: `depth` 0 means serve the baseline (no speculation)."""

    workload: str
    load_value: float
    depth: int
    variant: str
    speedup: Speedup
    runner_up: str
    runner_up_speedup: Speedup
    margin_z: float
    """(best − runner-up) / their combined standard error; NaN when a fit has no residual degree of freedom."""
    extrapolated: bool
    """The load lies outside the measured concurrencies of the workload."""


@dataclass(frozen=True)
class SpeedupPrediction:
    """What `results recommend` adds below the measured answer, marked PREDICTED."""

    loo: LooSummary
    loo_errors: tuple[LooError, ...]
    predicted: tuple[PredictedDepth, ...]
    measure_next: Optional[PredictedDepth]
    why_none: str
    """Why nothing is predicted ('' when something is)."""


def _pick(base: VariantModel, models: Sequence[VariantModel], baseline: str, workload: str, load: float,
          lengths: tuple[float, float], extrapolated: bool) -> Optional[PredictedDepth]:
    """The depth with the largest predicted speedup at `load` (the baseline where none beats 1.0), beside the
    runner-up; None where no depth has a finite prediction (its fitted lines give no positive time there)."""
    depths = [(m.variant, m.depth or 0, predict_speedup(base, m, workload, load, *lengths)) for m in models]
    depths = [o for o in depths if math.isfinite(o[2].value)]
    if not depths:
        return None
    options = sorted([(baseline, 0, Speedup(1.0, 0.0))] + depths, key=lambda o: -o[2].value)
    (v, d, s), (v2, _, s2) = options[0], options[1]
    spread = math.sqrt(s.se ** 2 + s2.se ** 2)
    z = (s.value - s2.value) / spread if spread > 0 else math.nan
    return PredictedDepth(workload, load, d, v, s, v2, s2, z, extrapolated)


def _measured_text(points: Sequence[RunPoint]) -> str:
    """The concurrencies each variant ran at: 'c4' where all (two or more) ran at the same ones, else per variant."""
    per = {v: ", ".join(f"c{c:g}" for c in sorted({p.load_value for p in points if p.variant == v}))
           for v in dict.fromkeys(p.variant for p in points)}
    if len(per) > 1 and len(set(per.values())) == 1:
        return next(iter(per.values()))
    return "; ".join(f"{v} {c}" for v, c in per.items())


def _why_nothing(points: Sequence[RunPoint], baseline: str, models: Mapping[str, VariantModel]) -> str:
    """Why no depth can be predicted ('' when one can)."""
    if not any(p.variant == baseline for p in points) or not any(p.depth is not None for p in points):
        return ("the model needs ok closed-loop (concurrency) runs of the baseline and of a NEXTN variant "
                f"(measured: {_measured_text(points) or 'none'})")
    if baseline not in models or not any(m.depth is not None for m in models.values()):
        return ("the model needs runs at two or more concurrencies per variant, the baseline and a NEXTN depth "
                f"(measured: {_measured_text(points)})")
    return ""


def predict_depths(points: Sequence[RunPoint], baseline: str) -> SpeedupPrediction:
    """Fit, predict at every workload's unmeasured loads, and pick the load to measure next: where the named depth
    and its runner-up are closest in standard errors (else, without standard errors, the farthest extrapolation)."""
    errors = leave_one_out(points, baseline)
    loo = loo_summary(errors)
    models = fit_models(points)
    spec = [m for v, m in models.items() if v != baseline and m.depth is not None]
    why = _why_nothing(points, baseline, models)
    if why:
        return SpeedupPrediction(loo, tuple(errors), (), None, why)
    out: list[PredictedDepth] = []
    unpredictable = []
    for wl in dict.fromkeys(p.workload for p in points):
        mine = [p for p in points if p.workload == wl and p.variant == baseline]
        if not mine:
            continue
        measured = sorted({p.load_value for p in mine})
        lengths = workload_lengths(mine)
        for load in unmeasured_loads(measured):
            pick = _pick(models[baseline], spec, baseline, wl, load, lengths, not measured[0] <= load <= measured[-1])
            if pick is None:
                unpredictable.append(f"c{load:g}")
            else:
                out.append(pick)
    nxt = None
    if out:
        def doubt(p: PredictedDepth) -> tuple[float, float]:
            span = [q.load_value for q in points if q.workload == p.workload]
            far = min(abs(math.log2(p.load_value) - math.log2(m)) for m in span)
            return (p.margin_z if math.isfinite(p.margin_z) else math.inf, -far)
        nxt = min(out, key=doubt)
    why = ("" if out else f"no depth's fitted lines give a positive time at {', '.join(unpredictable)}"
           if unpredictable else "every load up to twice the largest measured concurrency was measured")
    return SpeedupPrediction(loo, tuple(errors), tuple(out), nxt, why)


def _x(s: Speedup) -> str:
    return f"{s.value:.2f}×" + (f" (s.e. {s.se:.2f})" if math.isfinite(s.se) else " (no standard error)")


def prediction_lines(pred: SpeedupPrediction, multi: bool) -> list[str]:
    """The PREDICTED block of `results recommend`: the model's leave-one-out error, one line per unmeasured load,
    the load to measure next."""
    loo = pred.loo
    if not pred.predicted and not loo.n:
        return [f"PREDICTED: nothing: {pred.why_none}"]
    if loo.n and loo.worst is not None:
        w = loo.worst
        head = (f"leave-one-out error over {loo.n} measured (point, variant) pairs: mean |predicted − measured| "
                f"{loo.mean_abs:.3f}× ({loo.mean_abs_pct:.1f} %), worst {w.error:+.3f}× ({w.workload} "
                f"c{w.load_value:g} {w.variant}: {w.predicted:.2f}× predicted, {w.measured:.2f}× measured)")
    else:
        head = "leave-one-out error: no measured point could be predicted (needs 3+ concurrencies per variant)"
    out = [f"PREDICTED speedup model (docs/speedup-model.md; never a verdict): {head}"]
    if not pred.predicted:
        out.append(f"PREDICTED: nothing: {pred.why_none}")
        return out
    for p in pred.predicted:
        at = f"{p.workload} c{p.load_value:g}" if multi else f"c{p.load_value:g}"
        tail = ", extrapolated" if p.extrapolated else ""
        if p.depth == 0:  # the baseline against itself is 1.00× by definition: name the fastest depth instead
            out.append(f"PREDICTED {at} → no speculation: every depth predicted slower, the fastest {p.runner_up} "
                       f"{_x(p.runner_up_speedup)} the baseline{tail}")
        else:
            out.append(f"PREDICTED {at} → depth {p.depth} ({p.variant}): {_x(p.speedup)} the baseline; next "
                       f"{p.runner_up} {_x(p.runner_up_speedup)}{tail}")
    n = pred.measure_next
    if n is not None:
        at = f"{n.workload} c{n.load_value:g}" if multi else f"c{n.load_value:g}"
        why = (f"{n.variant} and {n.runner_up} are {n.margin_z:.1f} standard errors apart there"
               if math.isfinite(n.margin_z) else "the farthest from any measured load")
        out.append(f"measure next: {at} (the least certain prediction: {why})")
    return out


def prediction_json(pred: SpeedupPrediction) -> JsonObject:
    """The PREDICTED block as JSON-ready values (NaN as None)."""
    def num(v: float) -> Optional[float]:
        return float(v) if math.isfinite(v) else None

    def depth(p: PredictedDepth) -> JsonObject:
        return {"workload": p.workload, "load_kind": "concurrency", "load_value": p.load_value, "depth": p.depth,
                "variant": p.variant, "speedup": num(p.speedup.value), "speedup_se": num(p.speedup.se),
                "runner_up": p.runner_up, "runner_up_speedup": num(p.runner_up_speedup.value),
                "margin_z": num(p.margin_z), "extrapolated": p.extrapolated}

    return {
        "loo": {"n": pred.loo.n, "mean_abs_error": num(pred.loo.mean_abs), "mean_abs_error_pct":
                num(pred.loo.mean_abs_pct),
                "errors": [{"workload": e.workload, "load_value": e.load_value, "variant": e.variant,
                            "predicted": num(e.predicted), "measured": num(e.measured)} for e in pred.loo_errors]},
        "depths": [depth(p) for p in pred.predicted],
        "measure_next": None if pred.measure_next is None else depth(pred.measure_next),
        "why_none": pred.why_none or None,
    }


def predict_from(runs: pd.DataFrame, baseline: Optional[str], depths: Mapping[str, Optional[int]],
                 gates: Mapping[str, tuple[bool, str]]) -> Optional[SpeedupPrediction]:
    """The prediction over an experiment's runs table: the baseline and the NEXTN variants that did not fail the
    correctness gate; None without a baseline."""
    if baseline is None:
        return None
    keep = [v for v, d in depths.items() if (v == baseline or d is not None) and gates.get(v, (True, ""))[0]]
    return predict_depths(points_from_runs(runs, depths, keep), baseline)


def predict_for(results: Results, baseline: Optional[str]) -> Optional[SpeedupPrediction]:
    """predict_from over `results`: its runs, the variants' depths and their correctness gates."""
    from cluster.analysis.recommend import gate_verdicts, run_depths

    runs = results.runs()
    return predict_from(runs, baseline, run_depths(runs), gate_verdicts(results.table("correctness")))
