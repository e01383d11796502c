"""The per-request timeline of a run: each request a bar from its send to its last token, coloured by per-token ITL.

A bar is grey from the request's actual send to its first token-bearing chunk (TTFT: queueing and prefill), then one
segment per gap between token-bearing chunks, coloured by that gap's per-token ITL (request_metrics.ITL_TOKEN, the
gap divided by the later chunk's tokens; through chunk_gaps, its one numpy side). A request that ended in an error is
a red bar to its last chunk (a red mark at its send when none came). Rows are the requests in send order, times in
seconds from the window start. A run with more than MAX_BARS requests shows MAX_BARS of them drawn uniformly without
replacement by a seeded generator (numpy default_rng(seed)) over its request indices: the same seed and request
count draw the same requests in every run, so the variants' panels show the same prompts; the caption says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402

from cluster.analysis.comparison import point_label  # noqa: E402
from cluster.analysis.query import connect  # noqa: E402
from cluster.analysis.report_plots import png  # noqa: E402
from cluster.analysis.request_metrics import chunk_gaps  # noqa: E402

if TYPE_CHECKING:
    from cluster.analysis.results import Results

MAX_BARS = 200
"""Requests drawn per run at most: past this the bars are thinner than a pixel row at the figure's size."""

NS_PER_S = 1e9


def sample_indices(request_index: Sequence[int], max_bars: int = MAX_BARS, seed: int = 0) -> np.ndarray:
    """The request indices drawn: all when there are at most `max_bars`, else `max_bars` of them uniformly without
    replacement by numpy's default_rng(seed) over the sorted indices; returned sorted."""
    idx = np.sort(np.asarray(request_index, dtype=np.int64))
    if idx.size <= max_bars:
        return idx
    return np.sort(np.random.default_rng(seed).choice(idx, size=max_bars, replace=False))


@dataclass(frozen=True)
class Timeline:
    """The drawn requests of one run (send order) and their decode segments (ns from the window start)."""

    label: str
    send_ns: np.ndarray
    first_ns: np.ndarray
    """First token-bearing chunk; -1 where none came."""
    last_ns: np.ndarray
    """Last chunk; -1 where none came."""
    failed: np.ndarray
    seg_row: np.ndarray = field(repr=False)
    """Per decode segment: the row (index into send_ns) it belongs to."""
    seg_start_ns: np.ndarray = field(repr=False)
    seg_end_ns: np.ndarray = field(repr=False)
    seg_itl_token_ms: np.ndarray = field(repr=False)
    total_requests: int = 0
    """Requests the run holds (more than drawn when sampled)."""

    @property
    def drawn(self) -> int:
        return int(self.send_ns.size)


def build_timeline(label: str, requests: pd.DataFrame, chunks: pd.DataFrame, total_requests: int) -> Timeline:
    """A Timeline from the drawn requests (request_index, actual_send_ns, first_chunk_ns, last_chunk_ns, error) and
    their chunks (request_index, chunk_index, arrival_ns, tokens)."""
    req = requests.sort_values(["actual_send_ns", "request_index"]).reset_index(drop=True)
    row_of = {int(i): r for r, i in enumerate(req["request_index"])}
    failed = req["error"].notna().to_numpy()
    ch = chunks[chunks["tokens"] >= 1]
    ch = ch[ch["request_index"].isin([i for i, r in row_of.items() if not failed[r]])]
    ch = ch.sort_values(["request_index", "chunk_index"])
    c_req = ch["request_index"].to_numpy(np.int64)
    c_t = ch["arrival_ns"].to_numpy(np.int64)
    c_tok = ch["tokens"].to_numpy(np.int64)
    itl_chunk_ms, gap_tok, _ = chunk_gaps(c_req, c_t, c_tok)
    same = c_req[1:] == c_req[:-1]
    return Timeline(
        label=label,
        send_ns=req["actual_send_ns"].to_numpy(np.int64),
        first_ns=req["first_chunk_ns"].fillna(-1).to_numpy(np.int64),
        last_ns=req["last_chunk_ns"].fillna(-1).to_numpy(np.int64),
        failed=failed,
        seg_row=np.asarray([row_of[int(i)] for i in c_req[1:][same]], dtype=np.int64),
        seg_start_ns=c_t[:-1][same], seg_end_ns=c_t[1:][same],
        seg_itl_token_ms=itl_chunk_ms / gap_tok,
        total_requests=total_requests)


def caption_sampling(timelines: Sequence[Timeline], seed: int) -> str:
    """What the caption says of the sampling: every request, or how many of how many and with which seed."""
    sampled = [t for t in timelines if t.drawn < t.total_requests]
    if not sampled:
        return "every request of each run is drawn"
    counts = ", ".join(dict.fromkeys(f"{t.drawn} of {t.total_requests}" for t in sampled))
    return (f"runs past {MAX_BARS} requests show a uniform sample without replacement ({counts}; numpy "
            f"default_rng({seed}) over the request indices, the same requests in every variant)")


