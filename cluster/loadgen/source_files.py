"""Reading a prompt source's file: its bounded UTF-8 text, and its rows as JSON records (a JSON array or JSONL),
each with its 0-based ordinal (its identity) and its line (for messages); every failure an error of the source's kind.

Identity and position are kept apart because they differ: a compact JSON array holds every row on line 1, so a
row is the ordinal-th record of its file and the line only says where to look. A JSONL file is split at "\\n" only
(a trailing "\\r" of CRLF dropped): `str.splitlines` would also split inside a string at U+2028, U+2029, U+0085,
"\\x0b", "\\x0c" or "\\x1c"-"\\x1e", which JSON allows unescaped.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from cluster.errors import PromptSourceError, UserError
from cluster.input_files import (MAX_JSON_DEPTH, MID_FILE_BOM, DuplicateJsonKey, NotJsonConstant, first_text_problem,
                                 json_depth_offset, read_input_text, refuse_constant, unique_keys)

E = TypeVar("E", bound=UserError)

JSON_WS = " \t\r\n"
"""JSON's whitespace (RFC 8259): str.strip() would also strip U+2028 and the other separators."""


@dataclass(frozen=True)
class SourceRecord:
    """One row of a prompt source's file."""

    row: int
    """0-based ordinal among the file's rows (blank JSONL lines are not rows): the row's identity."""
    line: int
    """1-based line where the row starts: where messages point, never an identity."""
    value: Any
    """The row's parsed JSON value (the caller checks its shape)."""


def shown(value: Any, limit: int = 60) -> str:
    """A value from a user's file for a message, cut short (a 4,000-digit number or a page of text is not repeated
    whole)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "(an integer of more than 40 digits)"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def row_error(error: type[E], path: pathlib.Path, line: int, row: int, message: str, field: Optional[str] = None,
              expected: Optional[str] = None) -> E:
    """`error` about one row: 'file:line: message (source_row N)', file = 'file:line'. The ordinal is named because
    a line need not be one row's (a compact JSON array holds every row on line 1)."""
    where = f"{path}:{line}"
    return error(f"{where}: {message} (source_row {row})", file=where, field=field, expected=expected)


def read_source_text(path: pathlib.Path, error: type[PromptSourceError], what: str,
                     field: Optional[str] = None) -> str:
    """The file's text, read through cluster/input_files.py (regular files only, bounded, BOM dropped, UTF-8);
    a missing, unreadable or non-text file raises `error` naming the file."""
    return read_input_text(path, error, what, field=field)


def _fail(error: type[PromptSourceError], path: pathlib.Path, line: int, message: str, expected: str,
          field: Optional[str] = None) -> PromptSourceError:
    where = f"{path}:{line}"
    return error(f"{where}: {message}", file=where, field=field, expected=expected)


def jsonl_lines(raw: str) -> list[tuple[int, str]]:
    """(1-based line, text) of every non-blank line, split at "\\n" only, a CRLF's "\\r" dropped."""
    out: list[tuple[int, str]] = []
    for lineno, line in enumerate(raw.split("\n"), start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if line.strip(JSON_WS):
            out.append((lineno, line))
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=unique_keys, parse_constant=refuse_constant)


def _decode(raw: str, i: int, path: pathlib.Path, line: int, error: type[PromptSourceError],
            expected: str) -> tuple[Any, int]:
    """The JSON value starting at raw[i] and where it ends; every decoder failure as `error` at its line (`line` is
    the line raw[i] is on, for failures without a position). NaN/Infinity are refused (not JSON), and so is a
    string holding a NUL or a lone surrogate: JSON can only spell either as a \\u escape, so only a row holding
    one is walked."""
    try:
        value, end = _DECODER.raw_decode(raw, i)
    except NotJsonConstant as e:
        raise _fail(error, path, line, f"invalid JSON ({e}); expected {expected}", expected) from None
    except DuplicateJsonKey as e:
        raise _fail(error, path, line, f"key {shown(e.key)} appears twice in one object (JSON keeps only the last)",
                    f"{expected}, each key once") from None
    except json.JSONDecodeError as e:
        at = line + raw.count("\n", i, e.pos)
        if raw.startswith("\ufeff", e.pos):  # where JSON has no string: not part of any value
            raise _fail(error, path, at, f"{MID_FILE_BOM} (column {e.colno}), outside any JSON string",
                        expected) from None
        raise _fail(error, path, at, f"invalid JSON ({e.msg}); expected {expected}", expected) from None
    except (ValueError, RecursionError) as e:  # an integer past Python's digit limit
        raise _fail(error, path, line, f"invalid JSON ({e}); expected {expected}", expected) from None
    if raw.find("\\u", i, end) != -1:
        bad = first_text_problem(value)
        if bad is not None:
            raise _fail(error, path, line, f"{shown(bad[0])} {bad[1]}",
                        f"{expected}, every string Unicode text without NUL")
    return value, end


