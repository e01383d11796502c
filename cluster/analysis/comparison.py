"""The compare table with confidence intervals: per load point and variant, estimates, speedups and warnings."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Optional

import numpy as np
import pandas as pd

from cluster.engines.registry import is_simulated
from cluster.engines.sim_launch import SIM_KNOBS_KEY
from cluster.kernel.load_shapes import load_shape
from cluster.input_files import JsonObject, JsonValue
from cluster.kernel import stats
from cluster.analysis.metric_catalog import Metric, declared, with_intervals, with_speedups
from cluster.analysis.per_gpu import cell_facts, with_gpus_notes, with_per_gpu
from cluster.analysis.point_marks import with_marks
from cluster.analysis.query import POINT_KEYS, connect, resolve_baseline
from cluster.analysis.results import Results, ServerArgsRow

if TYPE_CHECKING:
    from cluster.kernel.runs import ResolvedVariant

MIN_DURATION_S = 10.0
"""A measured window shorter than this is flagged: warm-up transients and scheduling noise dominate it."""

CI_LEVEL = 0.95

CLOCK_MISMATCH_REL = 0.03
"""Compare warns when a variant's SM clocks (mean or 10th percentile over its ok runs' busy samples: idle ones are
left out, cluster/analysis/gpu_metrics.py busy_samples) differ from the baseline's at the same load point by more than
this share: the A/B then measured clocks as well as the variants.
3% is above the run-to-run clock spread of an unthrottled datacenter GPU at a fixed load (boost bins are ~15 MHz
of ~2 GHz) and below the drop of a power-capped or thermally throttled one (typically 10-40%)."""


def ci_metrics() -> tuple[Metric, ...]:
    """The metrics compare estimates an interval for (every declared metric with an Interval), in draw order.
    Run-level ones are bootstrapped over one value per run; request-level ones over runs, then requests."""
    return with_intervals()


def speedups() -> tuple[tuple[str, str, bool], ...]:
    """(column, metric, higher is better) of every declared speedup, in draw order: a speedup > 1 always means the
    variant is better than the baseline. Each column is its own Holm family; speedup_steady_tps is what `results
    recommend` prefers (NaN for runs recorded without a steady stretch)."""
    return tuple((m.speedup.column, m.name, m.better != "lower") for m in with_speedups() if m.speedup is not None)


CI_METHOD = (
    "95% intervals: hierarchical bootstrap (resample repeats, then requests within each drawn repeat) for "
    "request-level statistics (TTFT, TPOT, E2E), bootstrap over repeats of the per-run value for run-level ones "
    "(output tok/s, acceptance length, ITL medians, tokens per chunk, per-user tok/s, goodput), "
    "percentile intervals widened by a Student-t factor for few repeats. Speedups: ratio of the variant's to the "
    "baseline's statistic at the same workload and load point, paired by repeat when both have the same repeats, "
    "on the log scale; verdicts after Holm correction across the table; an interval that includes 1.0 is "
    "'no significant difference'."
)

_REQ_SQL = """
SELECT run_key, ttft_ms, e2e_ms, tpot_ms, accept_length
FROM request_metrics
WHERE run_key IN (SELECT unnest(?)) AND ok
"""


def request_arrays(results: Results, run_keys: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Per run key: ok requests' ttft_ms, e2e_ms, tpot_ms (requests with > 1 token) and accept (per request
    (tokens − 1)/spec_verify_ct where spec_verify_ct > 0), read from the `request_metrics` view (the definitions
    of cluster/analysis/request_metrics.py) with only the needed columns."""
    out: dict[str, dict[str, np.ndarray]] = {}
    if not run_keys:
        return out
    con = connect(results)
    try:
        df = con.execute(_REQ_SQL, [run_keys]).df()
    finally:
        con.close()
    if df.empty:
        return out
    keys = df["run_key"].to_numpy()
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    cols = {name: df[name].to_numpy(np.float64, na_value=np.nan)[order]
            for name in ("ttft_ms", "e2e_ms", "tpot_ms", "accept_length")}
    bounds = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        tpot, accept = cols["tpot_ms"][a:b], cols["accept_length"][a:b]
        out[str(keys[a])] = {
            "ttft_ms": cols["ttft_ms"][a:b],
            "e2e_ms": cols["e2e_ms"][a:b],
            "tpot_ms": tpot[~np.isnan(tpot)],
            "accept": accept[~np.isnan(accept)],
        }
    return out


