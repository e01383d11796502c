"""The report's matplotlib figures (Agg backend), each returned as PNG bytes."""

from __future__ import annotations

import io
import math
from typing import Any, Mapping, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from cluster.kernel.load_shapes import load_shape  # noqa: E402

DPI = 110

Rgba = tuple[float, float, float, float]
"""A matplotlib colour (red, green, blue, alpha in 0..1)."""


def variant_colors(variants: Sequence[str]) -> dict[str, Rgba]:
    """One stable colour per variant (plan order), shared by every figure."""
    cmap = plt.get_cmap("tab10")
    return {v: cmap(i % 10) for i, v in enumerate(variants)}


def spaced_ticks(loads: Any, log: bool, min_gap: float = 0.04) -> list[float]:
    """The load points as ticks, leaving out any closer than `min_gap` of the axis span to the last one kept (a
    capacity search's bisection probes 16, 17, 18, 19, 20 would print as one run of digits)."""
    xs = sorted({float(x) for x in loads})
    if len(xs) < 2:
        return xs
    pos = [math.log2(x) for x in xs] if log else xs
    span = (pos[-1] - pos[0]) or 1.0
    kept = [0]
    for i in range(1, len(xs)):
        if (pos[i] - pos[kept[-1]]) / span >= min_gap:
            kept.append(i)
    if kept[-1] != len(xs) - 1:
        kept[-1] = len(xs) - 1  # the highest load is always labelled
    return [xs[i] for i in kept]


def png(fig: Figure) -> bytes:
    """A figure as PNG bytes at DPI (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _load_label(kind: str) -> str:
    return load_shape(kind).axis_label()


def throughput_plot(ci: pd.DataFrame, title: str, labels: dict[str, str], colors: Mapping[str, Rgba]) -> bytes:
    """Output tok/s vs load per variant, with its 95% CI as a band. ci: one workload and load kind."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for v, g in ci.groupby("variant", sort=False):
        g = g.sort_values("load_value")
        x = g["load_value"].to_numpy(float)
        ax.plot(x, g["output_tok_s"], marker="o", color=colors[v], label=labels[v])
        lo, hi = g["output_tok_s_lo"].to_numpy(float), g["output_tok_s_hi"].to_numpy(float)
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            ax.fill_between(x[ok], lo[ok], hi[ok], color=colors[v], alpha=0.18, linewidth=0)
    kind = str(ci["load_kind"].iloc[0])
    ax.set_xlabel(_load_label(kind))
    ax.set_ylabel("output throughput (tok/s)")
    if ci["load_value"].max() / max(ci["load_value"].min(), 1e-9) >= 8:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xticks(spaced_ticks(ci["load_value"], ax.get_xscale() == "log"))
    ax.set_title(title + "\nmean over repeats; band = 95% CI (bootstrap over repeats)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")
    return png(fig)


def cdf_plot(per_point: list[tuple[str, dict[str, np.ndarray]]], metric: str, unit: str, title: str,
             labels: dict[str, str], colors: Mapping[str, Rgba]) -> bytes:
    """Empirical CDFs (requests pooled over ok repeats) of one latency, one panel per load point."""
    n = len(per_point)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False, sharey=True)
    for ax, (point, data) in zip(axes.ravel(), per_point):
        lo = min((float(a.min()) for a in data.values() if a.size), default=1.0)
        hi = max((float(a.max()) for a in data.values() if a.size), default=10.0)
        for v, vals in data.items():
            if not vals.size:
                continue
            x = np.sort(vals)
            ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", color=colors[v], label=labels[v])
        if lo > 0 and hi / lo > 20:
            ax.set_xscale("log")
        ax.set_title(point, fontsize=9)
        ax.set_xlabel(f"{metric} ({unit})")
        ax.grid(alpha=0.3)
        ax.axhline(0.99, color="grey", linewidth=0.6, linestyle=":")
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("fraction of requests ≤ x")
    axes.ravel()[0].legend(fontsize=7, loc="best")
    fig.suptitle(title + " (dotted line: p99)", fontsize=10)
    fig.tight_layout()
    return png(fig)


