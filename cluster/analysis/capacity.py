"""Capacity at an SLO per variant: the highest load each repeat's search found meeting the SLO (cluster/plan/
capacity.py's rules over the recorded runs), with an interval across repeats and a verdict against the baseline.

Every ok run of the searched kind inside the search's range is a probe (a fixed load point there counts as one).
The answer of a repeat is the highest load that met the target below the lowest that missed, closed to the stated
resolution (`found`); `at_max` (it still met it at max, or at the server's own concurrency cap, past which the
server only queues) and `below_min` are bounds, not values; a repeat whose bracket is still open is `incomplete`
(a probe was invalid or not run), and its invalid probes are named. The interval and the speedup need every repeat
of the variant `found`: a bound is never averaged in as if it were a value.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

import numpy as np
import pandas as pd

from cluster.kernel import stats
from cluster.analysis.comparison import CI_LEVEL, format_estimate, format_speedup
from cluster.analysis.metric_catalog import stored
from cluster.analysis.query import resolve_baseline
from cluster.analysis.results import Results
from cluster.analysis.run_row import reported_cap
from cluster.plan.capacity import CapacityAnswer, CapacitySearch, Probe, answer, clamped, from_spec
from cluster.plan.saturation import point_of
from cluster.config.load import SearchSpec

CAPACITY_METHOD = (
    "capacity at SLO = per repeat, the highest probed load whose SLO attainment (share of all requests ok and "
    "within every slo: limit) met the target, below the lowest probed load that missed it, bracketed to the "
    "resolution; 95% interval by bootstrap over repeats; speedup = variant capacity / baseline capacity (paired by "
    "repeat), a verdict only when the interval excludes 1 after Holm correction across the table. A bound (at max, "
    "at the server's concurrency cap, below min) or an incomplete search gives no value, no interval and no verdict.")


def search_of(results: Results) -> Optional[SearchSpec]:
    """The experiment's `load.search`, from its recorded spec (None: the experiment searched nothing); a stored
    search that does not validate is read_stored_spec's StoreError naming experiment.json."""
    return results.stored_spec(SearchSpec, "load", "search")


def _repeat_answer(search: CapacitySearch, g: pd.DataFrame) -> tuple[CapacityAnswer, list[str]]:
    """The answer of one repeat's runs and the loads inside the range whose runs were not ok."""
    inside = g[(g["load_value"] >= search.min_load) & (g["load_value"] <= search.max_load)]
    attained = stored("slo_attainment")
    ok = inside[(inside["status"] == "ok") & inside[attained].notna()]
    probes = [Probe(float(x), float(a), point_of(float(x), [t], [f], [c])) for x, a, t, f, c in  # + figures: saturation
              zip(ok["load_value"], ok[attained], ok[stored("output_tok_s")], ok[stored("ttft_ms_p50")],
                  ok[stored("concurrency_mean")])]
    bad = [f"{float(x):g} {s}" for x, s in zip(inside["load_value"], inside["status"]) if s != "ok"]
    return answer(search, probes), bad