def _est_cols(prefix: str, est: Optional[stats.Estimate]) -> dict[str, float]:
    if est is None:
        return {prefix: math.nan, f"{prefix}_lo": math.nan, f"{prefix}_hi": math.nan}
    return {prefix: est.point, f"{prefix}_lo": est.lo, f"{prefix}_hi": est.hi}


def _run_values(runs: pd.DataFrame, column: str) -> list[np.ndarray]:
    if column not in runs.columns:
        return []
    vals = pd.to_numeric(runs[column], errors="coerce").to_numpy(np.float64)
    return [np.array([v]) for v in vals if np.isfinite(v)]


def metric_runs(m: Metric, runs: pd.DataFrame, arrays: dict[str, dict[str, np.ndarray]],
                 request_level: bool) -> list[np.ndarray]:
    """A cell's data for one metric: per ok run, its requests' values (request-level intervals) or its value."""
    field = m.interval.request_field if m.interval is not None else None
    if request_level and field is not None:
        got = [arrays.get(k, {}).get(field) for k in runs["run_key"]]
        return [a for a in got if a is not None and a.size and np.all(np.isfinite(a))]
    return _run_values(runs, m.stored)


def _unvouched(cell: pd.DataFrame) -> list[str]:
    """Why the cell's runs cannot be vouched for: invalid or failed repeats, GPUs that throttled in a window."""
    out = []
    for row in cell.sort_values("repeat").itertuples(index=False):
        if row.status == "invalid":
            out.append(f"repeat {row.repeat} invalid: {row.invalid_reasons or 'no reason stored'}")
        elif row.status == "failed":
            out.append(f"repeat {row.repeat} failed: {row.failure_reason or 'no reason stored'}")
    ok = cell[cell["status"] == "ok"]
    if "m_gpu_throttled" in ok.columns:
        for row in ok.sort_values("repeat").itertuples(index=False):
            if getattr(row, "m_gpu_throttled", None) == 1.0:
                share = getattr(row, "m_gpu_throttled_share", math.nan)
                low = getattr(row, "m_sm_clock_mhz_min", math.nan)
                # the clock is over busy samples (gpu_metrics.busy_samples): none when every sample was idle
                down = f", SM clock down to {low:.0f} MHz" if low is not None and math.isfinite(low) else ""
                out.append(f"repeat {row.repeat}: GPUs throttled (thermal or power clock-event reasons) on "
                           f"{share:.0%} of the window's samples{down}: this run did not measure the variant alone")
    return out


def _short_windows(cell: pd.DataFrame) -> list[str]:
    ok = cell[cell["status"] == "ok"]
    dur = pd.to_numeric(ok["duration_s"], errors="coerce")
    short = int((dur < MIN_DURATION_S).sum())
    if short:
        return [f"{short} run(s) measured for less than {MIN_DURATION_S:g} s: too short for a steady state"]
    return []


def _quality(per_metric: dict[str, list[np.ndarray]]) -> list[str]:
    out: list[str] = []
    for name, stat, keep in (("output_tok_s", "mean", ("repeat", "CV")), ("ttft_ms_p99", "p99", ("requests",)),
                             ("tpot_ms_mean", "mean", ("CV",))):
        runs = per_metric.get(name) or []
        if not runs:
            continue
        for w in stats.quality_warnings(runs, stat):
            if any(k in w for k in keep):
                out.append(name + w[len(stat):] if w.startswith(stat + ":") else w)
    return out


