"""The TTFT split `results show` and `compare` print under their tables for each prefill/decode point: each part
SGLang's servers report, its mean seconds per request and its share of the measured TTFT mean."""

from __future__ import annotations

import json

from cluster.analysis.results import Results

NOTE = ("parts: means per request over the window from the servers' Prometheus histograms (Δ_sum / Δ_count between "
        "the scrapes at or before the window's start and end), not per-request figures; decode's parts overlap "
        "prefill's in time, so the shares need not add to 100%; prefill_waiting is not a stage SGLang observes, the "
        "prefill queue part is sglang:queue_time_seconds (docs/deployments-facts.md §4)")


def ttft_parts_lines(results: Results) -> list[str]:
    """A small table per (variant, workload, load point) of ok runs with a split; none for a dataset without one."""
    from cluster.analysis.comparison import short_point_label
    from cluster.analysis.ttft_parts import part_rows

    runs = results.runs_table()
    if "ttft_parts_json" not in runs.column_names:
        return []
    points: dict[tuple[str, str, str], tuple[list[str], list[float]]] = {}
    cols = ["variant", "workload", "load_kind", "load_value", "status", "ttft_parts_json", "m_ttft_ms_mean"]
    for r in runs.select(cols).to_pylist():
        if r["status"] != "ok" or not r["ttft_parts_json"]:
            continue
        key = (str(r["variant"]), str(r["workload"]), short_point_label(r["load_kind"], r["load_value"]))
        docs, ttfts = points.setdefault(key, ([], []))
        docs.append(r["ttft_parts_json"])
        if r["m_ttft_ms_mean"] is not None:
            ttfts.append(float(r["m_ttft_ms_mean"]) / 1e3)
    lines: list[str] = []
    for (variant, workload, load), (docs, ttfts) in sorted(points.items()):
        ttft_s = sum(ttfts) / len(ttfts) if ttfts else None
        counted = sum(int(json.loads(d).get("requests_counted") or 0) for d in docs)
        measured = f"{ttft_s:.4f} s" if ttft_s is not None else "-"
        lines.append(f"{variant} / {workload} / {load}: TTFT split over {len(docs)} ok run(s), {counted} requests "
                     f"counted by the servers; measured TTFT mean {measured}")
        lines.append(f"  {'part':<30} {'seconds':>9} {'share':>7}")
        for row in part_rows(docs, ttft_s):
            share = f"{row.share:.1%}" if row.share is not None else "-"
            lines.append(f"  {row.part:<30} {row.seconds:>9.4f} {share:>7}")
    if lines:
        lines.append(NOTE)
    return lines


def print_ttft_parts(results: Results) -> None:
    """Under `show` and `compare` (tables): the TTFT split of each prefill/decode point."""
    from cluster.commands.result_tables import console

    for line in ttft_parts_lines(results):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
