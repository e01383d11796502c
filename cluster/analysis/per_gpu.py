"""GPUs per deployment in the compare tables: the GPUs each run's deployment held, the per-GPU figures beside the
totals (metric_catalog's per_gpu metrics) and the note when the deployments compared at a point differ in GPUs."""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import pandas as pd

from cluster.analysis.metric_catalog import Mean, declared, metric, per_gpu, terminal_means

POINT = ("workload", "load_kind", "load_value")
GPUS_NOTE = "gpus_note"
"""The compare column holding the note ("" when the point's deployments hold the same known GPU count)."""


def _int(x: Any) -> Optional[int]:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return None
    return int(x)


def known_gpus(gpus: Any, tp: Any, launched: Any) -> Optional[int]:
    """The GPUs a runs row's deployment held, when known: its `gpus` column, where 0 (an endpoint already running)
    is not known; a row written before the column held its tp (one server each then) unless launched_by_sglbench
    says it is an endpoint."""
    stored = _int(gpus)
    if stored is not None:
        return stored if stored > 0 else None
    if launched is False:
        return None
    return _int(tp)


def run_gpus(runs: pd.DataFrame) -> list[Optional[int]]:
    """known_gpus of every runs row (the runs table's gpus, tp and launched_by_sglbench; each may be absent)."""
    n = len(runs)

    def col(name: str) -> Sequence[Any]:
        return runs[name].tolist() if name in runs.columns else [None] * n

    return [known_gpus(g, t, ln) for g, t, ln in zip(col("gpus"), col("tp"), col("launched_by_sglbench"))]


def cell_facts(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per cell of `keys`: `gpus` (the known GPUs of its deployment, None when not known) and
    `launched_by_sglbench` (False for an endpoint already running; runs written before that column: True)."""
    df = pd.DataFrame({k: runs[k] for k in keys})
    df["gpus"] = run_gpus(runs)
    launched = runs["launched_by_sglbench"] if "launched_by_sglbench" in runs.columns else [None] * len(runs)
    df["launched_by_sglbench"] = [v is not False for v in launched]
    out = df.groupby(list(keys), sort=False).agg(
        gpus=("gpus", lambda s: next((int(v) for v in s if _int(v) is not None), None)),
        launched_by_sglbench=("launched_by_sglbench", "all"))
    out["gpus"] = out["gpus"].astype("Int64")
    return out.reset_index()


def with_per_gpu(table: pd.DataFrame, suffixes: Sequence[str] = ("",)) -> pd.DataFrame:
    """`table` (one row per cell, with `gpus`) with every declared per-GPU metric whose total it holds: the total's
    column (and each of `suffixes`, e.g. _lo and _hi of an interval: the GPUs of a cell are one number, so the
    interval divides exactly) divided by the cell's GPUs; NaN where the GPUs are not known."""
    gpus = [_int(g) for g in table["gpus"]]
    order = [c for c in table.columns]
    for m in declared("per_gpu"):
        assert m.per_gpu_of is not None
        made = []
        for sfx in suffixes:
            src = f"{m.per_gpu_of}{sfx}"
            if src in table.columns:
                got = [per_gpu(None if pd.isna(v) else float(v), g) for v, g in zip(table[src], gpus)]
                table[f"{m.name}{sfx}"] = [math.nan if v is None else v for v in got]
                made.append(f"{m.name}{sfx}")
        if made:  # beside the total's columns
            order = [c for c in order if c not in made]
            at = max(order.index(f"{m.per_gpu_of}{sfx}") for sfx in suffixes if f"{m.per_gpu_of}{sfx}" in order)
            order[at + 1:at + 1] = made
    return table[order]


def gpus_note(gpus: Mapping[str, Optional[int]]) -> str:
    """The note for deployments compared side by side, variant → its GPUs (None: not known): "" when all hold the
    same known count, else each variant's GPUs and what to read instead."""
    known = {g for g in gpus.values() if g is not None}
    listed = ", ".join(f"{v} {g if g is not None else 'unknown (endpoint)'}" for v, g in gpus.items())
    if len(known) > 1:
        return f"deployments hold different GPU counts: {listed}: compare per-GPU figures"
    if known and None in gpus.values():
        return (f"deployments' GPU counts not all known: {listed}: an endpoint not launched by sglbench has no "
                "per-GPU figure")
    return ""


def with_gpus_notes(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with GPUS_NOTE per row: gpus_note over the variants compared at the row's point."""
    notes: dict[tuple[Any, ...], str] = {}
    for key, cell in table.groupby(list(POINT), sort=False):
        notes[tuple(key)] = gpus_note({str(v): _int(g) for v, g in zip(cell["variant"], cell["gpus"])})
    table[GPUS_NOTE] = [notes[tuple(r)] for r in table[list(POINT)].itertuples(index=False, name=None)]
    return table


def note_lines(table: pd.DataFrame) -> list[str]:
    """Each distinct note of `table` once, with the workload when the table holds several."""
    multi = table["workload"].nunique() > 1
    seen: dict[str, None] = {}
    for wl, note in zip(table["workload"], table[GPUS_NOTE]):
        if note:
            seen.setdefault(f"{wl}: {note}" if multi else note, None)
    return list(seen)


def terminal_gpus(table: pd.DataFrame) -> tuple[list[tuple[str, Mean]], bool, str]:
    """How the terminal's compare table (one workload's rows) states the GPUs: (its metric columns, of
    metric_catalog.terminal_means, whether it has a GPUs column, its title's part). Where the deployments' GPU counts differ or are not all known (a gpus_note),
    the GPUs column and the per-GPU figures beside the totals; where every one holds the same count, the title
    says it ('; 8 GPUs each') and the per-GPU columns (each total / that count, the same ratios) stay in CSV and
    JSON, so the table still fits 80 columns."""
    shown = terminal_means()
    if any(table[GPUS_NOTE]):
        return shown, True, ""
    counts = {_int(g) for g in table["gpus"]}
    n = counts.pop() if len(counts) == 1 else None
    title = f"; {n} GPU{'s' if n != 1 else ''} each" if n is not None else ""
    return [(n, m) for n, m in shown if metric(n).producer != "per_gpu"], False, title
