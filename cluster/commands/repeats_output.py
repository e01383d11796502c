"""Repeats until sure as `results show` and the run summary print them: one line per point, where it stopped and
whether its interval reached the target (a point that ran out of repeats still wide reads as a warning)."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Optional, Union

import pandas as pd
import typer

from cluster.analysis.results import Results
from cluster.commands.result_tables import Format, console, emit
from cluster.config.repeats import REPEATS_UNTIL_TAG
from cluster.dataset.root import StoreError
from cluster.plan.repeats import GO_BELOW_MIN, STOP_MAX, STOP_NARROW, PointRepeats

FactValue = Union[str, int, float, bool, None]
_FIELDS = {f.name: f.type for f in fields(PointRepeats)}


def recorded_repeats(results: Results) -> list[PointRepeats]:
    """experiment.json's `repeats_until` (the driver's facts per point); [] when the experiment has none;
    StoreError naming the entry that is not a point's facts."""
    meta = results.meta()
    raw = None if meta is None else meta.get(REPEATS_UNTIL_TAG)
    if raw is None:
        return []
    where = f"experiment.json of {results.experiment!r}: {REPEATS_UNTIL_TAG}"
    if not isinstance(raw, list):
        raise StoreError(f"{where} is not a list", field=REPEATS_UNTIL_TAG, expected="a list of per-point facts")
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or set(entry) != set(_FIELDS):
            raise StoreError(f"{where}[{i}] is not a point's facts", field=f"{REPEATS_UNTIL_TAG}[{i}]",
                             expected="an object with exactly " + ", ".join(_FIELDS))
        out.append(PointRepeats(**entry))
    return out


def is_sure(p: PointRepeats) -> bool:
    """The point stopped because its interval reached the target (anything else is not vouched for)."""
    return p.stopped and p.reason == STOP_NARROW


def _pct(value: Optional[float]) -> str:
    return "no interval" if value is None else f"±{value:.1f} %"


def stop_text(p: PointRepeats) -> str:
    """Why the point's repeats stopped (or had not), with the half-width reached against the target."""
    reached, target = _pct(p.half_width_pct), f"±{p.target_half_width_pct:g} %"
    ok = "" if p.ok_repeats == p.repeats_done else f" ({p.ok_repeats} ok)"
    if is_sure(p):
        return f"narrow at {p.repeats_done} repeats{ok}: {reached} ≤ {target}"
    if p.half_width_pct is not None and p.half_width_pct <= p.target_half_width_pct:
        why = f"{reached} ≤ {target} but only {p.ok_repeats} ok repeats, fewer than min {p.min}"
    else:
        why = f"{reached} > {target}" if p.half_width_pct is not None else f"{reached} (fewer than 2 ok values)"
    if p.stopped and p.reason == STOP_MAX:
        return f"max {p.max} reached{ok}: {why}: not sure, the interval is wider than asked" \
            if p.ok_repeats >= p.min else f"max {p.max} reached{ok}: {why}: not sure"
    state = "fewer ok repeats than min" if p.reason == GO_BELOW_MIN else "the interval still too wide"
    return f"not stopped after {p.repeats_done} repeats{ok} ({state}): {why}: not sure, the experiment ended first"


def point_line(p: PointRepeats) -> str:
    """One point: variant, workload, load point, then stop_text (which says the repeats done); 'warning' first
    when not sure."""
    head = f"{p.variant} / {p.workload} / {p.load}: {stop_text(p)}"
    return head if is_sure(p) else f"warning {head}"


def repeats_json(points: list[PointRepeats]) -> list[dict[str, FactValue]]:
    """The facts as `--format json` carries them: the record's fields, `sure`, and the line printed."""
    return [{**asdict(p), "sure": is_sure(p), "stop": stop_text(p)} for p in points]


def emit_show(runs: pd.DataFrame, points: list[PointRepeats], fmt: Format, title: str) -> None:
    """`results show`: the runs, then the points' lines (table); with points, JSON is {"runs", "repeats_until"}."""
    if points and fmt is Format.json:
        typer.echo(json.dumps({"runs": json.loads(runs.to_json(orient="records")),
                               REPEATS_UNTIL_TAG: repeats_json(points)}, indent=2, ensure_ascii=False))
        return
    emit(runs, fmt, title=title)
    if fmt is Format.table:
        print_repeats(points)


def print_repeats(points: list[PointRepeats]) -> None:
    """The table format's lines (nothing when the experiment has no `repeats: {until}`)."""
    if not points:
        return
    console.print(f"repeats until sure (95 % interval of {points[0].metric}'s mean, docs/repeats.md):",
                  highlight=False)
    for p in points:
        line = point_line(p)
        style = None if is_sure(p) else "yellow"
        console.print(f"  {line}", style=style, highlight=False, soft_wrap=True, markup=False)