def _speedup(base: list[np.ndarray], var: list[np.ndarray], base_rep: list[int], var_rep: list[int],
             higher: bool, n_boot: int, rng: np.random.Generator) -> Optional[stats.RatioEstimate]:
    if not base or not var:
        return None
    paired = (len(base) == len(var) == len(base_rep) == len(var_rep) and sorted(base_rep) == sorted(var_rep)
              and len(set(base_rep)) == len(base_rep))
    if paired:
        base = [base[i] for i in np.argsort(base_rep)]
        var = [var[i] for i in np.argsort(var_rep)]
    try:
        return stats.ratio_estimate(base, var, "mean", n_boot, higher_is_better=higher, rng=rng,
                                    level=CI_LEVEL, paired=paired)
    except ValueError:
        return None


def _clock_warnings(out: pd.DataFrame, keys: list[str], baseline: Optional[str]) -> None:
    """Append to each variant's warnings where its SM clocks differ from the baseline's beyond CLOCK_MISMATCH_REL."""
    if baseline is None or "sm_clock_mhz_mean" not in out.columns:
        return
    by_key = {tuple(r[k] for k in keys): r for _, r in out.iterrows()}
    for idx, row in out.iterrows():
        if row["variant"] == baseline:
            continue
        base = by_key.get(tuple(row[k] for k in keys[:-1]) + (baseline,))
        if base is None:
            continue
        for col, what in (("sm_clock_mhz_mean", "mean"), ("sm_clock_mhz_p10", "10th percentile")):
            b, v = base[col], row[col]
            if np.isfinite(b) and np.isfinite(v) and b > 0 and abs(v - b) / b > CLOCK_MISMATCH_REL:
                why = (f"SM clock {what} {v:.0f} MHz vs the baseline's {b:.0f} MHz ({(v - b) / b:+.0%}, beyond "
                       f"{CLOCK_MISMATCH_REL:.0%}): the two sides ran at different clocks, so the difference is not "
                       "the variants' alone")
                out.at[idx, "warnings"] = list(out.at[idx, "warnings"]) + [why]
                out.at[idx, "unvouched"] = list(out.at[idx, "unvouched"]) + [why]
                break