def accept_hist_plot(by_depth: list[tuple[int, str, np.ndarray, float]], title: str) -> bytes:
    """Per-request acceptance length (tokens per verify step after the prefill token), one panel per depth.

    by_depth: (num_steps, label, per-request values, run-scoped Σ-ratio mean)."""
    n = len(by_depth)
    fig, axes = plt.subplots(1, n, figsize=(4.4 * n, 3.6), squeeze=False, sharey=True)
    cmap = plt.get_cmap("viridis")
    for i, (ax, (depth, label, vals, mean)) in enumerate(zip(axes.ravel(), by_depth)):
        top = depth + 1
        bins = np.linspace(1.0, top, 10 * depth + 1) if depth >= 1 else 10
        ax.hist(np.clip(vals, 1.0, top), bins=bins, color=cmap(0.2 + 0.6 * i / max(n - 1, 1)), alpha=0.85,
                weights=np.full(vals.size, 1.0 / max(vals.size, 1)))
        if math.isfinite(mean):
            ax.axvline(mean, color="black", linestyle="--", linewidth=1, label=f"Σ-ratio = {mean:.2f}")
            ax.legend(fontsize=8, loc="upper left")
        ax.set_xlim(1.0, top)
        ax.set_title(f"{label}: {vals.size} requests", fontsize=9)
        ax.set_xlabel("accept length (tokens / verify step)")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("fraction of requests")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return png(fig)


def speedup_plot(ci: pd.DataFrame, column: str, what: str, title: str, labels: dict[str, str],
                 colors: Mapping[str, Rgba]) -> bytes:
    """Speedup over the baseline vs load with 95% CI error bars; hollow markers = not significant."""
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    others = ci[~ci["is_baseline"].astype(bool)]
    variants = list(dict.fromkeys(others["variant"]))
    width = 0.06 * max(len(variants) - 1, 1)
    shown: set[str] = set()
    for j, v in enumerate(variants):
        g = others[others["variant"] == v].sort_values("load_value")
        x = g["load_value"].to_numpy(float) * (1 + (j - (len(variants) - 1) / 2) * width / max(len(variants), 1))
        y = g[column].to_numpy(float)
        lo, hi = g[f"{column}_lo"].to_numpy(float), g[f"{column}_hi"].to_numpy(float)
        err = np.vstack([np.where(np.isfinite(lo), y - lo, 0), np.where(np.isfinite(hi), hi - y, 0)])
        verdict = g[f"{column}_verdict"].to_numpy()
        sig = np.isin(verdict, ["faster", "slower"])
        few = verdict == "insufficient repeats"
        ax.errorbar(x, y, yerr=err, color=colors[v], capsize=4, linestyle="-", linewidth=1, label=labels[v])
        ax.scatter(x[sig], y[sig], color=colors[v], s=36, zorder=3)
        ax.scatter(x[~sig & ~few], y[~sig & ~few], facecolors="white", edgecolors=[colors[v]], s=36, zorder=3)
        ax.scatter(x[few], y[few], color=colors[v], marker="x", s=40, zorder=3)
        shown.update(verdict)
    ax.axhline(1.0, color="black", linewidth=0.8)
    kind = str(ci["load_kind"].iloc[0])
    ax.set_xlabel(_load_label(kind))
    if ci["load_value"].max() / max(ci["load_value"].min(), 1e-9) >= 8:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xticks(spaced_ticks(ci["load_value"], ax.get_xscale() == "log"))
    ax.set_ylabel(f"speedup over baseline ({what}, ×)")
    ax.set_title(title + "\n" + speedup_legend(shown), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return png(fig)


def speedup_legend(verdicts: set[str]) -> str:
    """The marker key for the verdicts a speedup plot shows, in the compare table's own words."""
    keys = [("bars = 95% CI", bool(verdicts - {"insufficient repeats"})),
            ("filled = significant", bool(verdicts & {"faster", "slower"})),
            ("hollow = no significant difference", "no significant difference" in verdicts),
            ("× = insufficient repeats (one repeat: no interval)", "insufficient repeats" in verdicts)]
    return "; ".join(text for text, present in keys if present)


def bandwidth_plot(rows: pd.DataFrame, title: str, colors: Mapping[str, Rgba], at: str = "batch 1") -> bytes:
    """% of the memory-bandwidth bound per variant at the lowest concurrency measured (`at` says which), bars and
    the 100% line."""
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 4.0))
    x = np.arange(len(rows))
    pct = rows["pct_of_bound"].to_numpy(float)
    ax.bar(x, pct, color=[colors[v] for v in rows["variant"]])
    for xi, p in zip(x, pct):
        ax.text(float(xi), p, f"{p:.0f}%", ha="center", va="bottom", fontsize=8)
    ax.axhline(100.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(x, rows["variant"], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(f"% of bound (decode tok/s, {at.split(' (')[0]})")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    return png(fig)


def pareto_front(x: Sequence[float], y: Sequence[float], x_higher: bool = True, y_higher: bool = True) -> list[int]:
    """Indices of the points no other point beats on both axes (ties on one axis kept only if better on the
    other), ordered by x: the frontier of a throughput-vs-latency sweep."""
    sx, sy = (1.0 if x_higher else -1.0), (1.0 if y_higher else -1.0)
    pts = [(sx * float(a), sy * float(b), i) for i, (a, b) in enumerate(zip(x, y))
           if math.isfinite(float(a)) and math.isfinite(float(b))]
    front = [i for a, b, i in pts
             if not any((c >= a and d >= b) and (c > a or d > b) for c, d, _ in pts)]
    return sorted(front, key=lambda i: float(x[i]))


def pareto_plot(points: pd.DataFrame, title: str, labels: dict[str, str], colors: Mapping[str, Rgba]) -> bytes:
    """Output tok/s per GPU against per-user tok/s (left) and against TTFT p99 (right), every load point of every
    variant a dot (annotated with its load), each variant's Pareto frontier a line. points: variant, load_value,
    tok_s_per_gpu, per_user_tok_s, ttft_ms_p99."""
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.4))
    for ax, xcol, xlabel, x_higher in ((axes[0], "per_user_tok_s", "per-user output tok/s (interactivity)", True),
                                      (axes[1], "ttft_ms_p99", "TTFT p99 (ms)", False)):
        for v, g in points.groupby("variant", sort=False):
            g = g.reset_index(drop=True)
            x, y = g[xcol].to_numpy(float), g["tok_s_per_gpu"].to_numpy(float)
            ax.scatter(x, y, color=colors[v], s=18, alpha=0.6)
            for xi, yi, load in zip(x, y, g["load_value"]):
                if math.isfinite(xi) and math.isfinite(yi):
                    ax.annotate(f"{load:g}", (xi, yi), fontsize=6, xytext=(2, 2), textcoords="offset points")
            front = pareto_front(x, y, x_higher=x_higher)
            if front:
                ax.plot(x[front], y[front], color=colors[v], marker="o", linewidth=1.4, label=labels[v])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("output tok/s per GPU")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(title + "\nline = Pareto frontier per variant (up and right is better on the left, up and left on "
                 "the right); numbers = load point", fontsize=10)
    fig.tight_layout()
    return png(fig)


