"""Request traces: per-request timestamps with input and output lengths from a CSV or JSONL file, replayed with the
trace's own lengths and its arrival pattern rescaled to each load point's mean rate.

A row is `timestamp_s` (or `timestamp_ms`), `input_tokens`, `output_tokens` — a JSONL object per line (or a JSON
array of them), or a CSV with those column names in its header (every record as many fields as the header; quoted
fields may hold newlines, so a row's line is where its record starts). A row's identity is its 0-based ordinal
(`TraceRow.row`, the prompt's source_row); its line is for messages. Timestamps must not decrease (a trace is a
recording, in order). The first `num_requests` rows are replayed: each prompt is seeded random ids of the row's
input length, its max_tokens the row's output length, and its send time the row's offset from the first row, scaled
so the window's mean rate (n - 1 gaps over the last offset) is the load point's request_rate; the bursts and lulls
keep their proportions. Malformed rows are errors naming file:line and the row; nothing is skipped. A JSON row's
numbers are JSON numbers; a CSV cell is text parsed as one.
"""

from __future__ import annotations

import csv
import io
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from cluster.errors import PromptSourceError
from cluster.loadgen.source_files import json_records, read_source_text, row_error, shown

TIME_FIELDS = {"timestamp_s": 1.0, "timestamp_ms": 1e-3}
"""A row's time column → seconds per unit."""
LENGTH_FIELDS = ("input_tokens", "output_tokens")
MAX_TRACE_TOKENS = 1_000_000
"""Most tokens a row may ask for, in or out: the spec's bound on a token count (cluster/config/workload.py TokenCount)."""


CSV_BLANKS = " \t"
"""Blanks around a CSV cell that are not part of its number ("10, 20" is a common way to write a row)."""
_CSV_COUNT = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_CSV_TIME = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
"""What a CSV cell's number may be. Python's int()/float() also read '1_0' as 10, Arabic-Indic or full-width digits,
'nan', 'inf' and surrounding Unicode spaces: none is a number a CSV writer emits, so each is refused, not guessed."""


class TraceError(PromptSourceError):
    """A trace that cannot be read or replayed: the message names file:line, the field and what was expected."""


@dataclass(frozen=True)
class TraceRow:
    row: int
    """0-based ordinal of the row in the trace: its identity."""
    line: int
    """Line where the row starts (for messages)."""
    timestamp_s: float
    input_tokens: int
    output_tokens: int


def _row(path: pathlib.Path, row: int, line: int, obj: Any, cells: bool = False) -> TraceRow:
    """A trace row from a JSON object, or from a CSV record's text `cells`. A JSON row's numbers must be JSON
    numbers: a quoted "12" or a boolean (Python's float(True) is 1.0) is refused, not read as a number."""

    def bad(message: str, field: Optional[str] = None, expected: Optional[str] = None) -> TraceError:
        return row_error(TraceError, path, line, row, message, field, expected)

    if not isinstance(obj, dict):
        raise bad("expected an object with timestamp_s, input_tokens and output_tokens",
                  expected="an object with timestamp_s, input_tokens and output_tokens")
    times = [k for k in TIME_FIELDS if obj.get(k) not in (None, "")]
    if len(times) != 1:
        raise bad(f"expected exactly one of timestamp_s, timestamp_ms, got {', '.join(times) or 'neither'}",
                  "timestamp_s", "one timestamp column")
    raw_t = obj[times[0]]
    if cells and not _CSV_TIME.fullmatch(raw_t.strip(CSV_BLANKS)):
        raise bad(f"{times[0]} {shown(raw_t)} is not a number of seconds (ASCII digits, an optional fraction and "
                  "exponent)", times[0], "a finite time >= 0, written like 12.5 or 1.7e9")
    if not cells and (isinstance(raw_t, bool) or not isinstance(raw_t, (int, float))):
        raise bad(f"{times[0]} {shown(raw_t)} is not a number of seconds (a JSON number)", times[0],
                  "a finite time >= 0, as a JSON number")
    try:
        t = float(raw_t) * TIME_FIELDS[times[0]]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer too large for a float
        raise bad(f"{times[0]} {shown(raw_t)} is not a number of seconds", times[0], "a finite time >= 0") from None
    if not np.isfinite(t) or t < 0:
        raise bad(f"{times[0]} {shown(raw_t)} must be a finite time >= 0", times[0], "a finite time >= 0")
    lengths = []
    for k in LENGTH_FIELDS:
        v = obj.get(k)
        n = -1
        if isinstance(v, str) and cells:
            if _CSV_COUNT.fullmatch(v.strip(CSV_BLANKS)):
                f = float(v)
                n = int(f) if f.is_integer() else -1
        elif isinstance(v, int) and not isinstance(v, bool):
            n = v
        elif isinstance(v, float) and v.is_integer():
            n = int(v)
        if not 1 <= n <= MAX_TRACE_TOKENS:
            raise bad(f"{k} {shown(v)} must be a whole number of tokens in [1, {MAX_TRACE_TOKENS}]", k,
                      f"an integer in [1, {MAX_TRACE_TOKENS}]")
        lengths.append(n)
    return TraceRow(row, line, t, lengths[0], lengths[1])


