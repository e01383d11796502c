"""A prefill/decode run's TTFT split into the parts its servers report (runs.ttft_parts_json): each role's mean per
request of each stage histogram, from the servers' scraped _sum and _count series aligned to the window."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Sequence

import pyarrow as pa

from cluster.engines.base import PartHistogram

ROLES = ("prefill", "decode")
"""The roles whose servers' parts are split (a process named <role>-<index>, cluster/kernel/deployment.py)."""

CATALOG_PARTS: dict[str, str] = {
    "ttft_bootstrap_ms": "prefill_bootstrap_s",
    "ttft_queue_ms": "prefill_queue_s",
    "ttft_transfer_ms": "prefill_transfer_kv_cache_s",
}
"""The run metrics (metric_catalog, in ms) read from a part (in s) of the split."""


@dataclass(frozen=True)
class TtftParts:
    """One run's split: each part's mean per request (key `<role>_<part>_<unit>`, in the histogram's unit) and the
    requests its histograms counted over the window; `unaligned`: servers without a scrape at or before the window
    start, left out."""

    means: dict[str, float]
    counts: dict[str, int]
    unaligned: tuple[str, ...] = ()

    @property
    def requests_counted(self) -> int:
        """The most requests any part counted (a part counts a request when the request leaves that stage)."""
        return max(self.counts.values(), default=0)

    def as_json(self) -> str:
        doc: dict[str, object] = dict(sorted(self.means.items()))
        doc["counts"] = dict(sorted(self.counts.items()))
        doc["requests_counted"] = self.requests_counted
        if self.unaligned:
            doc["unaligned"] = list(self.unaligned)
        return json.dumps(doc, sort_keys=False)

    def catalog_figures(self) -> dict[str, Optional[float]]:
        """The run metrics of CATALOG_PARTS, in ms (None where the part was not observed)."""
        return {name: self.means[part] * 1e3 if part in self.means else None for name, part in CATALOG_PARTS.items()}


def _labels(text: Optional[str]) -> dict[str, str]:
    """server_metrics' `k=v,k=v` labels (a value holding a comma stays whole: it continues the previous one)."""
    out: dict[str, str] = {}
    last = ""
    for piece in (text or "").split(","):
        key, sep, value = piece.partition("=")
        if sep and key.isidentifier():
            out[key], last = value, key
        elif last:
            out[last] += "," + piece
    return out


def _role(process: str) -> Optional[str]:
    role, _, index = process.rpartition("-")
    return role if role in ROLES and index.isdigit() else None


def _part_key(h: PartHistogram, role: str, labels: dict[str, str]) -> Optional[str]:
    """SGLang's own names: a stage label already names its role (prefill_bootstrap); other parts get the role."""
    part = labels.get(h.split_label) if h.split_label else h.part
    if not part:
        return None
    return f"{part if part.startswith(role + '_') else f'{role}_{part}'}_{h.unit}"


