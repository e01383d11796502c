"""How `results recommend` and the report show recommendations: a table, the depth schedule, the notes, JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any, Optional

import pandas as pd

from cluster.analysis.recommend import Recommendation, Recommendations, ScheduleStep, load_text


def _speedup_text(r: Recommendation) -> str:
    if r.serve is None or not math.isfinite(r.speedup):
        return "-"
    if not (math.isfinite(r.speedup_lo) and math.isfinite(r.speedup_hi)):
        return "baseline" if r.speedup == 1.0 else f"{r.speedup:.2f}×"
    return f"{r.speedup:.2f}× [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]"


def _figure(v: float, digits: int) -> str:
    return f"{v:.{digits}f}" if math.isfinite(v) else "-"


def recommend_view(rec: Recommendations) -> pd.DataFrame:
    """One row per load point: what to serve (or 'nothing chosen'), the speedup with its 95% interval, the GPUs
    it holds with its throughput and that per GPU, the gate, whether the figures are vouched for, which throughput
    was compared, and why."""
    return pd.DataFrame({
        "workload": [r.workload for r in rec.points],
        "load": [load_text(r.load_kind, r.load_value) for r in rec.points],
        "serve": [r.serve if r.serve is not None else "nothing chosen" for r in rec.points],
        "vs baseline [95% CI]": [_speedup_text(r) for r in rec.points],
        "GPUs": ["-" if r.gpus is None else str(r.gpus) for r in rec.points],
        "tok/s": [_figure(r.tok_s, 1) for r in rec.points],
        "tok/s/GPU": [_figure(r.tok_s_per_gpu, 2) for r in rec.points],
        "gate": [r.gate for r in rec.points],
        "vouched": ["yes" if r.vouched else "no" for r in rec.points],
        "throughput": [r.metric.replace(" output tok/s", "") for r in rec.points],
        "why": [r.because for r in rec.points],
    })


def _step_text(s: ScheduleStep) -> str:
    at = load_text(s.load_kind, s.load_value)
    if s.depth is None:
        return f"{at} → undecided"
    if s.depth == 0:
        return f"{at} → no speculation"
    return f"{at} → depth {s.depth} ({s.variant})"


def schedule_lines(schedule: tuple[ScheduleStep, ...]) -> list[str]:
    """'chat (concurrency): c1 → depth 2 (nextn-2), c8 → depth 1 (nextn-1), c64 → no speculation', one per
    workload and load kind."""
    groups: dict[tuple[str, str], list[ScheduleStep]] = {}
    for s in schedule:
        groups.setdefault((s.workload, s.load_kind), []).append(s)
    return [f"{wl} ({kind}): " + ", ".join(_step_text(s) for s in steps) for (wl, kind), steps in groups.items()]


def note_lines(rec: Recommendations) -> list[str]:
    """Each point's notes (ties resolved, depths that lose to the baseline, variants left out), prefixed by the point."""
    multi = len({r.workload for r in rec.points}) > 1
    return [f"{r.workload + ' ' if multi else ''}{load_text(r.load_kind, r.load_value)}: {n}"
            for r in rec.points for n in r.notes]


def _json_value(v: Any) -> Optional[Any]:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def recommend_json(rec: Recommendations) -> str:
    """The recommendations as JSON: {baseline, points: [...], schedule: [...], ci_method, adaptive_vs_fixed}; NaN as
    null."""
    from cluster.analysis.adaptive_vs_fixed import recommendation_lines

    def clean(d: dict[str, Any]) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else _json_value(v) for k, v in d.items()}

    doc = {"baseline": rec.baseline, "points": [clean(asdict(r)) for r in rec.points],
           "schedule": [clean(asdict(s)) for s in rec.schedule], "ci_method": rec.ci_method,
           "adaptive_vs_fixed": [clean(asdict(a)) for a in recommendation_lines(rec)]}
    return json.dumps(doc, indent=2)
