"""`sglbench results report`: an HTML page with PNG plots and the CI compare table of one experiment."""

from __future__ import annotations

import html
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from cluster.analysis import report_plots as rp
from cluster.analysis.acceptance_health import acceptance_health, health_html
from cluster.analysis.acceptance_positions import (INTERVAL_METHOD, POSITION_METRICS, READ_COLUMNS,
                                                   acceptance_by_position, position_view)
from cluster.analysis.capacity import capacity_table, capacity_view
from cluster.analysis.categories import categorised, category_view, compare_by_category
from cluster.analysis.accuracy import accuracy_html
from cluster.analysis.comparison import ci_metrics, compare_view, compare_with_ci, point_label, request_arrays
from cluster.analysis.metric_catalog import declared
from cluster.analysis.query import baseline_of
from cluster.analysis.recommend import Recommendations, decide
from cluster.analysis.recommend_view import note_lines, recommend_view, schedule_lines
from cluster.analysis.results import Results
from cluster.analysis.timeline import report_timelines
from cluster.dataset.atomic import atomic_write
from cluster.engines.registry import is_simulated, is_simulated_source
from cluster.errors import UserError

GPU_BANDWIDTH_GBS: dict[str, float] = {
    "RTX PRO 6000 Blackwell": 1792.0,
    "H200": 4800.0,
    "H100 SXM": 3350.0,
    "B200": 8000.0,
}
"""Peak HBM/GDDR bandwidth per GPU, GB/s (vendor datasheets)."""

_GPU_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("RTX PRO 6000 Blackwell", re.compile(r"rtx\s*pro\s*6000", re.I)),
    ("H200", re.compile(r"\bh200\b", re.I)),
    ("H100 SXM", re.compile(r"\bh100\b.*(sxm|hbm3)", re.I)),
    ("B200", re.compile(r"\bb200\b", re.I)),
)
SIM_REFERENCE_GPU = "RTX PRO 6000 Blackwell"
"""The simulator is calibrated to the reference node (8× RTX PRO 6000 Blackwell); its bound uses that GPU."""

def known_gpu(text: str) -> Optional[str]:
    """The GPU_BANDWIDTH_GBS key a GPU name (e.g. 'NVIDIA H200', 'NVIDIA H100 80GB HBM3') refers to."""
    for key, pat in _GPU_PATTERNS:
        if pat.search(text):
            return key
    return None


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def gpu_of_run(engine: str, provenance_json: Optional[str]) -> Optional[str]:
    """The known GPU a run ran on: any known GPU name in its provenance; the reference GPU for the simulator."""
    if is_simulated(engine):
        return SIM_REFERENCE_GPU
    try:
        prov = json.loads(provenance_json) if provenance_json else {}
    except ValueError:
        return None
    for s in _strings(prov):
        got = known_gpu(s)
        if got:
            return got
    return None


# free-form JSON stored as given: experiment.json, read through Results.meta
def decode_bytes_per_token(meta: Optional[dict[str, Any]]) -> Optional[float]:
    """decode_bytes_per_token from experiment.json's preflight probe report ({model path: probe JSON})."""
    pre = (meta or {}).get("preflight") or {}
    if not isinstance(pre, dict) or not pre:
        return None
    # experiment.json is a file on disk: any level may hold another type (display only, so it reads as absent)
    spec = (meta or {}).get("spec")
    model_spec = spec.get("model") if isinstance(spec, dict) else None
    model = model_spec.get("path") if isinstance(model_spec, dict) else None
    report = pre.get(model) if isinstance(model, str) and model in pre else next(iter(pre.values()))
    params = report.get("params") if isinstance(report, dict) else None
    val = params.get("decode_bytes_per_token") if isinstance(params, dict) else None
    return float(val) if isinstance(val, (int, float)) and val > 0 else None


