"""Compare's marks on each load point: runs whose steady stretch is too short to count, and over-saturated points.

Both are read from the runs table (its steady_* columns, cluster/analysis/steady_state.py; its m_output_tok_s,
m_ttft_ms_p50 and m_concurrency_mean, judged by cluster/plan/saturation.py) and added to a table with one row per
(workload, load_kind, load_value, variant): `steady_short` (one line per ok run whose stretch is too short, "" when
none), `saturated` (the reason the point is over-saturated against the variant's next lower point, "" when not).
"""

from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from cluster.analysis.steady_state import shortfall
from cluster.kernel.load_shapes import load_shape
from cluster.plan.saturation import point_of, sweep_saturation

KEYS = ("workload", "load_kind", "load_value", "variant")

_FIGURES = ("m_output_tok_s", "m_ttft_ms_p50", "m_concurrency_mean")


def _num(x: object) -> Optional[float]:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _prefix(kind: str) -> str:
    """How a load of this kind is named in a reason (compare's short labels: c8, r2.5)."""
    return load_shape(kind).short_prefix()


def steady_short(ok_runs: pd.DataFrame) -> list[str]:
    """One line per ok run whose steady stretch is too short to count, in repeat order (a run recorded before the
    steady-state columns has none to judge: its steady figures are empty, not flagged)."""
    out: list[str] = []
    if ok_runs.empty:
        return out
    for row in ok_runs.sort_values("repeat").to_dict("records"):
        share = _num(row.get("steady_share"))
        n = _num(row.get("steady_requests"))
        why = None if share is None or n is None else shortfall(share, int(n))
        if why is not None:
            out.append(f"repeat {row['repeat']}: {why}")
    return out


def saturation_by_point(ok_runs: pd.DataFrame) -> dict[tuple[str, str, float, str], str]:
    """Point key -> why it is over-saturated against the next lower point of its variant, workload and load kind."""
    out: dict[tuple[str, str, float, str], str] = {}
    if ok_runs.empty:
        return out
    runs = ok_runs.copy()
    for col in _FIGURES:
        if col not in runs.columns:
            runs[col] = math.nan
    for (workload, kind, variant), sweep in runs.groupby(["workload", "load_kind", "variant"], sort=False):
        loads = sorted(set(float(v) for v in sweep["load_value"]))
        points = []
        for load in loads:
            at = sweep[sweep["load_value"] == load]
            points.append(point_of(load, *([_num(x) for x in at[c]] for c in _FIGURES)))
        for point, why in zip(points, sweep_saturation(points, _prefix(str(kind)))):
            if why is not None:
                out[(str(workload), str(kind), point.load, str(variant))] = why
    return out


def with_marks(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """`table` (one row per point key) with steady_short and saturated columns; a `warnings` column (lists), when the
    table has one, also gets each mark."""
    out = table.copy()
    if out.empty:
        out["steady_short"], out["saturated"] = [], []
        return out
    ok = runs[runs["status"] == "ok"] if "status" in runs.columns else runs
    sat = saturation_by_point(ok)
    shorts: list[list[str]] = []
    marks: list[str] = []
    for row in out.to_dict("records"):
        key = tuple(row[k] for k in KEYS)
        cell = ok[(ok["workload"] == key[0]) & (ok["load_kind"] == key[1]) & (ok["load_value"] == key[2])
                  & (ok["variant"] == key[3])]
        shorts.append(steady_short(cell))
        marks.append(sat.get((str(key[0]), str(key[1]), float(key[2]), str(key[3])), ""))
    out["steady_short"], out["saturated"] = ["; ".join(s) for s in shorts], marks
    if "warnings" in out.columns:
        out["warnings"] = [list(w) + [f"steady-state throughput not vouched for: {s}" for s in short]
                           + ([m] if m else []) for w, short, m in zip(out["warnings"], shorts, marks)]
    return out