def load_trace(path: pathlib.Path) -> list[TraceRow]:
    """Every row of a trace file (CSV by its .csv suffix, else JSONL or a JSON array), in order."""
    raw = read_source_text(path, TraceError, "trace file")
    if path.suffix.lower() == ".csv":
        rows = _csv_rows(path, raw)
    else:
        rows = [_row(path, rec.row, rec.line, rec.value) for rec in
                json_records(path, raw, TraceError, "one JSON object per line (or a JSON array of objects)")]
    if not rows:
        raise TraceError(f"{path}: no trace rows", file=str(path), expected="at least one row")
    for a, b in zip(rows, rows[1:]):
        if b.timestamp_s < a.timestamp_s:
            raise row_error(TraceError, path, b.line, b.row, f"timestamp goes back in time ({b.timestamp_s:g} s "
                            f"after {a.timestamp_s:g} s at line {a.line}); a trace is replayed in the order recorded",
                            "timestamp_s", "non-decreasing timestamps")
    return rows


def _csv_rows(path: pathlib.Path, raw: str) -> list[TraceRow]:
    """The records of a CSV trace after its header, each with the line it starts on."""
    reader = csv.reader(io.StringIO(raw, newline=""), strict=True)  # strict: an unclosed quote is an error
    header: Optional[list[str]] = None
    rows: list[TraceRow] = []
    end_line = 0
    while True:
        start = end_line + 1
        try:
            rec = next(reader, None)
        except csv.Error as e:  # a field past the csv module's limit, a NUL, a stray quote
            why = "a quoted field is not closed before the end of the file" if str(e) == "unexpected end of data" \
                else str(e)
            raise TraceError(f"{path}:{start}: not a CSV record ({why})", file=f"{path}:{start}",
                             expected=f"CSV fields of at most {csv.field_size_limit()} characters, quotes "
                                      "closed") from None
        end_line = reader.line_num
        if rec is None:
            return rows
        if any("\x00" in cell for cell in rec):  # the csv module reads NUL as a character since Python 3.11
            raise TraceError(f"{path}:{start}: the CSV holds a NUL character, not text", file=f"{path}:{start}",
                             expected="UTF-8 text without NUL")
        if not rec or (len(rec) == 1 and not rec[0].strip()):
            continue  # a blank line
        if header is None:
            header = [h.strip() for h in rec]
            missing = [k for k in LENGTH_FIELDS if k not in header]
            if missing or len(set(TIME_FIELDS) & set(header)) != 1 or len(set(header)) < len(header):
                raise TraceError(f"{path}:{start}: the CSV header needs timestamp_s (or timestamp_ms, not both), "
                                 f"input_tokens and output_tokens, each once, got {shown(rec)}",
                                 file=f"{path}:{start}", expected="a header row")
            continue
        if len(rec) != len(header):
            raise TraceError(f"{path}:{start}: {len(rec)} fields where the header has {len(header)}",
                             file=f"{path}:{start}", expected=f"{len(header)} fields, as the header")
        rows.append(_row(path, len(rows), start, dict(zip(header, rec)), cells=True))


def replayed_rows(rows: Sequence[TraceRow], n: int, path: pathlib.Path) -> Sequence[TraceRow]:
    """The first `n` rows (a window replays a stretch of the recording, never a cycled one)."""
    if n > len(rows):
        raise TraceError(f"{path}: num_requests {n} is more than the trace's {len(rows)} rows", file=str(path),
                         field="num_requests", expected=f"at most {len(rows)}")
    return rows[:n]
