"""Typed reads of the JSON a live server answers with (meta_info, usage, /server_info): a field of the wrong type
is a MalformedAnswerError naming the field and what was expected, never a TypeError or a str in an int column.

SGLang 0.5.23 and vLLM send counts as non-negative JSON integers, finish_reason as null, a string or an object
with a string `type`, ids as lists of integers (reference/sglang-0.5.23.md §3.2). A JSON boolean is not an integer
here, although Python's bool is one. These reads run only off the streaming hot path: on a stream's finishing or
otherwise unusual chunks, the gate's answers, smoke's checks and info documents.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import Any, Callable, Optional

from cluster.errors import EngineFault
from cluster.input_files import MAX_JSON_DEPTH, JsonObject, JsonValue


MAX_COUNT = 2**31 - 1
"""A token or step count past this is malformed: no request holds 2^31 tokens, and the requests table stores the
counts as int32 (a larger one would fail the window's write)."""


class MalformedAnswerError(EngineFault):
    """A server's answer is not what its protocol promises (HTTP framing, size, JSON, a field's type or range):
    exit 4, the server is at fault. The message names the field and what was expected."""


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 4, 4, 60, 60, 40


def shown(value: Any) -> str:
    """A value as an error message shows it: its JSON type and a short repr."""
    kind = ("null" if value is None else "a boolean" if isinstance(value, bool) else "an integer" if isinstance(
        value, int) else "a number" if isinstance(value, float) else "a string" if isinstance(value, str) else
        "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__)
    text = _REPR.repr(value)  # bounded in depth and length: a value may nest hundreds of levels deep
    return f"{kind} {text}" if value is not None else kind


def _bad(where: str, expected: str, value: Any) -> MalformedAnswerError:
    return MalformedAnswerError(f"{where}: expected {expected}, got {shown(value)}")


def decode_json(raw: bytes, where: str) -> Any:
    """A JSON document from a server's bytes; every decoder failure (bytes, syntax, nesting past MAX_JSON_DEPTH,
    the digit limit) is a MalformedAnswerError. The decoder runs first, at C speed (input_files' per-character
    depth scan would spend seconds of CPU on a 64 MiB answer after its deadline); what it decoded is then walked for
    depth, containers only, or it stopped itself with a RecursionError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedAnswerError(f"{where}: expected UTF-8 JSON, byte {e.start} is not UTF-8") from None
    too_deep = f"{where}: expected JSON nested at most {MAX_JSON_DEPTH} levels"
    try:
        doc = json.loads(text)
    except RecursionError:
        raise MalformedAnswerError(too_deep) from None
    except ValueError as e:  # JSONDecodeError, and an integer past sys.get_int_max_str_digits()
        raise MalformedAnswerError(f"{where}: expected JSON ({e.args[0] if e.args else e}): "
                                   f"{raw[:60]!r}") from None
    if _nests_deeper(doc, MAX_JSON_DEPTH):
        raise MalformedAnswerError(too_deep)
    return doc


def _nests_deeper(doc: Any, limit: int) -> bool:
    stack = [(doc, 1)] if isinstance(doc, (dict, list)) else []
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return True
        items = v.values() if isinstance(v, dict) else v
        stack.extend((x, depth + 1) for x in items if isinstance(x, (dict, list)))
    return False


def as_object(value: JsonValue, where: str, *, null_ok: bool = True) -> JsonObject:
    """`value` as a JSON object; null (or absent) is the empty object where `null_ok`."""
    if value is None and null_ok:
        return {}
    if not isinstance(value, dict):
        raise _bad(where, "an object", value)
    return value


def object_field(doc: JsonObject, key: str, where: str) -> JsonObject:
    return as_object(doc.get(key), f"{where}.{key}")


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_list(v: Any) -> bool:
    return isinstance(v, list)


def _is_number(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and v >= 0


def _field(doc: JsonObject, key: str, where: str, ok: Callable[[Any], bool], expected: str) -> Any:
    """doc[key] when `ok` says it has the right type; None when absent or null; else a MalformedAnswerError."""
    v = doc.get(key)
    if v is None or ok(v):
        return v
    raise _bad(f"{where}.{key}", expected, v)


def count_field(doc: JsonObject, key: str, where: str) -> Optional[int]:
    """A non-negative integer up to MAX_COUNT (a token count, a verify-step count); None when absent or null."""
    v = doc.get(key)
    if v is None or (type(v) is int and 0 <= v <= MAX_COUNT):  # without a call: this runs once per request
        return v
    raise _bad(f"{where}.{key}", "a non-negative integer" if type(v) is not int or v < 0 else
               f"a count of at most {MAX_COUNT}", v)


def count_list(value: JsonValue, where: str) -> Optional[list[int]]:
    """A field's value (`where` names it) as a list of counts, each as count_field takes it (SGLang's
    spec_correct_drafts_histogram: verify steps by the drafts they accepted); None when null or empty (SGLang's
    OpenAI details send [] for none)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise _bad(where, "a list", value)
    for i, x in enumerate(value):
        if type(x) is not int or not 0 <= x <= MAX_COUNT:
            raise _bad(f"{where}[{i}]", "a non-negative integer" if type(x) is not int or x < 0 else
                       f"a count of at most {MAX_COUNT}", x)
    return list(value) or None


def number_field(doc: JsonObject, key: str, where: str) -> Optional[float]:
    """A finite non-negative number (a latency, an acceptance length); None when absent or null."""
    v = _field(doc, key, where, _is_number, "a finite non-negative number")
    return None if v is None else float(v)


def str_field(doc: JsonObject, key: str, where: str) -> Optional[str]:
    v: Optional[str] = _field(doc, key, where, _is_str, "a string")
    return v


def list_field(doc: JsonObject, key: str, where: str) -> Optional[list[Any]]:
    v: Optional[list[Any]] = _field(doc, key, where, _is_list, "a list")
    return v


def ids_field(doc: JsonObject, key: str, where: str, last: Optional[int] = None) -> Optional[list[int]]:
    """A list of non-negative integer token ids (only its `last` ones, when that is all the caller keeps: a
    cumulative list is as long as the output); None when absent or null."""
    ids = list_field(doc, key, where)
    if ids is None:
        return None
    start = 0 if last is None else max(0, len(ids) - last)
    kept = ids if start == 0 else ids[start:]
    if not all(type(x) is int and x >= 0 for x in kept):
        i, x = next((i, x) for i, x in enumerate(kept, start) if type(x) is not int or x < 0)
        raise _bad(f"{where}.{key}[{i}]", "a non-negative integer token id", x)
    return kept


def finish_field(doc: JsonObject, key: str, where: str) -> tuple[Optional[str], Optional[str]]:
    """(finish reason, abort message): null, a string, or an object whose `type` is a string (SGLang native)."""
    v = doc.get(key)
    if v is None:
        return None, None
    if isinstance(v, str):
        return v, None
    fr = as_object(v, f"{where}.{key}", null_ok=False)
    kind = str_field(fr, "type", f"{where}.{key}")
    if kind is None:
        raise _bad(f"{where}.{key}.type", "a string", None)
    message = fr.get("message")
    why = message if isinstance(message, str) else shown(message) if message else ""
    return kind, (why or "aborted") if kind == "abort" else None


__all__ = ["MAX_COUNT", "MalformedAnswerError", "as_object", "count_field", "count_list", "decode_json",
           "finish_field", "ids_field", "list_field", "number_field", "object_field", "shown", "str_field"]
