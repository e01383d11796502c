"""Two experiments (or two dataset roots of one) compared run for run: matched points, intervals, verdicts, regressions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cluster.kernel import stats
from cluster.analysis.metric_catalog import metric
from cluster.analysis.comparison import CI_LEVEL, ci_metrics, metric_runs, request_arrays, short_point_label
from cluster.analysis.results import Results
from cluster.errors import UserError

MATCH_KEYS = ("workload", "input_tokens", "output_tokens", "load_kind", "load_value", "variant")
"""A point of A and one of B are the same point when all of these agree: a workload of the same name whose shape
changed is a different workload, and is listed as unmatched instead of compared."""

CROSS_METRICS: tuple[tuple[str, bool], ...] = tuple((name, metric(name).better != "lower")
                                                    for name in ("output_tok_s", "tpot_ms_mean", "ttft_ms_p99"))
"""(metric with an interval, higher is better by its declaration): each ratio is written so that > 1 means NEW is
better."""


def _per_metric(side: Results, runs: pd.DataFrame) -> dict[tuple[Any, ...], dict[str, list[np.ndarray]]]:
    ok = runs[runs["status"] == "ok"]
    arrays = request_arrays(side, ok["run_key"].tolist())
    metrics = {m.name: m for m in ci_metrics()}
    return {tuple(key): {name: metric_runs(metrics[name], cell, arrays, True) for name, _ in CROSS_METRICS}
            for key, cell in ok.groupby(list(MATCH_KEYS), sort=False)}


def _stat(name: str) -> str:
    """The statistic a metric's interval estimates (metric_catalog.Interval.stat)."""
    interval = metric(name).interval
    if interval is None:
        raise ValueError(f"metric {name!r} is declared without an interval")
    return interval.stat


def _sha(runs: pd.DataFrame) -> str:
    shas = sorted({str(s) for s in runs.get("git_sha", pd.Series(dtype=str)).dropna() if s})
    return ",".join(s[:10] for s in shas) or "unknown"


def compare_experiments(base: Results, new: Results, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """One row per point (MATCH_KEYS) that both experiments ran with ok repeats: each CROSS_METRICS metric on both
    sides, and NEW over BASE as a ratio (> 1 = NEW better) with a 95% interval from independent hierarchical
    bootstraps (the two experiments' repeats are not paired), Holm-corrected across the whole table, and a verdict.
    attrs: 'unmatched' (points only one side has, as text), 'base_sha' and 'new_sha'."""
    runs_a, runs_b = base.runs(), new.runs()
    cells_a, cells_b = _per_metric(base, runs_a), _per_metric(new, runs_b)
    matched = [k for k in cells_a if k in cells_b]
    if not matched:
        raise UserError(f"{base.label()} and {new.label()} share no point with ok runs (same workload name and "
                        f"shape, load point and variant)", field="EXP_A EXP_B",
                        expected="two experiments that ran a common workload, load point and variant")
    rows: list[dict[str, Any]] = []
    ests: list[tuple[int, str, stats.RatioEstimate]] = []
    for i, key in enumerate(matched):
        row: dict[str, Any] = dict(zip(MATCH_KEYS, key))
        for j, (name, higher) in enumerate(CROSS_METRICS):
            stat = _stat(name)
            a, b = cells_a[key][name], cells_b[key][name]
            rng = np.random.default_rng([seed, i, j])
            for side, data in (("base", a), ("new", b)):
                est = stats.hierarchical_bootstrap(data, stat, n_boot, rng=rng, level=CI_LEVEL) if data else None
                row.update({f"{name}_{side}": est.point if est else math.nan,
                            f"{name}_{side}_lo": est.lo if est else math.nan,
                            f"{name}_{side}_hi": est.hi if est else math.nan})
            row[f"{name}_repeats"] = f"{len(a)}/{len(b)}"
            if a and b:
                try:
                    ests.append((i, name, stats.ratio_estimate(a, b, stat, n_boot, higher_is_better=higher,
                                                               rng=rng, level=CI_LEVEL)))
                except ValueError:  # a non-positive statistic: no ratio
                    pass
        rows.append(row)
    adjusted = stats.adjust_family([e for _, _, e in ests], CI_LEVEL)
    for (i, name, _), e in zip(ests, adjusted):
        rows[i].update({f"{name}_ratio": e.point, f"{name}_ratio_lo": e.lo, f"{name}_ratio_hi": e.hi,
                        f"{name}_verdict": e.verdict})
    out = pd.DataFrame(rows)
    for name, _ in CROSS_METRICS:
        for col in (f"{name}_ratio", f"{name}_ratio_lo", f"{name}_ratio_hi"):
            out[col] = out[col] if col in out.columns else math.nan
        out[f"{name}_verdict"] = out[f"{name}_verdict"].fillna("") if f"{name}_verdict" in out.columns else ""
    only_a = sorted(set(cells_a) - set(cells_b), key=str)
    only_b = sorted(set(cells_b) - set(cells_a), key=str)
    out.attrs["unmatched"] = ([f"only in {base.label()}: {_key_text(k)}" for k in only_a]
                              + [f"only in {new.label()}: {_key_text(k)}" for k in only_b])
    out.attrs["base_sha"], out.attrs["new_sha"] = _sha(runs_a), _sha(runs_b)
    return out


def _key_text(key: tuple[Any, ...]) -> str:
    d = dict(zip(MATCH_KEYS, key))
    load = short_point_label(d["load_kind"], d["load_value"])
    return f"{d['workload']} ({d['input_tokens']}→{d['output_tokens']} tokens) {load} {d['variant']}"


@dataclass(frozen=True)
class Regression:
    """A significant slowdown of NEW beyond the allowed fraction on one metric at one point."""

    point: str
    metric: str
    ratio: float
    lo: float
    hi: float


def regressions(table: pd.DataFrame, max_slowdown: float) -> list[Regression]:
    """Every (point, metric) whose verdict is 'slower' (significant after Holm) and whose ratio (> 1 = NEW better)
    is below 1 − max_slowdown: 'significant' keeps noise from failing a gate, 'beyond the threshold' keeps a real
    but allowed 1 % drift from failing it."""
    if not 0 <= max_slowdown < 1:
        raise UserError(f"--max-slowdown {max_slowdown:g} must be a fraction in [0, 1) such as 5% or 0.05",
                        field="--max-slowdown", expected="a percentage below 100%, e.g. 5%")
    out = []
    for r in table.to_dict("records"):
        for name, _ in CROSS_METRICS:
            ratio = r.get(f"{name}_ratio", math.nan)
            if r.get(f"{name}_verdict") == stats.VERDICT_SLOWER and ratio < 1 - max_slowdown:
                out.append(Regression(_key_text(tuple(r[k] for k in MATCH_KEYS)), name, float(ratio),
                                      float(r[f"{name}_ratio_lo"]), float(r[f"{name}_ratio_hi"])))
    return out


def undecided(table: pd.DataFrame) -> int:
    """(point, metric) cells with no verdict (a side with fewer than two ok repeats)."""
    return int(sum((table[f"{name}_verdict"].isin(["", stats.VERDICT_INSUFFICIENT])).sum() for name, _ in CROSS_METRICS))


def parse_fraction(text: str) -> float:
    """'5%' → 0.05, '0.05' → 0.05; anything else is a UserError naming --max-slowdown."""
    t = text.strip()
    try:
        return float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UserError(f"--max-slowdown {text!r} is not a percentage", field="--max-slowdown",
                        expected="a percentage such as 5% (or a fraction such as 0.05)") from None
