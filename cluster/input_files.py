"""Bounded reads of the files a user hands sglbench: one definition of how an external input file is opened.

Every boundary that reads a user's file (prompt and trace files, checkpoint config/index/headers, the results root)
reads it through here, so each read is bounded the same way:

- the path may not hold a NUL byte (the OS would refuse it with a ValueError, not an OSError);
- symlinks are resolved, and a loop is said to be a loop (not "does not exist");
- only a regular file is read where a file is expected: a FIFO, a socket or a device would block or never end,
  so the file is opened with O_NONBLOCK and fstat-checked before a byte is read;
- at most `limit_bytes` are read; a larger file is refused, never truncated silently;
- text is UTF-8; a leading byte-order mark is dropped (an editor's BOM is not part of the data);
- JSON parsing turns every failure the decoder can raise (deep nesting's RecursionError, an integer past Python's
  digit limit) into the caller's own error.

Each function takes the error class of the caller's boundary, so the message and the exit code are that
boundary's (a prompt file's PromptSourceError, a checkpoint's CheckpointError, ...), and names the file.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import re
import stat
from typing import Any, Mapping, Optional, Sequence, TypeAlias, Union

from cluster.errors import SglbenchError, UserError

MIB = 1024 * 1024
DEFAULT_LIMIT_BYTES = 256 * MIB
"""A prompt file, trace or metadata file past this is refused (a caller may pass its own, smaller limit)."""
MAX_JSON_DEPTH = 64
"""Nesting past this in a user's JSON is refused before the decoder recurses (the spec loader's own limit too)."""

PathLike = Union[str, "os.PathLike[str]"]

JsonValue: TypeAlias = Union[None, bool, int, float, str, Sequence["JsonValue"], Mapping[str, "JsonValue"]]
"""A decoded JSON value (what json.loads returns), typed so that a reader narrows it with isinstance before use.
Sequence and Mapping (not list and dict) so that a list[str] or a dict[str, int] is one too."""
JsonObject: TypeAlias = Mapping[str, JsonValue]
"""A decoded JSON object: a document read field by field (a checkpoint's config.json, an answer body)."""


def _fail(error: type[UserError], path: PathLike, message: str, field: Optional[str] = None,
          expected: Optional[str] = None) -> UserError:
    return error(f"{path}: {message}", file=str(path), field=field, expected=expected)


def check_path_text(path: PathLike, error: type[UserError], what: str, field: Optional[str] = None) -> None:
    """Refuse a path the OS could not open as given: a NUL byte (or an empty path)."""
    text = os.fspath(path)
    if not text:
        raise error(f"{what}: the path is empty", field=field, expected="a path to a file")
    if "\x00" in text:
        raise error(f"{what}: the path {text!r} contains a NUL byte", field=field,
                    expected="a path without NUL bytes")


def resolve_input(path: PathLike, error: type[UserError], what: str, field: Optional[str] = None,
                  *, directory: bool = False) -> pathlib.Path:
    """The path with its symlinks resolved; `error` when it is missing, a symlink loop, or not a regular file
    (or not a directory, with `directory=True`). Does not open it."""
    check_path_text(path, error, what, field)
    p = pathlib.Path(path)
    try:
        resolved = p.resolve(strict=True)
    except FileNotFoundError:
        raise _fail(error, path, f"{what} not found", field, f"an existing {what}") from None
    except RuntimeError:  # Python < 3.13 reports a symlink loop as RuntimeError
        raise _fail(error, path, f"{what} is a symlink loop", field, f"a {what} that resolves") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _fail(error, path, f"{what} is a symlink loop", field, f"a {what} that resolves") from None
        raise _fail(error, path, f"cannot resolve the {what}: {e.strerror or e}", field) from None
    try:
        st = resolved.stat()
    except OSError as e:
        raise _fail(error, path, f"cannot read the {what}: {e.strerror or e}", field) from None
    if directory:
        if not stat.S_ISDIR(st.st_mode):
            raise _fail(error, path, f"{what} is not a directory", field, "a directory")
    elif not stat.S_ISREG(st.st_mode):
        raise _fail(error, path, f"{what} is {_kind(st.st_mode)}, not a regular file", field, "a regular file")
    return resolved


def symlink_loop_above(path: PathLike) -> Optional[pathlib.Path]:
    """The shallowest of `path` and its ancestors that is a symlink loop, or None. exists() is False inside a loop,
    so a walk up to the nearest existing directory would otherwise call a path under one creatable."""
    p = pathlib.Path(path)
    for q in reversed((p, *p.parents)):
        try:
            os.stat(q)
        except OSError as e:  # missing, or not a directory: nothing below it can loop
            return q if e.errno == errno.ELOOP else None
    return None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_input_bytes(path: PathLike, error: type[UserError], what: str, *,
                     limit_bytes: int = DEFAULT_LIMIT_BYTES, field: Optional[str] = None,
                     offset: int = 0, length: Optional[int] = None) -> bytes:
    """The file's bytes (or `length` bytes from `offset`), read from a regular file only, at most `limit_bytes`."""
    resolved = resolve_input(path, error, what, field)
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _fail(error, path, f"cannot open the {what}: {e.strerror or e}", field) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between resolve and open
            raise _fail(error, path, f"{what} is {_kind(st.st_mode)}, not a regular file", field, "a regular file")
        want = st.st_size - offset if length is None else length
        if want > limit_bytes:
            raise _fail(error, path, f"{what} is {want} bytes, past the {limit_bytes}-byte limit", field,
                        f"at most {limit_bytes} bytes")
        chunks: list[bytes] = []
        got = 0
        os.lseek(fd, offset, os.SEEK_SET)
        while got < want:
            chunk = os.read(fd, min(want - got, 4 * MIB))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if length is None and os.read(fd, 1):  # grew while read: past what was sized, so refuse
            raise _fail(error, path, f"{what} grew while it was read", field, "a file nothing writes to")
        return b"".join(chunks)
    except OSError as e:
        raise _fail(error, path, f"cannot read the {what}: {e.strerror or e}", field) from None
    finally:
        os.close(fd)


MID_FILE_BOM = "byte-order mark U+FEFF in the middle of the file"
"""The one wording for a BOM past the file's start, whichever parser meets it."""
_LINE_START_BOM = re.compile(rb"(?:^|[\r\n])\xef\xbb\xbf")


def mid_file_bom(data: bytes) -> Optional[tuple[int, int]]:
    """(line, byte offset in the file) of the first byte-order mark that starts a line, the file's own leading one
    not counted: what joining files that each begin with a BOM leaves, and what every parser would blame on
    something else (invalid JSON, a missing YAML key, a number that is not one). One inside a line is data."""
    skip = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    m = _LINE_START_BOM.search(data, skip)
    if m is None:
        return None
    at = m.end() - 3
    return data.count(b"\n", 0, at) + 1, at


def decode_text(data: bytes, path: PathLike, error: type[UserError], what: str,
                field: Optional[str] = None) -> str:
    """UTF-8 text of a file's bytes, a leading BOM dropped; `error` naming the byte offset when not UTF-8 or when a
    byte-order mark starts a later line."""
    bom = mid_file_bom(data)
    if bom is not None:
        raise _fail(error, path, f"line {bom[0]}: {MID_FILE_BOM} (byte offset {bom[1]}: files joined with their "
                    "BOMs?)", field, "UTF-8 text with a byte-order mark, if any, only at the start")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise _fail(error, path, f"line {line}: not UTF-8 text (byte {e.start}: {e.reason})", field,
                    "UTF-8 text") from None


def read_input_text(path: PathLike, error: type[UserError], what: str, *,
                    limit_bytes: int = DEFAULT_LIMIT_BYTES, field: Optional[str] = None) -> str:
    """The file's UTF-8 text (BOM dropped), bounded as read_input_bytes."""
    return decode_text(read_input_bytes(path, error, what, limit_bytes=limit_bytes, field=field), path, error, what,
                       field)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKETS = str.maketrans("{}", "[]")


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether brackets outside strings nest deeper than `limit` (no recursion), the answer json_depth_offset gives.

    The common case runs at C speed (a 400B model's shard headers and index are ~100 MB of JSON): strings and
    everything but brackets are dropped by regex, and each str.replace pass removes the innermost pairs; brackets
    gone within `limit` passes mean no deeper nesting. Anything else (deeper, or unbalanced) is decided by the
    exact scan."""
    rest = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)).translate(_BRACKETS)
    for _ in range(limit):
        if not rest:
            return False
        inner = rest.replace("[]", "")
        if inner == rest:
            break
        rest = inner
    if not rest:
        return False
    return json_depth_offset(text, limit) is not None


_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}"]', re.S)
"""A whole JSON string (skipped), a bracket, or a quote that opens a string never closed."""


def json_depth_offset(text: str, limit: int = MAX_JSON_DEPTH) -> Optional[int]:
    """The offset of the first bracket outside strings that nests deeper than `limit`, None when none does (so a
    caller can name the line). Linear; the regex skips whole strings, ~4x faster than a loop over characters."""
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        ch = text[m.start()]
        if ch == '"':
            if m.end() - m.start() == 1:
                return None  # an unterminated string: everything after it is inside it
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        else:
            depth -= 1
    return None


class DuplicateJsonKey(SglbenchError, ValueError):
    """A JSON object naming one key twice (raised by `unique_keys`): the decoder would keep the last value and drop
    the first silently. `key` is the repeated name."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, JsonValue]]) -> dict[str, JsonValue]:
    """A json `object_pairs_hook` that refuses a repeated key (DuplicateJsonKey) instead of keeping its last value."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise DuplicateJsonKey(k)
            seen.add(k)
    return out


class NotJsonConstant(SglbenchError, ValueError):
    """`NaN`, `Infinity` or `-Infinity` in a user's JSON (raised by `refuse_constant`): Python's decoder reads them,
    but they are not JSON (RFC 8259), and a NaN length or time compares false with every bound."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name} is not JSON; a number must be finite")
        self.name = name


def refuse_constant(name: str) -> Any:
    """A json `parse_constant` hook refusing NaN, Infinity and -Infinity (NotJsonConstant)."""
    raise NotJsonConstant(name)


def has_lone_surrogate(s: str) -> bool:
    """Whether a decoded string holds a lone surrogate (from an escape such as "\\ud800": UTF-8 bytes cannot hold
    one), so no UTF-8 stream can encode it."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def text_problem(s: str) -> Optional[str]:
    """Why a string decoded from a user's file is not text that can be sent on: it holds a NUL (which every C
    boundary, a tokenizer's included, may cut at) or a lone surrogate escape such as "\\ud800" (a str no UTF-8
    stream can encode); None when it is text."""
    if "\x00" in s:
        return "holds a NUL character"
    if has_lone_surrogate(s):
        return "holds a lone surrogate escape, not Unicode text"
    return None


def first_text_problem(value: Any) -> Optional[tuple[str, str]]:
    """(key path, why) of the first string (key or value) anywhere in a parsed JSON value that `text_problem`
    refuses; None when every string is text. Iterative: the depth is the decoder's, bounded by MAX_JSON_DEPTH."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, str):
            why = text_problem(v)
            if why is not None:
                return where or "<root>", why
        elif isinstance(v, dict):
            for k, item in v.items():
                key_path = f"{where}.{k}" if where else str(k)
                why = text_problem(str(k))
                if why is not None:
                    return key_path, f"(a key) {why}"
                stack.append((key_path, item))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(v))
    return None