def capacity_table(results: Results, baseline: Optional[str] = None, n_boot: int = 2000,
                   seed: int = 0) -> pd.DataFrame:
    """One row per (workload, variant) of an experiment with a capacity search; empty without one."""
    spec = search_of(results)
    if spec is None:
        return pd.DataFrame()
    runs = results.runs()
    if runs.empty:
        return pd.DataFrame()
    baseline = resolve_baseline(runs.sort_values("order_index", kind="stable"), baseline, results.experiment)
    kind = "concurrency" if spec.over == "concurrency" else "rate"
    runs = runs[runs["load_kind"] == kind]
    rows: list[dict[str, Any]] = []
    values: dict[tuple[str, str], dict[int, float]] = {}
    n_rep: dict[tuple[str, str], int] = {}
    vorder = {v: i for i, v in enumerate(dict.fromkeys(runs.sort_values("order_index")["variant"]))}
    for i, ((workload, variant), g) in enumerate(runs.groupby(["workload", "variant"], sort=False)):
        cap = reported_cap(g["provenance_json"]) if spec.over == "concurrency" else None
        search = clamped(from_spec(spec), cap)
        by_repeat: dict[int, tuple[CapacityAnswer, list[str]]] = {
            int(r): _repeat_answer(search, gr) for r, gr in g.groupby("repeat")}
        statuses = [a.status if a.status != "searching" else "incomplete" for a, _ in by_repeat.values()]
        found = {r: float(a.value) for r, (a, _) in by_repeat.items() if a.status == "found" and a.value is not None}
        values[(workload, variant)] = found
        n_rep[(workload, variant)] = len(by_repeat)
        row: dict[str, Any] = {"workload": workload, "variant": variant, "is_baseline": variant == baseline,
                               "target": spec.slo_attainment, "over": spec.over, "resolution": spec.step(),
                               "max_probed": search.max_load,
                               "capped_at_server": search.max_load < spec.max, "n_repeats": len(by_repeat),
                               "n_found": len(found), "statuses": ",".join(statuses),
                               "per_repeat": json.dumps({str(r): (a.value, a.lowest_miss, s) for (r, (a, _)), s
                                                         in zip(by_repeat.items(), statuses)}),
                               "not_ok_probes": "; ".join(f"repeat {r}: {', '.join(b)}"
                                                          for r, (_, b) in by_repeat.items() if b),
                               "saturated": "; ".join(dict.fromkeys(a.saturated for a, _ in by_repeat.values()
                                                                    if a.saturated)),
                               "saturated_at": min((a.value for a, _ in by_repeat.values()
                                                    if a.saturated and a.value is not None), default=math.nan)}
        est = None
        if found and len(found) == len(by_repeat):
            est = stats.run_level_bootstrap(list(found.values()), "mean", n_boot,
                                            rng=np.random.default_rng([seed, i]), level=CI_LEVEL)
        row.update(capacity=est.point if est else math.nan, capacity_lo=est.lo if est else math.nan,
                   capacity_hi=est.hi if est else math.nan)
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    sp: list[tuple[float, float, float, str]] = []
    family: dict[int, stats.RatioEstimate] = {}
    for idx, (_, r) in enumerate(out.iterrows()):
        if r["is_baseline"]:
            sp.append((math.nan, math.nan, math.nan, "baseline"))
            continue
        bkey, vkey = (r["workload"], baseline or ""), (r["workload"], r["variant"])
        b, v = values.get(bkey, {}), values[vkey]
        # a speedup only between answers found in every repeat of both sides
        if baseline is None or not b or not v or len(b) != n_rep.get(bkey) or len(v) != n_rep[vkey]:
            sp.append((math.nan, math.nan, math.nan, ""))
            continue
        common = sorted(set(b) & set(v))
        paired = len(common) == len(b) == len(v)
        a_runs = [[b[k]] for k in (common if paired else sorted(b))]
        b_runs = [[v[k]] for k in (common if paired else sorted(v))]
        e = stats.ratio_estimate(a_runs, b_runs, "mean", n_boot, higher_is_better=True,
                                 rng=np.random.default_rng([seed, 9_000_011, idx]), level=CI_LEVEL,
                                 paired=paired)
        family[idx] = e
        sp.append((e.point, e.lo, e.hi, e.verdict))
    # the compare table's rule: verdicts after Holm correction across the table's comparisons
    for idx, e in zip(family, stats.adjust_family(list(family.values()), CI_LEVEL)):
        sp[idx] = (e.point, e.lo, e.hi, e.verdict)
    out["speedup"], out["speedup_lo"], out["speedup_hi"], out["speedup_verdict"] = zip(*sp)
    out["_v"] = out["variant"].map(vorder)
    out = out.sort_values(["workload", "_v"], kind="stable").drop(columns="_v").reset_index(drop=True)
    out.attrs["ci_method"] = CAPACITY_METHOD
    return out


def _answer_text(r: Any) -> str:
    unit = "" if r.over == "concurrency" else " req/s"
    if r.n_found == r.n_repeats and math.isfinite(r.capacity):
        digits = 1 if r.over == "concurrency" else 2
        return format_estimate(r.capacity, r.capacity_lo, r.capacity_hi, digits=digits) + unit
    st = r.statuses.split(",")
    n = len(st)
    if all(s == "at_max" for s in st) and r.saturated:  # the search stopped at a saturated probe
        return f">= {r.saturated_at:g}{unit} (met where the server saturated, in {n}/{n} repeats: {r.saturated})"
    if all(s == "at_max" for s in st):
        where = "the server's concurrency cap" if r.capped_at_server else "max"
        return f">= {r.max_probed:g}{unit} (met at {where} in {n}/{n} repeats)"
    if all(s == "below_min" for s in st):
        return f"< min (missed at the lowest probe in {n}/{n} repeats)"
    counts = ", ".join(f"{st.count(s)} {s}" for s in dict.fromkeys(st))
    return f"no value ({counts} of {n} repeats)"


def capacity_view(df: pd.DataFrame) -> pd.DataFrame:
    """capacity_table as display strings."""
    return pd.DataFrame({
        "workload": df["workload"],
        "variant": [f"{v}{'*' if b else ''}" for v, b in zip(df["variant"], df["is_baseline"])],
        f"capacity at SLO ({df['over'].iloc[0] if len(df) else ''})": [_answer_text(r) for r in
                                                                      df.itertuples(index=False)],
        "found": [f"{a}/{b}" for a, b in zip(df["n_found"], df["n_repeats"])],
        # a capacity is higher or lower, not faster or slower
        "vs baseline": [format_speedup(*t).replace(" faster", " higher").replace(" slower", " lower") for t in
                        zip(df["speedup"], df["speedup_lo"], df["speedup_hi"], df["speedup_verdict"])],
        "probes not ok": [x or "-" for x in df["not_ok_probes"]],
    })