def timeline_plot(panels: Sequence[Timeline], title: str) -> bytes:
    """One panel per run, stacked with a shared time axis and one ITL colour scale (1st-99th percentile of every
    panel's per-token ITL; beyond it the colour saturates)."""
    itl = np.concatenate([t.seg_itl_token_ms for t in panels]) if panels else np.zeros(0)
    lo, hi = (np.percentile(itl, [1, 99]) if itl.size else (0.0, 1.0))
    norm = Normalize(vmin=float(lo), vmax=float(max(hi, lo + 1e-3)))
    cmap = plt.get_cmap("viridis")
    panel_h = 2.6
    fig, axes = plt.subplots(len(panels), 1, figsize=(10.0, 1.0 + panel_h * len(panels)), sharex=True, squeeze=False)
    for ax, t in zip(axes[:, 0], panels):
        width = max(0.4, min(4.0, 0.75 * panel_h * 72 / max(t.drawn, 1)))
        rows = np.arange(t.drawn)
        ok = ~t.failed & (t.first_ns >= 0)
        ax.hlines(rows[ok], t.send_ns[ok] / NS_PER_S, t.first_ns[ok] / NS_PER_S, color="0.78", linewidth=width)
        segs = np.stack([np.column_stack([t.seg_start_ns / NS_PER_S, t.seg_row]),
                         np.column_stack([t.seg_end_ns / NS_PER_S, t.seg_row])], axis=1)
        lines = LineCollection(list(segs), cmap=cmap, norm=norm, linewidths=width)
        lines.set_array(t.seg_itl_token_ms)
        ax.add_collection(lines)
        ax.autoscale_view()
        bad = t.failed
        ends = np.where(t.last_ns >= 0, t.last_ns, t.send_ns)
        ax.hlines(rows[bad], t.send_ns[bad] / NS_PER_S, ends[bad] / NS_PER_S, color="tab:red", linewidth=width)
        ax.plot(t.send_ns[bad] / NS_PER_S, rows[bad], "x", color="tab:red", markersize=3)
        shown = f"{t.drawn} of {t.total_requests} requests" if t.drawn < t.total_requests else f"{t.drawn} requests"
        ax.set_title(f"{t.label}: {shown}", fontsize=9, loc="left")
        ax.set_ylabel("request (send order)", fontsize=8)
        ax.set_ylim(-1, max(t.drawn, 1))
        ax.invert_yaxis()
        ax.grid(alpha=0.25, axis="x")
    axes[-1, 0].set_xlabel("time since the window start (s)")
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=list(axes[:, 0]), extend="both", fraction=0.03, pad=0.01,
                 label="per-token ITL (ms): chunk gap / its tokens")
    fig.suptitle(title + "\ngrey: send to first token (TTFT); coloured: decode, per chunk gap; red: an error",
                 fontsize=10)
    return png(fig)



_REQUESTS_SQL = ("SELECT request_index, actual_send_ns, first_chunk_ns, last_chunk_ns, error FROM requests "
                 "WHERE run_key = ?")
_CHUNKS_SQL = ("SELECT request_index, chunk_index, arrival_ns, tokens FROM chunks WHERE run_key = ? "
               "AND request_index IN (SELECT unnest(?))")


def run_timelines(results: Results, runs: Sequence[tuple[str, str]], max_bars: int = MAX_BARS,
                  seed: int = 0) -> list[Timeline]:
    """The Timeline of each (run_key, label), its requests drawn by sample_indices and only their chunks read."""
    con = connect(results, reads="SELECT * FROM requests, chunks")
    try:
        out = []
        for run_key, label in runs:
            req = con.execute(_REQUESTS_SQL, [run_key]).df()
            drawn = sample_indices(req["request_index"], max_bars, seed)
            ch = con.execute(_CHUNKS_SQL, [run_key, [int(i) for i in drawn]]).df()
            out.append(build_timeline(label, req[req["request_index"].isin(drawn)], ch, len(req)))
        return out
    finally:
        con.close()


@dataclass(frozen=True)
class TimelineFigure:
    """One load point's timeline figure for the report."""

    workload: str
    load_kind: str
    load_value: float
    png: bytes = field(repr=False)
    caption: str


def report_timelines(results: Results, runs: pd.DataFrame, labels: dict[str, str], seed: int = 0,
                     max_bars: int = MAX_BARS) -> list[TimelineFigure]:
    """Per workload and load point, one figure whose panels are the first ok repeat of each variant (plan order)."""
    ok = runs[runs["status"] == "ok"].sort_values(["order_index", "repeat"])
    out = []
    for (workload, kind, value), g in ok.groupby(["workload", "load_kind", "load_value"], sort=True):
        first = g.drop_duplicates("variant")
        shown = [(str(r.run_key), f"{labels.get(str(r.variant), r.variant)} (repeat {r.repeat})")
                 for r in first.itertuples(index=False)]
        panels = run_timelines(results, shown, max_bars, seed)
        point = point_label(str(kind), float(value))
        out.append(TimelineFigure(
            str(workload), str(kind), float(value),
            timeline_plot(panels, f"{workload} at {point}: every request from send to last token"),
            f"{workload} at {point}: the requests of each variant's first ok repeat, from send to last token in send "
            f"order; grey to the first token, then each chunk gap coloured by its per-token ITL; red: an error; "
            f"{caption_sampling(panels, seed)}."))
    return out