def bandwidth_table(ci: pd.DataFrame, runs: pd.DataFrame, bytes_per_token: float) -> pd.DataFrame:
    """Per variant at batch 1 (concurrency 1, else the lowest concurrency): decode tok/s = 1000 / TPOT mean vs the
    bound N·BW / bytes_per_token, N = the variant's tp (the GPUs its weights are split over)."""
    conc = ci[ci["load_kind"] == "concurrency"]
    if conc.empty:
        return pd.DataFrame()
    rows = []
    ok = runs[runs["status"] == "ok"]
    for (workload, v), g in conc.groupby(["workload", "variant"], sort=False):
        g = g.sort_values("load_value").iloc[0]
        vr = ok[(ok["variant"] == v) & (ok["workload"] == workload)]
        if vr.empty or not math.isfinite(g["tpot_ms_mean"]) or g["tpot_ms_mean"] <= 0:
            continue
        gpu = gpu_of_run(str(vr["engine"].iloc[0]), vr["provenance_json"].dropna().iloc[0]
                         if vr["provenance_json"].notna().any() else None)
        if gpu is None:
            continue
        n_gpus = int(vr["tp"].fillna(1).iloc[0])
        bound = n_gpus * GPU_BANDWIDTH_GBS[gpu] * 1e9 / bytes_per_token
        decode = 1000.0 / float(g["tpot_ms_mean"])
        rows.append({"workload": workload, "variant": v, "engine": g["engine"], "concurrency": g["load_value"],
                     "gpu": gpu + (" (assumed: simulator reference node)" if is_simulated(g["engine"]) else ""),
                     "n_gpus": n_gpus, "bound_tok_s": bound, "decode_tok_s": decode,
                     "pct_of_bound": 100.0 * decode / bound})
    return pd.DataFrame(rows)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", s).strip("_") or "x"


@dataclass
class _Figure:
    file: str
    caption: str