def compare_with_ci(results: Results, baseline: Optional[str] = None, n_boot: int = 2000,
                    seed: int = 0, request_level: bool = True) -> pd.DataFrame:
    """Per (workload, load point) and variant: point estimates with 95% CIs, speedups over the baseline at equal
    load with a verdict, and quality warnings. request_level=False uses run-level summaries only (faster)."""
    runs = results.runs()
    if runs.empty:
        return pd.DataFrame()
    variants = list(dict.fromkeys(runs.sort_values("order_index")["variant"]))
    baseline = resolve_baseline(runs.sort_values("order_index", kind="stable"), baseline, results.experiment)
    ok_runs = runs[runs["status"] == "ok"]
    arrays = request_arrays(results, ok_runs["run_key"].tolist()) if request_level else {}
    rows: list[dict[str, Any]] = []
    cells: dict[tuple[Any, ...], dict[str, list[np.ndarray]]] = {}
    repeats: dict[tuple[Any, ...], list[int]] = {}
    keys = list(POINT_KEYS) + ["variant"]
    estimated = ci_metrics()
    facts = {tuple(r[:len(keys)]): r[len(keys):] for r in
             cell_facts(runs, keys)[keys + ["gpus", "launched_by_sglbench"]].itertuples(index=False, name=None)}
    for i, (key, cell) in enumerate(runs.groupby(keys, sort=False)):
        ok = cell[cell["status"] == "ok"]
        rng = np.random.default_rng([seed, i])
        per_metric = {m.name: metric_runs(m, ok, arrays, request_level) for m in estimated}
        row: dict[str, Any] = dict(zip(keys, key))
        gpus, launched = facts[tuple(key)]
        row.update(engine=cell["engine"].iloc[0], gpus=gpus, launched_by_sglbench=launched,
                   is_baseline=key[-1] == baseline, n_runs=len(ok),
                   n_failed=int((cell["status"] == "failed").sum()),
                   n_invalid=int((cell["status"] == "invalid").sum()))
        for m in estimated:
            data = per_metric[m.name]
            est: Optional[stats.Estimate] = None
            if data and m.interval is not None:
                est = (stats.hierarchical_bootstrap(data, m.interval.stat, n_boot, rng=rng, level=CI_LEVEL)
                       if request_level and m.interval.request_field else
                       stats.run_level_bootstrap(np.concatenate(data), "mean", n_boot, rng=rng, level=CI_LEVEL))
            row.update(_est_cols(m.name, est))
        # unvouched: the warnings that say the cell's figures are not the variant's alone (results recommend
        # chooses no such cell); the rest are caveats about precision
        row["unvouched"] = _unvouched(cell)
        row["warnings"] = row["unvouched"] + _short_windows(cell) + _quality(per_metric)
        cells[tuple(key)] = per_metric
        repeats[tuple(key)] = [int(r) for r in ok["repeat"]]
        rows.append(row)
    out = with_per_gpu(with_marks(pd.DataFrame(rows), runs), ("", "_lo", "_hi"))
    out["gpus"] = out["gpus"].astype("Int64")
    _clock_warnings(out, keys, baseline)
    for n_sp, (col, metric, higher) in enumerate(speedups()):
        ests: list[tuple[int, stats.RatioEstimate]] = []
        for idx, row in out.iterrows():
            key = tuple(row[k] for k in keys)
            bkey = key[:-1] + (baseline,)
            if baseline is None or bkey not in cells:
                continue
            b_runs, v_runs = cells[bkey][metric], cells[key][metric]
            rng = np.random.default_rng([seed, 1_000_003, int(idx), n_sp])
            ratio = _speedup(b_runs, v_runs, repeats[bkey] if len(b_runs) == len(repeats[bkey]) else [],
                           repeats[key] if len(v_runs) == len(repeats[key]) else [], higher, n_boot, rng)
            if ratio is not None:
                ests.append((int(idx), ratio))
        comparisons = [(i, e) for i, e in ests if not out.loc[i, "is_baseline"]]
        adjusted = stats.adjust_family([e for _, e in comparisons], CI_LEVEL)
        final = dict(ests)
        final.update({i: e for (i, _), e in zip(comparisons, adjusted)})
        out[col] = [final[i].point if i in final else math.nan for i in out.index]
        out[f"{col}_lo"] = [final[i].lo if i in final else math.nan for i in out.index]
        out[f"{col}_hi"] = [final[i].hi if i in final else math.nan for i in out.index]
        out[f"{col}_p"] = [final[i].p_value if i in final else math.nan for i in out.index]
        out[f"{col}_verdict"] = [("baseline" if out.loc[i, "is_baseline"] else final[i].verdict) if i in final
                                 else "" for i in out.index]
    from cluster.analysis.accuracy import with_accuracy

    out = with_accuracy(out, results, baseline)
    out["_vorder"] = out["variant"].map({v: i for i, v in enumerate(variants)})
    out = out.sort_values(list(POINT_KEYS) + ["_vorder"], kind="stable").drop(columns="_vorder")
    out = with_gpus_notes(out.reset_index(drop=True))
    out.attrs["ci_method"] = CI_METHOD
    return out


def format_estimate(point: float, lo: float, hi: float, digits: int = 1) -> str:
    """'123.4 [110.2, 130.1]', or the point alone when there is no interval, '-' when there is no value."""
    if point is None or not math.isfinite(point):
        return "-"
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{point:.{digits}f} [no CI]"
    return f"{point:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def format_speedup(point: float, lo: float, hi: float, verdict: str) -> str:
    """'1.38× [1.21, 1.55] faster', 'no significant difference (1.02× [0.95, 1.09])', or '-'."""
    if verdict == "baseline":
        return "baseline"
    if point is None or not math.isfinite(point):
        return "-"
    ci = f"{point:.2f}× [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else f"{point:.2f}×"
    if verdict in (stats.VERDICT_FASTER, stats.VERDICT_SLOWER):
        return f"{ci} {verdict}"
    if verdict == stats.VERDICT_NO_DIFFERENCE:
        return f"no significant difference ({ci})"
    return f"{ci} ({verdict})" if verdict else ci


def point_label(kind: str, value: float) -> str:
    """'concurrency 8' or 'rate 2.5 req/s': a load point in titles and tables."""
    return load_shape(kind).long_label(value)