def ttft_parts(batch: Optional[pa.RecordBatch], duration_s: float,
               histograms: Sequence[PartHistogram]) -> Optional[TtftParts]:
    """The split of one window, None when no part histogram was scraped from a prefill or decode server.

    Aligned to the window: for each server (the scraper's `process` label, e.g. decode-1), its counters at its last
    scrape at or before the window start (t_ns <= 0) and at its first scrape at or after the window end (t_ns >=
    duration: the scraper closes every window with one, after the last answer, so a window shorter than the scrape
    interval is still counted whole; its last scrape when none came after); a part is Σ Δ_sum / Σ Δ_count over the role's servers and label sets (a mean weighted by the requests
    each counted, not a mean of means). The resolution is one scrape interval at each edge: a request observed
    between the edge and the scrape before it counts on the other side. A series first seen after the start scrape
    counts from 0 (Prometheus clients create a labelled series at its first observation); a series whose count fell
    (a restart) is left out, and so is a server with no scrape at or before the start (named in `unaligned`). These
    are the servers' histograms, not per-request figures; a server that reports on every TP rank
    (enable_metrics_for_all_schedulers) counts each request once per rank, which leaves the means as they are."""
    if batch is None or not batch.num_rows or not histograms:
        return None
    of_series = {name: h for h in histograms for name in h.series}
    cols = batch.to_pydict()
    end_ns = int(duration_s * 1e9)
    scrapes: dict[str, set[int]] = {}
    values: dict[tuple[str, str, str], dict[int, float]] = {}  # (process, metric, labels) -> t -> value
    for t, name, text, value in zip(cols["t_ns"], cols["metric"], cols["labels"], cols["value"]):
        process = _labels(text).get("process", "")
        if _role(process) is None:
            continue
        scrapes.setdefault(process, set()).add(t)
        if name in of_series and value is not None:
            values.setdefault((process, name, text or ""), {})[t] = float(value)
    if not values:
        return None
    edges: dict[str, tuple[int, int]] = {}
    unaligned = []
    for process, times in sorted(scrapes.items()):
        before = [t for t in times if t <= 0]
        if not before:
            unaligned.append(process)
            continue
        after = [t for t in times if t >= end_ns]
        edges[process] = (max(before), min(after) if after else max(times))
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for (process, name, text), at in values.items():
        h = of_series[name]
        if process not in edges or name != h.series[1]:
            continue
        start, end = edges[process]
        d_count = at.get(end, 0.0) - at.get(start, 0.0)
        sum_at = values.get((process, h.series[0], text), {})
        d_sum = sum_at.get(end, 0.0) - sum_at.get(start, 0.0)
        role = _role(process)
        key = _part_key(h, role, _labels(text)) if role else None
        if key is None or d_count < 0 or d_sum < 0:
            continue
        sums[key] = sums.get(key, 0.0) + d_sum
        counts[key] = counts.get(key, 0.0) + d_count
    means = {k: sums[k] / c for k, c in counts.items() if c > 0}
    return TtftParts(means=means, counts={k: int(round(c)) for k, c in counts.items()}, unaligned=tuple(unaligned))


STAGE_ORDER = ("prefill_prepare", "prefill_bootstrap", "prefill_queue", "prefill_forward", "prefill_chunked_prefill",
               "prefill_transfer_kv_cache", "prefill_kv_transfer_bootstrap", "prefill_kv_transfer_alloc",
               "prefill_kv_transfer_latency", "decode_prepare", "decode_bootstrap", "decode_transferred",
               "decode_queue", "decode_waiting", "decode_fake_output", "decode_kv_transfer_bootstrap",
               "decode_kv_transfer_alloc", "decode_kv_transfer_latency")
"""The parts in the order a request meets them in SGLang's pipeline (req_time_stats.py SchedulerReqTimeStats),
each role's KV transfer figures after its stages; any other part follows, by name."""

_UNITS_S = {"s": 1.0, "ms": 1e-3}


@dataclass(frozen=True)
class PartRow:
    """One line of a shown split: the part (its key without the unit), its mean seconds per request over the runs
    that observed it, and that over the measured TTFT mean (None without one)."""

    part: str
    seconds: float
    share: Optional[float]


def part_rows(docs: Sequence[str], ttft_mean_s: Optional[float]) -> list[PartRow]:
    """The split of several runs of one point (their ttft_parts_json): each part's mean over the runs that have it,
    in seconds, in pipeline order."""
    per_part: dict[str, list[float]] = {}
    for text in docs:
        for key, value in json.loads(text).items():
            base, _, unit = key.rpartition("_")
            if unit in _UNITS_S and isinstance(value, (int, float)):
                per_part.setdefault(base, []).append(float(value) * _UNITS_S[unit])
    order = {p: i for i, p in enumerate(STAGE_ORDER)}
    rows = []
    for part in sorted(per_part, key=lambda p: (order.get(p, len(order)), p)):
        seconds = sum(per_part[part]) / len(per_part[part])
        rows.append(PartRow(part, seconds, seconds / ttft_mean_s if ttft_mean_s else None))
    return rows