def pooled(arrays: Sequence[Optional[np.ndarray]]) -> np.ndarray:
    """Concatenate the present arrays (an empty float array when none)."""
    got = [a for a in arrays if a is not None and a.size]
    return np.concatenate(got) if got else np.empty(0)


def telemetry_plot(per_point: list[tuple[str, dict[str, pd.DataFrame]]], title: str, labels: dict[str, str],
                   colors: Mapping[str, Rgba]) -> bytes:
    """Power (all the server's GPUs) and mean SM clock over the window, per variant (its first ok repeat), one
    column per load point. Frames: t_s, power_w, sm_clock_mhz (summed / averaged over GPUs per sample time)."""
    n = len(per_point)
    fig, axes = plt.subplots(2, n, figsize=(4.8 * n, 6.0), squeeze=False, sharey="row")
    for col, (point, data) in enumerate(per_point):
        top, bottom = axes[0, col], axes[1, col]
        for v, df in data.items():
            top.plot(df["t_s"], df["power_w"], color=colors[v], label=labels[v], linewidth=1.2)
            bottom.plot(df["t_s"], df["sm_clock_mhz"], color=colors[v], label=labels[v], linewidth=1.2)
        top.set_title(point, fontsize=9)
        bottom.set_xlabel("time in the measured window (s)")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("GPU power, all GPUs (W)")
    axes[1, 0].set_ylabel("SM clock, mean of GPUs (MHz)")
    axes[0, 0].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    return png(fig)


def kernel_breakdown_plot(shares: dict[str, dict[str, float]], categories: Sequence[str], title: str) -> bytes:
    """Per variant, the share of kernel time by category as one stacked horizontal bar (variants side by side)."""
    names = list(shares)
    fig, ax = plt.subplots(figsize=(7.5, 0.6 * len(names) + 1.6))
    left = np.zeros(len(names))
    cmap = plt.get_cmap("Set2")
    for i, cat in enumerate(categories):
        vals = np.array([shares[v].get(cat, 0.0) for v in names]) * 100
        ax.barh(names, vals, left=left, color=cmap(i), label=cat)
        for y, (x0, w) in enumerate(zip(left, vals)):
            if w >= 6:
                ax.text(x0 + w / 2, y, f"{w:.0f}%", ha="center", va="center", fontsize=7)
        left += vals
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of profiled kernel time (%)")
    ax.invert_yaxis()
    ax.legend(fontsize=7, ncol=len(categories), loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title(title, fontsize=10)
    return png(fig)