def short_point_label(kind: str, value: float) -> str:
    """'c8' or 'r2.5': a load point where a table cell or a warning list is short of room."""
    return load_shape(kind).short_label(value)


def _metric_cells(ci: pd.DataFrame, m: Metric) -> list[str]:
    """A metric's compare column as display strings, by its declaration: digits, scale and note."""
    col = m.column
    assert col is not None
    p, lo, hi = ci[m.name], ci[f"{m.name}_lo"], ci[f"{m.name}_hi"]
    if col.scale != 1.0:
        p, lo, hi = (col.scale * x.astype(float) for x in (p, lo, hi))
    cells = [format_estimate(*t, digits=col.digits) for t in zip(p, lo, hi)]
    if col.note is not None:
        flag, suffix = col.note
        cells = [c + (suffix if f else "") for c, f in zip(cells, ci[flag])]
    return cells


def _speedup_cells(ci: pd.DataFrame, column: str) -> list[str]:
    return [format_speedup(*t) for t in zip(ci[column], ci[f"{column}_lo"], ci[f"{column}_hi"],
                                            ci[f"{column}_verdict"])]


def compare_columns(ci: pd.DataFrame) -> list[tuple[str, list[str], bool]]:
    """The declared metric and speedup columns of the compare table, in their places: (label, cells, shown in the
    terminal's table); a metric's shown rule (when_any, when_positive) is judged on `ci`."""
    placed: list[tuple[float, str, list[str], bool]] = []
    for m in declared():
        if m.column is not None and m.name in ci.columns:
            shown = m.column.shown
            show = (shown == "always" or (shown == "when_any" and bool(ci[m.name].notna().any()))
                    or (shown == "when_positive" and bool((ci[m.name].fillna(0) > 0).any())))
            placed.append((m.column.at, m.column.label, _metric_cells(ci, m), show))
        sp = m.speedup
        if sp is not None and sp.label is not None and sp.column in ci.columns:
            placed.append((sp.at, sp.label, _speedup_cells(ci, sp.column), sp.shown))
    return [(label, cells, show) for _, label, cells, show in sorted(placed, key=lambda t: t[0])]


def compare_view(ci: pd.DataFrame) -> pd.DataFrame:
    """The CI compare table as display strings: 'estimate [lo, hi]' and speedup verdicts, a column per declared
    metric column and speedup (metric_catalog)."""
    return pd.DataFrame({
        "workload": ci["workload"],
        "load": [point_label(k, v) for k, v in zip(ci["load_kind"], ci["load_value"])],
        "variant": [f"{v}{' (baseline)' if b else ''}" for v, b in zip(ci["variant"], ci["is_baseline"])],
        "engine": [f"{e} (simulated)" if is_simulated(e) else e for e in ci["engine"]],
        "GPUs": ["-" if pd.isna(g) else str(int(g)) for g in ci["gpus"]],
        "ok/failed/invalid": [f"{a}/{b}/{c}" for a, b, c in zip(ci["n_runs"], ci["n_failed"], ci["n_invalid"])],
        **{label: cells for label, cells, _ in compare_columns(ci)},
    })


# free-form JSON stored as given: the resolved server args /server_info answered
def resolved_args_of(text: Optional[str], results: Results) -> Optional[dict[str, Any]]:
    """A runs row's resolved_args_json as the object the writer stored (None: none stored); StoreError naming the
    column when the text is not a JSON object (a string column no file check reads inside)."""
    import json as _json

    from cluster.dataset.root import StoreError

    if not text:
        return None
    try:
        doc = _json.loads(text)
    except ValueError as e:  # JSONDecodeError, and a digit-limit ValueError
        doc = e
    if not isinstance(doc, dict):
        got = f"not JSON ({doc})" if isinstance(doc, ValueError) else f"a {type(doc).__name__}"
        raise StoreError(f"{results.root}/{results.experiment}: runs column resolved_args_json holds {got}, not a JSON object",
                         field="resolved_args_json", expected="the JSON object of /server_info's args")
    return doc


