"""Compare by prompt category: per (workload, load point, variant, category) acceptance, TPOT, TTFT and per-user
throughput with the compare table's intervals, and the TPOT speedup over the baseline per category.

The definitions are the ones of cluster/analysis/request_metrics.py restricted to one category's requests of a
run: acceptance length Σ(output_tokens − 1)/Σ spec_verify_ct over them (ACCEPT_LENGTH_SQL, run level, one value
per run and category, bootstrapped over runs as the compare table does); TPOT and TTFT per request (hierarchical
bootstrap: runs, then requests); per-user tok/s = output_tokens / E2E_s per request (metrics.py's
per_user_tok_s_mean, hierarchical); the category's "tok/s share" = its requests' output tokens / the run's window
(a share of the window's throughput, run level: it follows the category's sampled request count, not its speed). Requests of a prompt source without categories are `-`.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pandas as pd

from cluster.kernel import stats
from cluster.analysis.comparison import CI_LEVEL, format_estimate, format_speedup, point_label
from cluster.analysis.query import POINT_KEYS, connect, resolve_baseline
from cluster.analysis.request_metrics import ACCEPT_LENGTH_SQL
from cluster.analysis.results import Results

NO_CATEGORY = "-"

BY_COLUMNS = ("category", "turn")
"""What the requests can be grouped by: the prompt category, or the turn of a multi-turn session."""

_GROUP_SQL = "coalesce(CAST({by} AS VARCHAR), '-') AS category"
_REQ_SQL = """
SELECT run_key, {group}, tpot_ms, ttft_ms, output_tokens / (e2e_ms / 1000.0) AS user_tok_s
FROM request_metrics WHERE run_key IN (SELECT unnest(?)) AND ok ORDER BY run_key, request_index
"""
_RUN_SQL = f"""
SELECT run_key, {{group}}, count(*) AS n_ok, sum(output_tokens) AS out_tokens,
       {ACCEPT_LENGTH_SQL} AS accept_length,
       sum(cached_tokens) FILTER (WHERE prompt_tokens IS NOT NULL)
         / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0) AS prefix_hit_rate