def jsonl_records(path: pathlib.Path, raw: str, error: type[PromptSourceError], expected: str) -> list[SourceRecord]:
    """Every non-blank line of a JSONL file parsed (deep nesting, digit-limit, duplicate-key and syntax failures as
    `error` naming the line)."""
    out: list[SourceRecord] = []
    for lineno, text in jsonl_lines(raw):
        if json_depth_offset(text) is not None:
            raise _fail(error, path, lineno, f"JSON nests more than {MAX_JSON_DEPTH} levels",
                        f"{expected}, nested at most {MAX_JSON_DEPTH} levels")
        obj, end = _decode(text, _skip_ws(text, 0), path, lineno, error, expected)
        if _skip_ws(text, end) < len(text):
            raise _fail(error, path, lineno, f"invalid JSON (extra data after the row's value); expected {expected}",
                        expected)
        out.append(SourceRecord(len(out), lineno, obj))
    return out


def _line_at(raw: str, offset: int) -> int:
    return raw.count("\n", 0, offset) + 1


def _skip_ws(raw: str, i: int) -> int:
    while i < len(raw) and raw[i] in JSON_WS:
        i += 1
    return i


def array_records(path: pathlib.Path, raw: str, error: type[PromptSourceError], expected: str) -> list[SourceRecord]:
    """The elements of a JSON array file (raw starts with '[' after JSON whitespace), each with the line it starts
    on; anything after the closing ']' is an error."""
    deep = json_depth_offset(raw, MAX_JSON_DEPTH + 1)  # the array itself is one level
    if deep is not None:
        raise _fail(error, path, _line_at(raw, deep), f"JSON nests more than {MAX_JSON_DEPTH} levels",
                    f"{expected}, nested at most {MAX_JSON_DEPTH} levels")
    out: list[SourceRecord] = []
    i = _skip_ws(raw, raw.index("[") + 1)
    counted, line = 0, 1  # raw[:counted] holds line - 1 newlines: counting on from there keeps the scan linear
    if i < len(raw) and raw[i] == "]":
        i += 1
    else:
        while True:
            line += raw.count("\n", counted, i)
            counted = i
            start = line
            obj, i = _decode(raw, i, path, start, error, expected)
            out.append(SourceRecord(len(out), start, obj))
            i = _skip_ws(raw, i)
            if i < len(raw) and raw[i] == ",":
                i = _skip_ws(raw, i + 1)
                continue
            if i < len(raw) and raw[i] == "]":
                i += 1
                break
            raise _fail(error, path, _line_at(raw, i), "expected ',' or ']' after an array element", expected)
    i = _skip_ws(raw, i)
    if i < len(raw):
        raise _fail(error, path, _line_at(raw, i), "unexpected text after the JSON array's closing ']'", expected)
    return out


def json_records(path: pathlib.Path, raw: str, error: type[PromptSourceError], expected: str) -> list[SourceRecord]:
    """A file's rows: the elements of a JSON array when it starts with '[', else its JSONL lines."""
    if raw.lstrip(JSON_WS).startswith("["):
        return array_records(path, raw, error, expected)
    return jsonl_records(path, raw, error, expected)


__all__ = ["JSON_WS", "SourceRecord", "array_records", "json_records", "jsonl_lines", "jsonl_records", "read_source_text",
           "row_error", "shown"]