def _table_html(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in df.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figures(ci: pd.DataFrame, runs: pd.DataFrame, arrays: dict[str, dict[str, np.ndarray]], out: Path,
             labels: dict[str, str], colors: dict[str, Any], bw: pd.DataFrame, results: Results) -> list[_Figure]:
    figs: list[_Figure] = []
    ok = runs[runs["status"] == "ok"]

    def save(name: str, data: bytes, caption: str) -> None:
        atomic_write(out / name, data)
        figs.append(_Figure(name, caption))

    for (workload, kind), g in ci.groupby(["workload", "load_kind"], sort=False):
        if not (g["n_runs"] > 0).any():  # nothing finished ok here: no plot of empty axes (the page says why)
            continue
        g = g[g["n_runs"] > 0]
        tag = f"{_slug(str(workload))}_{kind}"
        title = f"{workload}: {'closed loop' if kind == 'concurrency' else 'Poisson arrivals'}"
        save(f"throughput_{tag}.png", rp.throughput_plot(g, f"{title}: output throughput", labels, colors),
             f"{workload}: output tok/s vs {kind} per variant, 95% CI band.")
        for metric, field, unit in (("TTFT", "ttft_ms", "ms"), ("TPOT", "tpot_ms", "ms")):
            per_point = []
            for value in sorted(g["load_value"].unique()):
                sel = ok[(ok["workload"] == workload) & (ok["load_kind"] == kind) & (ok["load_value"] == value)]
                data = {v: rp.pooled([arrays.get(k, {}).get(field) for k in s["run_key"]])
                        for v, s in sel.groupby("variant", sort=False)}
                if any(a.size for a in data.values()):
                    per_point.append((point_label(kind, value), data))
            if not per_point:
                continue
            save(f"{field}_cdf_{tag}.png",
                 rp.cdf_plot(per_point, metric, unit, f"{title}: {metric} CDF per variant", labels, colors),
                 f"{workload}: {metric} CDF per variant at each load point (requests pooled over ok repeats).")
        if (~g["is_baseline"].astype(bool)).any() and g["speedup_tok_s"].notna().any():
            save(f"speedup_{tag}.png", rp.speedup_plot(g, "speedup_tok_s", "output tok/s",
                                                       f"{title}: speedup over the baseline", labels, colors),
                 f"{workload}: output tok/s speedup over the baseline at equal load, 95% CI.")
        pts = _pareto_points(g, runs)
        if pts["load_value"].nunique() > 1:
            save(f"pareto_{tag}.png", rp.pareto_plot(pts, f"{title}: throughput per GPU vs interactivity and TTFT",
                                                     labels, colors),
                 f"{workload}: output tok/s per GPU vs per-user tok/s and vs TTFT p99 at every {kind} point; "
                 "the line is each variant's Pareto frontier.")
        spec_runs = ok[(ok["workload"] == workload) & (ok["load_kind"] == kind) & ok["spec_num_steps"].notna()]
        by_depth = []
        for depth, s in spec_runs.groupby("spec_num_steps"):
            vals = rp.pooled([arrays.get(k, {}).get("accept") for k in s["run_key"]])
            if vals.size:
                mean = float(pd.to_numeric(s["m_accept_length"], errors="coerce").mean())
                names = ", ".join(dict.fromkeys(s["variant"]))
                by_depth.append((int(depth), f"{names} (steps={int(depth)})", vals, mean))
        if by_depth:
            save(f"accept_hist_{tag}.png",
                 rp.accept_hist_plot(by_depth, f"{title}: per-request acceptance length by NEXTN depth "
                                     "(all load points; dashed: run-scoped Σ-ratio, mean over runs)"),
                 f"{workload}: distribution of per-request (tokens − 1)/spec_verify_ct per speculative depth.")
    _telemetry_figures(results, ok, labels, colors, save)
    if not bw.empty:
        for workload, g in bw.groupby("workload", sort=False):
            first = g.iloc[0]
            gpu = str(first["gpu"]).replace(" (assumed: simulator reference node)", "")
            concs = sorted({float(c) for c in g["concurrency"]})
            at = ("batch 1" if concs == [1.0] else
                  f"concurrency {', '.join(f'{c:g}' for c in concs)} (the lowest measured; not batch 1)")
            title = (f"{workload}: % of the memory-bandwidth bound at {at}\n"
                     f"bound = {first['n_gpus']}× {gpu} BW / bytes per token = {first['bound_tok_s']:.0f} tok/s"
                     + ("\n(GPU assumed for the simulator: the reference node)"
                        if is_simulated(first["engine"]) else ""))
            save(f"bandwidth_{_slug(str(workload))}.png", rp.bandwidth_plot(g, title, colors, at),
                 f"{workload}: decode tok/s at {at} (1000 / TPOT mean) as % of N·BW / bytes per token.")
    return figs


def _telemetry_figures(results: Results, ok: pd.DataFrame, labels: dict[str, str], colors: dict[str, Any],
                       save: Callable[[str, bytes, str], None]) -> None:
    """Power and SM clock over time per variant (gpu_metrics), and the kernel breakdown per variant (kernel_profile);
    both say when they come from the simulator."""
    gm = results.table("gpu_metrics", columns=["run_key", "t_ns", "power_w", "sm_clock_mhz", "source"]).to_pandas()
    if not gm.empty:
        sim = any(is_simulated_source(str(s)) for s in set(gm["source"]))
        first = ok.sort_values("repeat").drop_duplicates(["workload", "load_kind", "load_value", "variant"])
        for (workload, kind), g in first.groupby(["workload", "load_kind"], sort=False):
            per_point = []
            for value, sel in g.groupby("load_value"):
                data = {}
                for r in sel.itertuples(index=False):
                    s = gm[(gm["run_key"] == r.run_key) & (gm["t_ns"] >= 0) & (gm["t_ns"] <= r.duration_s * 1e9)]
                    if not s.empty:
                        agg = s.groupby("t_ns").agg(power_w=("power_w", "sum"), sm_clock_mhz=("sm_clock_mhz", "mean"))
                        data[r.variant] = agg.reset_index().assign(t_s=lambda d: d["t_ns"] / 1e9)
                if data:
                    per_point.append((point_label(str(kind), float(value)), data))
            if per_point:
                label = " (SIMULATED device model, not a GPU)" if sim else " (NVML)"
                save(f"telemetry_{_slug(str(workload))}_{kind}.png",
                     rp.telemetry_plot(per_point, f"{workload}: GPU power and SM clock over the window{label}",
                                       labels, colors),
                     f"{workload}: power of the server's GPUs and their mean SM clock during each variant's first ok "
                     f"repeat{label}.")
    kp = results.table("kernel_profile").to_pandas()
    if not kp.empty and "category" in kp.columns:
        from cluster.analysis.kernel_profile import CATEGORIES

        shares = {str(v): {str(c): float(x) for c, x in g.groupby("category")["share"].sum().items()}
                  for v, g in kp.groupby("variant", sort=False)}
        label = " (SIMULATED trace)" if bool(kp["simulated"].any()) else ""
        save("kernel_breakdown.png", rp.kernel_breakdown_plot(
            shares, CATEGORIES, f"kernel time by category per variant (top kernels of each profile){label}"),
            f"Kernel profile per variant: share of the top kernels' time in GEMM / MoE / attention / communication / "
            f"other{label}.")


def _pareto_points(g: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The frontier plot's points from the CI table of one workload and load kind: output tok/s divided by the
    variant's GPUs (its tp), per-user tok/s and TTFT p99, one row per variant and load point."""
    tp = pd.to_numeric(runs.groupby("variant")["tp"].first(), errors="coerce").fillna(1).clip(lower=1)
    return pd.DataFrame({"variant": g["variant"], "load_value": g["load_value"],
                         "tok_s_per_gpu": g["output_tok_s"] / g["variant"].map(tp).fillna(1),
                         "per_user_tok_s": g["per_user_tok_s_mean"], "ttft_ms_p99": g["ttft_ms_p99"]})


_CSS = ("body{font-family:sans-serif;margin:1.5em;max-width:1400px}table{border-collapse:collapse;font-size:12px;"
        "margin-bottom:1em;max-width:100%}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;"
        "overflow-wrap:anywhere}th{background:#eee}"
        "img{max-width:100%;border:1px solid #ddd;margin:.3em 0}.sim{color:#a40;font-weight:bold}"
        "figure{margin:0 0 1.5em 0}")


def build_report(results: Results, out_dir: Optional[str] = None, n_boot: int = 1000, seed: int = 0,
                 bytes_per_token: Optional[float] = None) -> Path:
    """Write index.html and its PNGs to out_dir (default <root>/reports/<experiment>); returns the HTML path."""
    root, experiment = results.root, results.experiment
    if out_dir is None:
        if not results.store.is_local:
            raise UserError("--out: a local directory is needed when the dataset root is not a local path",
                            field="--out", expected="a local directory")
        out_dir = os.path.join(root, "reports", experiment)
    out = Path(out_dir)
    runs = results.runs()
    if runs.empty:
        raise UserError(f"experiment {experiment!r} under {root!r} has no runs to report", file=root)
    ci = compare_with_ci(results, n_boot=n_boot, seed=seed)
    arrays = request_arrays(results, runs.loc[runs["status"] == "ok", "run_key"].tolist())
    variants = list(dict.fromkeys(runs.sort_values("order_index")["variant"]))
    engines = runs.groupby("variant")["engine"].first().to_dict()
    labels = {v: f"{v} [{'simulated' if is_simulated(engines[v]) else engines[v]}]" for v in variants}
    colors = rp.variant_colors(variants)
    meta = results.meta()
    bpt = bytes_per_token or decode_bytes_per_token(meta)
    bw = bandwidth_table(ci, runs, bpt) if bpt else pd.DataFrame()
    figs = _figures(ci, runs, arrays, out, labels, colors, bw, results)
    for t in report_timelines(results, runs, labels, seed):
        name = f"timeline_{_slug(t.workload)}_{t.load_kind}_{_slug(f'{t.load_value:g}')}.png"
        atomic_write(out / name, t.png)
        figs.append(_Figure(name, t.caption))
    by_cat = categorised(compare_by_category(results, n_boot=n_boot, seed=seed))
    by_turn = categorised(compare_by_category(results, n_boot=n_boot, seed=seed, by="turn"), "turn")
    cap = capacity_table(results, n_boot=n_boot, seed=seed)
    rec_html = recommendation_html(decide(results, ci)) + accuracy_html(results, baseline_of(ci)) + health_html(acceptance_health(results))
    by_pos = position_view(acceptance_by_position(results.table("requests", READ_COLUMNS), runs))
    page = _html(experiment, root, ci, runs, figs, engines, bw, bpt, by_cat, by_turn, cap, by_pos, rec_html)
    path = out / "index.html"
    atomic_write(path, page.encode())
    return path


def _html(experiment: str, root: str, ci: pd.DataFrame, runs: pd.DataFrame, figs: list[_Figure],
          engines: dict[str, str], bw: pd.DataFrame, bpt: Optional[float], by_cat: pd.DataFrame,
          by_turn: pd.DataFrame, cap: pd.DataFrame, by_pos: Optional[pd.DataFrame] = None,
          rec_html: str = "") -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>sglbench: {e(experiment)}</title>"
             f"<style>{_CSS}</style></head><body><h1>sglbench report: {e(experiment)}</h1>",
             f"<p>Dataset root: <code>{e(root)}</code>. Baseline: <b>{e(str(baseline_of(ci)))}</b>. "
             f"Runs: {len(runs)} ({int((runs['status'] == 'ok').sum())} ok).</p>"]
    eng = ", ".join(f"{e(v)}: {e(x)}" for v, x in engines.items())
    parts.append(f"<p>Engines: {eng}.</p>")
    if any(is_simulated(x) for x in engines.values()):
        parts.append("<p class='sim'>Runs with engine <code>sim</code> are SIMULATED: numbers from sglbench's "
                     "simulated SGLang server (a step-time model), not measurements of a GPU.</p>")
    parts.append(f"<h2>Comparison</h2><p>{e(str(ci.attrs.get('ci_method', '')))}</p>")
    parts.append(_table_html(compare_view(ci)))
    warn: dict[str, list[str]] = {}
    for r in ci.itertuples(index=False):
        for w in r.warnings:
            warn.setdefault(w, []).append(f"{r.workload} / {point_label(r.load_kind, r.load_value)} / {r.variant}")
    if warn:  # each distinct warning once, with the points it concerns
        parts.append("<h3>Warnings</h3><ul>" + "".join(
            f"<li>{e(w)} ({e(f'all {len(pts)} points' if len(pts) == len(ci) > 1 else '; '.join(pts))})</li>"
            for w, pts in warn.items()) + "</ul>")
    parts.append(rec_html)
    if not by_cat.empty:
        parts.append("<h2>By prompt category</h2><p>Each category's requests apart (acceptance, TPOT, TTFT and "
                     f"throughput): {e(str(by_cat.attrs.get('ci_method', '')))}</p>")
        parts.append(_table_html(category_view(by_cat)))
    if not cap.empty:
        parts.append(f"<h2>Capacity at SLO</h2><p>The highest load meeting SLO attainment &ge; "
                     f"{float(cap['target'].iloc[0]):g} ({e(str(cap['over'].iloc[0]))}): "
                     f"{e(str(cap.attrs.get('ci_method', '')))}</p>")
        parts.append(_table_html(capacity_view(cap)))
    if not by_turn.empty:
        parts.append("<h2>By session turn</h2><p>Each turn of the multi-turn sessions apart: a later turn's prompt "
                     "holds the conversation so far, which the prefix cache can serve (prefix hit %): "
                     f"{e(str(by_turn.attrs.get('ci_method', '')))}</p>")
        parts.append(_table_html(category_view(by_turn)))
    if by_pos is not None and not by_pos.empty:
        parts.append("<h2>Acceptance per draft position</h2><p>From each request's spec_correct_drafts_histogram "
                     "(the server's verify steps by drafts accepted), pooled over load points and repeats: "
                     f"P(draft k accepted | drafts 1..k-1 accepted) and P(drafts 1..k accepted); "
                     f"{e(INTERVAL_METHOD)}.</p>")
        parts.append(_table_html(by_pos))
    parts.append("<h2>Plots</h2>")
    if not figs:
        parts.append("<p>No plots: no run finished ok (the reasons are under 'Invalid and failed runs').</p>")
    for f in figs:
        parts.append(f"<figure><img src='{e(f.file)}' alt='{e(f.caption)}'><figcaption>{e(f.caption)}"
                     "</figcaption></figure>")
    if not bw.empty:
        parts.append(f"<h2>Memory-bandwidth bound</h2><p>Bound = N·BW / decode bytes per token "
                     f"({(bpt or 0) / 1e9:.2f} GB/token: checkpoint probe or --bytes-per-token), N = tensor-parallel GPUs. "
                     "Speculative variants can exceed 100%: one weight read verifies several tokens.</p>")
        shown = bw.assign(bound_tok_s=bw["bound_tok_s"].round(1), decode_tok_s=bw["decode_tok_s"].round(1),
                          pct_of_bound=bw["pct_of_bound"].round(1))
        parts.append(_table_html(shown))
    elif bpt is None:
        parts.append("<p>No memory-bandwidth bound: experiment.json has no probe decode_bytes_per_token (a "
                     "simulated or unprobed model); <code>sglbench results report EXP --bytes-per-token B</code> "
                     "adds it, B = the bytes one decode step reads per token.</p>")
    bad = runs[runs["status"] != "ok"].sort_values("order_index")
    parts.append("<h2>Invalid and failed runs</h2>")
    if bad.empty:
        parts.append("<p>None.</p>")
    else:
        view = pd.DataFrame({
            "variant": bad["variant"], "workload": bad["workload"],
            "load": [point_label(k, v) for k, v in zip(bad["load_kind"], bad["load_value"])],
            "repeat": bad["repeat"], "status": bad["status"],
            "reason": [r if isinstance(r, str) and r else (i if isinstance(i, str) and i else "no reason stored")
                       for r, i in zip(bad["failure_reason"], bad["invalid_reasons"])],
            "run_key": bad["run_key"]})
        parts.append(_table_html(view))
    parts.append("<h2>Metric definitions</h2>")
    listed = sorted((m for m in declared() if m.report_at is not None), key=lambda m: m.report_at or 0)
    defs = {m.name: m.definition for m in listed}
    defs["speedup"] = ("variant over baseline at the same workload and load point: output tok/s ratio, "
                       "or baseline TPOT / variant TPOT; > 1 means the variant is better")
    defs["TTFT/TPOT/E2E in the compare table"] = (
        "statistics of the requests pooled over ok repeats (the runs table's m_ columns are per run); both read "
        "the one per-request definition of cluster/analysis/request_metrics.py (the request_metrics view)")
    defs["ITL, tokens/chunk, accept length, goodput in the compare table"] = "mean over ok repeats of the per-run value"
    if by_pos is not None and not by_pos.empty:
        defs.update({name: f"{formula} [{unit}]" for name, (unit, formula) in POSITION_METRICS.items()})
    parts.append(_table_html(pd.DataFrame({"metric": list(defs), "definition": list(defs.values())})))
    parts.append(f"<p>CI columns computed: {', '.join(m.name for m in ci_metrics())}.</p></body></html>")
    return "\n".join(parts)


def recommendation_html(rec: Recommendations) -> str:
    """The report's Recommendation section: what to serve per load point, the depth schedule, the notes."""
    if not rec.points:
        return ""
    e = html.escape
    parts = ["<h2>Recommendation</h2><p>Per workload and load point, the variant to serve (sglbench results "
             "recommend, docs/recommend.md): speedup = variant / baseline output tok/s with its 95% interval; "
             "nothing is chosen where the data cannot tell, and the row says why.</p>", _table_html(recommend_view(rec))]
    lines = [f"depth schedule {s}" for s in schedule_lines(rec.schedule)] + note_lines(rec)
    if lines:
        parts.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>")
    return "".join(parts)