FROM request_metrics WHERE run_key IN (SELECT unnest(?)) AND ok GROUP BY ALL ORDER BY run_key, category
"""
# Both ordered: the bootstraps below draw by position, so an order DuckDB chose (hash order after GROUP BY) gave
# other intervals from one call to the next on the same dataset.

CATEGORY_METHOD = (
    "per category: acceptance length = Σ(tokens − 1)/Σ verify steps over the category's requests of each run, "
    "95% interval by bootstrap over repeats; TPOT, TTFT and per-user tok/s by hierarchical bootstrap (repeats, "
    "then requests); tok/s share = the category's output tokens over the run's window: its share of the window's "
    "throughput, which moves with how many of its prompts each repeat drew, so it is no speed of its own (per-user "
    "tok/s and TPOT are); speedup TPOT = baseline TPOT / variant TPOT for the same category, load point and "
    "workload.")


def _est(prefix: str, e: Optional[stats.Estimate]) -> dict[str, float]:
    if e is None:
        return {prefix: math.nan, f"{prefix}_lo": math.nan, f"{prefix}_hi": math.nan}
    return {prefix: e.point, f"{prefix}_lo": e.lo, f"{prefix}_hi": e.hi}


def compare_by_category(results: Results, baseline: Optional[str] = None, n_boot: int = 2000,
                        seed: int = 0, by: str = "category") -> pd.DataFrame:
    """One row per (workload, load point, variant, category) over ok runs; empty when nothing ran. `by`: "turn"
    groups by session turn instead (the column is then `turn`: 1, 2, ... or '-' outside sessions)."""
    if by not in BY_COLUMNS:
        raise ValueError(f"by must be one of {BY_COLUMNS}, got {by!r}")
    group = _GROUP_SQL.format(by=by)
    runs = results.runs()
    ok = runs[runs["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame()
    baseline = resolve_baseline(runs.sort_values("order_index", kind="stable"), baseline, results.experiment)
    con = connect(results)
    try:
        req = con.execute(_REQ_SQL.format(group=group), [ok["run_key"].tolist()]).df()
        per_run = con.execute(_RUN_SQL.format(group=group), [ok["run_key"].tolist()]).df()
    finally:
        con.close()
    per_run = per_run.merge(ok[["run_key", "duration_s"]], on="run_key")
    groups = {k: g for k, g in req.groupby(["run_key", "category"], sort=False)}
    keys = list(POINT_KEYS) + ["variant"]
    rows: list[dict[str, Any]] = []
    tpot_runs: dict[tuple[Any, ...], list[np.ndarray]] = {}
    tpot_reps: dict[tuple[Any, ...], list[int]] = {}
    vorder = {v: i for i, v in enumerate(dict.fromkeys(runs.sort_values("order_index")["variant"]))}
    cats = sorted(set(per_run["category"]))
    for i, (key, cell) in enumerate(ok.groupby(keys, sort=False)):
        for j, cat in enumerate(cats):
            rng = np.random.default_rng([seed, i, j])
            cell_runs = per_run[(per_run["run_key"].isin(cell["run_key"])) & (per_run["category"] == cat)]
            if cell_runs.empty:
                continue
            repeat_of = dict(zip(cell["run_key"], cell["repeat"]))
            present = [k for k in cell_runs["run_key"] if (k, cat) in groups]
            row: dict[str, Any] = dict(zip(keys, key))
            row.update(category=cat, is_baseline=key[-1] == baseline, n_runs=len(cell_runs),
                       n_requests=int(cell_runs["n_ok"].sum()))
            for name, col, stat in (("tpot_ms_mean", "tpot_ms", "mean"), ("ttft_ms_p50", "ttft_ms", "p50"),
                                    ("per_user_tok_s_mean", "user_tok_s", "mean")):
                pairs = [(int(repeat_of[k]), a[np.isfinite(a)]) for k in present
                         for a in [groups[(k, cat)][col].to_numpy(np.float64, na_value=np.nan)]]
                data = [a for _, a in pairs if a.size]
                row.update(_est(name, stats.hierarchical_bootstrap(data, stat, n_boot, rng=rng, level=CI_LEVEL)
                                if data else None))
                if name == "tpot_ms_mean":
                    tpot_runs[tuple(key) + (cat,)] = data
                    tpot_reps[tuple(key) + (cat,)] = [r for r, a in pairs if a.size]
            acc = pd.to_numeric(cell_runs["accept_length"], errors="coerce").to_numpy(np.float64)
            acc = acc[np.isfinite(acc)]
            row.update(_est("accept_length", stats.run_level_bootstrap(acc, "mean", n_boot, rng=rng, level=CI_LEVEL)
                            if acc.size else None))
            share = (pd.to_numeric(cell_runs["out_tokens"]) / pd.to_numeric(cell_runs["duration_s"])).to_numpy(
                np.float64)
            share = share[np.isfinite(share)]
            row.update(_est("output_tok_s", stats.run_level_bootstrap(share, "mean", n_boot, rng=rng, level=CI_LEVEL)
                            if share.size else None))
            hit = pd.to_numeric(cell_runs["prefix_hit_rate"], errors="coerce").to_numpy(np.float64)
            hit = hit[np.isfinite(hit)]
            row.update(_est("prefix_hit_rate", stats.run_level_bootstrap(hit, "mean", n_boot, rng=rng,
                                                                         level=CI_LEVEL) if hit.size else None))
            rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    sp: list[tuple[float, float, float, str]] = []
    for idx, r in out.iterrows():
        k = tuple(r[c] for c in keys) + (r["category"],)
        bk = k[:-2] + (baseline, r["category"])
        if r["is_baseline"]:
            sp.append((math.nan, math.nan, math.nan, "baseline"))
            continue
        if baseline is None or bk not in tpot_runs or not tpot_runs[bk] or not tpot_runs[k]:
            sp.append((math.nan, math.nan, math.nan, ""))
            continue
        b, v, br, vr = tpot_runs[bk], tpot_runs[k], tpot_reps[bk], tpot_reps[k]
        paired = bool(br) and sorted(br) == sorted(vr) and len(set(br)) == len(br) == len(b) == len(v)
        if paired:
            b, v = [b[i] for i in np.argsort(br)], [v[i] for i in np.argsort(vr)]
        try:
            e = stats.ratio_estimate(b, v, "mean", n_boot, higher_is_better=False,
                                     rng=np.random.default_rng([seed, 7_000_003, int(idx)]), level=CI_LEVEL,
                                     paired=paired)
        except ValueError:
            sp.append((math.nan, math.nan, math.nan, ""))
            continue
        sp.append((e.point, e.lo, e.hi, e.verdict))
    out["speedup_tpot"], out["speedup_tpot_lo"], out["speedup_tpot_hi"], out["speedup_tpot_verdict"] = zip(*sp)
    out["_v"] = out["variant"].map(vorder)
    # turns sort as numbers (2 before 10), '-' last
    out["_g"] = [(1, 0, g) if g == NO_CATEGORY else (0, int(g), "") if by == "turn" else (0, 0, g)
                 for g in out["category"]]
    out = out.sort_values(list(POINT_KEYS) + ["_g", "_v"], kind="stable").drop(columns=["_v", "_g"])
    out = out.reset_index(drop=True).rename(columns={"category": by})
    out.attrs["ci_method"] = CATEGORY_METHOD if by == "category" else CATEGORY_METHOD.replace(
        "per category", "per session turn").replace("category's", "turn's").replace("same category", "same turn")
    out.attrs["by"] = by
    return out


def categorised(df: pd.DataFrame, by: str = "category") -> pd.DataFrame:
    """The rows of compare_by_category whose workload's requests carry a `by` value (empty when none do): a
    workload without any would only repeat the plain comparison table."""
    if df.empty:
        return df
    with_cats = set(df.loc[df[by] != NO_CATEGORY, "workload"])
    return df[df["workload"].isin(with_cats)].reset_index(drop=True)


def category_view(df: pd.DataFrame) -> pd.DataFrame:
    """compare_by_category as display strings: 'estimate [lo, hi]'."""
    by = str(df.attrs.get("by", "category"))
    out = pd.DataFrame({
        "workload": df["workload"],
        "load": [point_label(k, v) for k, v in zip(df["load_kind"], df["load_value"])],
        # a turn reads as one where the key columns fold into a row's title ("concurrency 4 · turn 3")
        by: [f"turn {g}" if by == "turn" and g != NO_CATEGORY else g for g in df[by]],
        "variant": [f"{v}{'*' if b else ''}" for v, b in zip(df["variant"], df["is_baseline"])],
        "runs/req": [f"{a}/{b}" for a, b in zip(df["n_runs"], df["n_requests"])],
        "accept length": [format_estimate(*t, digits=2) for t in
                          zip(df["accept_length"], df["accept_length_lo"], df["accept_length_hi"])],
        "TPOT mean ms": [format_estimate(*t, digits=2) for t in
                         zip(df["tpot_ms_mean"], df["tpot_ms_mean_lo"], df["tpot_ms_mean_hi"])],
        "TTFT p50 ms": [format_estimate(*t, digits=2) for t in
                        zip(df["ttft_ms_p50"], df["ttft_ms_p50_lo"], df["ttft_ms_p50_hi"])],
        "per-user tok/s": [format_estimate(*t) for t in zip(df["per_user_tok_s_mean"], df["per_user_tok_s_mean_lo"],
                                                             df["per_user_tok_s_mean_hi"])],
        # not "output tok/s": a category's tokens over the shared window scale with its sampled request count
        # (the demo's chat rows: 3, 1, 1 in three repeats gave 6.5 [1.7, 31.6] beside code's 11.7 [11.7, 11.8])
        "tok/s share": [format_estimate(*t) for t in zip(df["output_tok_s"], df["output_tok_s_lo"],
                                                          df["output_tok_s_hi"])],

        "speedup TPOT": [format_speedup(*t) for t in zip(df["speedup_tpot"], df["speedup_tpot_lo"],
                                                         df["speedup_tpot_hi"], df["speedup_tpot_verdict"])],
    })
    if (pd.to_numeric(df["prefix_hit_rate"], errors="coerce").fillna(0) > 0).any():
        # shown where the prefix cache served something (a session's later turns): 0.0 everywhere else says nothing
        out.insert(len(out.columns) - 1, "prefix hit %", [format_estimate(100 * a, 100 * b, 100 * c, digits=1)
                                                          for a, b, c in zip(df["prefix_hit_rate"],
                                                                             df["prefix_hit_rate_lo"],
                                                                             df["prefix_hit_rate_hi"])])
    return out