def parse_json(text: str, path: PathLike, error: type[UserError], what: str, *, line: Optional[int] = None,
               field: Optional[str] = None, expected: str = "valid JSON", allow_nan: bool = True) -> Any:
    """json.loads with every decoder failure (syntax, deep nesting, an integer past the digit limit) as `error`;
    `allow_nan=False` refuses NaN/Infinity too (not JSON, though Python's decoder reads them)."""
    where = f"line {line}: " if line is not None else ""
    if json_depth_exceeds(text):
        raise _fail(error, path, f"{where}JSON nests more than {MAX_JSON_DEPTH} levels", field,
                    f"{expected}, nested at most {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text) if allow_nan else json.loads(text, parse_constant=refuse_constant)
    except RecursionError:
        raise _fail(error, path, f"{where}JSON nests too deeply", field, expected) from None
    except json.JSONDecodeError as e:
        if text.startswith("\ufeff", e.pos):
            at = (line or 1) + e.lineno - 1
            raise _fail(error, path, f"line {at}: {MID_FILE_BOM} (column {e.colno}), outside any JSON string", field,
                        expected) from None
        raise _fail(error, path, f"{where}invalid JSON ({e.args[0] if e.args else e}); expected {expected}", field,
                    expected) from None
    except ValueError as e:  # int() past sys.get_int_max_str_digits()
        raise _fail(error, path, f"{where}invalid JSON ({e.args[0] if e.args else e}); expected {expected}", field,
                    expected) from None


__all__ = ["DEFAULT_LIMIT_BYTES", "DuplicateJsonKey", "JsonObject", "JsonValue", "MAX_JSON_DEPTH", "MIB", "MID_FILE_BOM",
           "NotJsonConstant", "check_path_text", "mid_file_bom", "symlink_loop_above",
           "decode_text", "first_text_problem", "has_lone_surrogate", "json_depth_exceeds", "json_depth_offset",
           "parse_json", "read_input_bytes", "read_input_text", "refuse_constant", "resolve_input", "text_problem",
           "unique_keys"]
