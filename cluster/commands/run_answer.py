"""What `sglbench run` ends with: the answer `results recommend` gives, one line per load point, and, where standard
output is not a terminal, the per-category (or per-turn) detail as a few summary lines naming the command that
prints it in full."""

from __future__ import annotations

import math

import pandas as pd

from cluster.analysis.recommend import RECOMMEND_N_BOOT, RECOMMEND_SEED, Recommendations, load_text, recommend_results
from cluster.analysis.results import Results
from cluster.commands.result_tables import clear_errors, console


def answer_lines(rec: Recommendations, experiment: str, root: str) -> list[str]:
    """A header naming `results recommend`, then one line per load point: what to serve and why (or why nothing)."""
    if not rec.points:
        return []
    multi = len({r.workload for r in rec.points}) > 1
    out = [f"answer (sglbench results recommend {experiment} --root {root}: the evidence and the depth schedule):"]
    for r in rec.points:
        where = f"{r.workload} {load_text(r.load_kind, r.load_value)}" if multi else load_text(r.load_kind,
                                                                                              r.load_value)
        serve = f"serve {r.serve}" if r.serve is not None else "nothing chosen"
        out.append(f"answer {where}: {serve}: {r.because}")
    from cluster.analysis.adaptive_vs_fixed import adaptive_line_text, recommendation_lines

    return out + [f"answer adaptive vs fixed {adaptive_line_text(a, multi)}" for a in recommendation_lines(rec)]


def print_run_answer(results: Results) -> None:
    """Decide over `results` as `results recommend` does by default (the same resamples and seed, so a near tie
    names the same variant in both) and print the answer lines."""
    with clear_errors():
        rec = recommend_results(results, n_boot=RECOMMEND_N_BOOT, seed=RECOMMEND_SEED)
    for line in answer_lines(rec, results.experiment, results.root):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def _range_text(rows: pd.DataFrame, by: str) -> str:
    acc = pd.to_numeric(rows["accept_length"], errors="coerce")
    lo, hi = rows.loc[acc.idxmin()], rows.loc[acc.idxmax()]

    def at(r: pd.Series) -> str:
        return f"{r[by]}, {load_text(str(r['load_kind']), float(r['load_value']))}"

    return f"accept length {float(lo['accept_length']):.2f} ({at(lo)}) to {float(hi['accept_length']):.2f} ({at(hi)})"


def category_summary_lines(df: pd.DataFrame, by: str, experiment: str, root: str) -> list[str]:
    """compare_by_category's rows (with categories) as a few lines: how many rows, and per speculative variant the
    lowest and highest acceptance length over its (category, load point) cells; then the command for the table."""
    if df.empty:
        return []
    groups = sorted({str(g) for g in df[by]})
    n_points = df[["workload", "load_kind", "load_value"]].drop_duplicates().shape[0]
    head = (f"by {by}: {len(df)} rows ({len(groups)} {by} value(s) x {df['variant'].nunique()} variant(s) x "
            f"{n_points} point(s)), summarised because the output is not a terminal; the table: "
            f"sglbench results compare {experiment} --by {by} --root {root}")
    out = [head]
    for variant, rows in df.groupby("variant", sort=False):
        acc = pd.to_numeric(rows["accept_length"], errors="coerce")
        if acc.notna().any() and all(math.isfinite(a) for a in acc.dropna()):
            out.append(f"by {by} {variant}: {_range_text(rows[acc.notna()], by)}")
    return out


def print_category_summary(results: Results, by: str, n_boot: int = 1000) -> None:
    """The summary lines of compare_by_category over `results` (nothing when no request carries a `by` value)."""
    from cluster.analysis.categories import categorised, compare_by_category

    with clear_errors():
        df = categorised(compare_by_category(results, None, n_boot=n_boot, by=by), by)
    for line in category_summary_lines(df, by, results.experiment, results.root):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
