"""Request traces: per-request timestamps with input and output lengths from a CSV or JSONL file, replayed with the
trace's own lengths and its arrival pattern rescaled to each load point's mean rate.

A row is `timestamp_s` (or `timestamp_ms`), `input_tokens`, `output_tokens` — a JSONL object per line, or a CSV
with those column names in its header. Timestamps must not decrease (a trace is a recording, in order). The first
`num_requests` rows are replayed: each prompt is seeded random ids of the row's input length, its max_tokens the
row's output length, and its send time the row's offset from the first row, scaled so the window's mean rate
(n - 1 gaps over the last offset) is the load point's request_rate; the bursts and lulls keep their proportions.
Malformed rows are errors naming file:line; nothing is skipped.
"""

from __future__ import annotations

import csv
import json
import pathlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cluster.errors import PromptSourceError
from cluster.loadgen.source_files import read_source_text

TIME_FIELDS = {"timestamp_s": 1.0, "timestamp_ms": 1e-3}
"""A row's time column → seconds per unit."""
LENGTH_FIELDS = ("input_tokens", "output_tokens")


class TraceError(PromptSourceError):
    """A trace that cannot be read or replayed: the message names file:line, the field and what was expected."""


@dataclass(frozen=True)
class TraceRow:
    line: int
    timestamp_s: float
    input_tokens: int
    output_tokens: int


def _row(path: pathlib.Path, line: int, obj: Any) -> TraceRow:
    where = f"{path}:{line}"
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected an object with timestamp_s, input_tokens and output_tokens",
                         file=where)
    times = [k for k in TIME_FIELDS if obj.get(k) not in (None, "")]
    if len(times) != 1:
        raise TraceError(f"{where}: expected exactly one of timestamp_s, timestamp_ms, got "
                         f"{', '.join(times) or 'neither'}", file=where, field="timestamp_s",
                         expected="one timestamp column")
    try:
        t = float(obj[times[0]]) * TIME_FIELDS[times[0]]
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {times[0]} {obj[times[0]]!r} is not a number", file=where, field=times[0],
                         expected="a number") from None
    if not np.isfinite(t) or t < 0:
        raise TraceError(f"{where}: {times[0]} {obj[times[0]]!r} must be a finite time >= 0", file=where,
                         field=times[0], expected="a finite time >= 0")
    lengths = []
    for k in LENGTH_FIELDS:
        v = obj.get(k)
        n = -1
        if isinstance(v, str):  # a CSV cell
            try:
                f = float(v)
                n = int(f) if f.is_integer() else -1
            except ValueError:
                pass
        elif isinstance(v, int) and not isinstance(v, bool):
            n = v
        elif isinstance(v, float) and v.is_integer():
            n = int(v)
        if n < 1:
            raise TraceError(f"{where}: {k} {v!r} must be a whole number of tokens >= 1", file=where, field=k,
                             expected="an integer >= 1")
        lengths.append(n)
    return TraceRow(line, t, lengths[0], lengths[1])


def load_trace(path: pathlib.Path) -> list[TraceRow]:
    """Every row of a trace file (CSV by its .csv suffix, else JSONL), in order."""
    raw = read_source_text(path, TraceError, "trace file")
    rows: list[TraceRow] = []
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(raw.splitlines())
        missing = [k for k in LENGTH_FIELDS if k not in (reader.fieldnames or [])]
        if missing or not set(TIME_FIELDS) & set(reader.fieldnames or []):
            raise TraceError(f"{path}:1: the CSV header needs timestamp_s (or timestamp_ms), input_tokens and "
                             f"output_tokens, got {reader.fieldnames}", file=f"{path}:1", expected="a header row")
        for rec in reader:
            rows.append(_row(path, reader.line_num, rec))
    else:
        for lineno, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise TraceError(f"{path}:{lineno}: invalid JSON ({e.args[0] if e.args else e})",
                                 file=f"{path}:{lineno}", expected="one JSON object per line") from None
            rows.append(_row(path, lineno, obj))
    if not rows:
        raise TraceError(f"{path}: no trace rows", file=str(path), expected="at least one row")
    for a, b in zip(rows, rows[1:]):
        if b.timestamp_s < a.timestamp_s:
            raise TraceError(f"{path}:{b.line}: timestamp goes back in time ({b.timestamp_s:g} s after "
                             f"{a.timestamp_s:g} s at line {a.line}); a trace is replayed in the order recorded",
                             file=f"{path}:{b.line}", field="timestamp_s", expected="non-decreasing timestamps")
    return rows


def replayed_rows(rows: Sequence[TraceRow], n: int, path: pathlib.Path) -> Sequence[TraceRow]:
    """The first `n` rows (a window replays a stretch of the recording, never a cycled one)."""
    if n > len(rows):
        raise TraceError(f"{path}: num_requests {n} is more than the trace's {len(rows)} rows", file=str(path),
                         field="num_requests", expected=f"at most {len(rows)}")
    return rows[:n]


def recorded_rate_per_s(arrival_s: Sequence[float]) -> float:
    """The trace stretch's own mean rate: n - 1 gaps over its span."""
    span = arrival_s[-1] - arrival_s[0] if arrival_s else 0.0
    if len(arrival_s) < 2 or span <= 0:
        raise ValueError("a trace stretch needs two or more rows at different times to have a rate")
    return (len(arrival_s) - 1) / span


def trace_offsets_ns(arrival_s: Sequence[float], rate_per_s: float) -> np.ndarray:
    """Send offsets (ns from the first send) of the recorded arrivals rescaled to mean rate `rate_per_s`: every gap
    is multiplied by recorded rate / rate_per_s, so (n - 1) / last offset = rate_per_s exactly."""
    if not rate_per_s > 0:
        raise ValueError(f"rate must be positive, got {rate_per_s}")
    a = np.asarray(arrival_s, dtype=np.float64)
    if a.size == 1:
        return np.zeros(1, dtype=np.int64)
    scale = recorded_rate_per_s(list(a)) / rate_per_s
    out: np.ndarray = np.round((a - a[0]) * scale * 1e9).astype(np.int64)
    return out