def _stored_args(results: Results, runs: list[ServerArgsRow]) -> dict[str, dict[str, Any]]:
    """variant → the resolved args of its first run that did not fail and stored some."""
    resolved: dict[str, dict[str, Any]] = {}
    for r in runs:
        if r["status"] != "failed" and r["variant"] not in resolved:
            args = resolved_args_of(r["resolved_args_json"], results)
            if args is not None:
                resolved[r["variant"]] = args
    return resolved


def _stored_variants(results: Results) -> Optional[list[ResolvedVariant]]:
    """The variants of the spec experiment.json records (None: it records none); StoreError when it does not
    validate as this sglbench's ExperimentSpec (DatasetStore.read_stored_spec)."""
    from cluster.plan.runs import expand_variants
    from cluster.config.experiment import ExperimentSpec

    spec = results.stored_spec(ExperimentSpec)
    return None if spec is None else list(expand_variants(spec))


def resolved_cap_problems(results: Results) -> list[str]:
    """One line per variant whose server resolved a different running-request cap than the baseline's (plan.fairness
    resolved_cap_findings over the stored resolved args: e.g. a NEXTN variant capped by Mamba state slots)."""
    from cluster.plan.fairness import format_findings, resolved_cap_findings

    variants = _stored_variants(results)
    if variants is None:
        return []
    runs = results.server_args_rows(["variant", "status", "resolved_args_json"])
    return format_findings(resolved_cap_findings(variants, _stored_args(results, runs)))


def served_devices(results: Results) -> set[str]:
    """The devices the servers said they ran on (`device` in their resolved args from /server_info), e.g. {"cpu"}."""
    out: set[str] = set()
    for r in results.server_args_rows(["resolved_args_json"]):
        device = (resolved_args_of(r["resolved_args_json"], results) or {}).get("device")
        if isinstance(device, str):
            out.add(device)
    return out


def _without_declared_knobs(base: JsonObject, other: JsonObject, base_knobs: Optional[JsonObject],
                            other_knobs: Optional[JsonObject]) -> tuple[JsonObject, JsonObject]:
    """Both servers' resolved args with the simulator's knobs that the spec declares differently left out of its
    reported knobs (a variant's own `sim:` is as intended as its own `args:`); every other knob is still compared."""
    a, b = base.get(SIM_KNOBS_KEY), other.get(SIM_KNOBS_KEY)
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return base, other
    bk, ok = base_knobs or {}, other_knobs or {}
    declared = {k for k in set(bk) | set(ok) if bk.get(k) != ok.get(k)}

    def trim(knobs: JsonObject) -> dict[str, JsonValue]:
        return {k: v for k, v in knobs.items() if k not in declared}

    return {**base, SIM_KNOBS_KEY: trim(a)}, {**other, SIM_KNOBS_KEY: trim(b)}


def unintended_differences(results: Results) -> dict[str, dict[str, tuple[Any, Any]]]:
    """variant → resolved server args (from /server_info, stored per run) that differ from the baseline's, minus
    the speculative settings and every arg the spec itself declares differently for that variant."""
    from cluster.plan.fairness import resolved_differences

    runs = results.server_args_rows(["variant", "status", "is_baseline", "resolved_args_json"])
    resolved = _stored_args(results, runs)
    baseline = next((r["variant"] for r in runs if r["is_baseline"] and r["variant"] in resolved), None)
    if baseline is None:
        return {}
    declared: dict[str, dict[str, Any]] = {}
    knobs: dict[str, JsonObject] = {}
    for v in _stored_variants(results) or []:
        declared[v.name] = {k.replace("-", "_"): val for k, val in v.args.items()}
        knobs[v.name] = v.sim.wire()
    out: dict[str, dict[str, tuple[Any, Any]]] = {}
    for name, args in resolved.items():
        if name == baseline:
            continue
        base_decl, own = declared.get(baseline, {}), declared.get(name, {})
        intended = {"speculative_*"} | {k for k in set(base_decl) | set(own) if base_decl.get(k) != own.get(k)}
        base_args, own_args = _without_declared_knobs(resolved[baseline], args, knobs.get(baseline), knobs.get(name))
        d = resolved_differences(base_args, own_args, intended)
        if d:
            out[name] = d
    return out
