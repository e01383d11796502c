"""The checkpoint's file boundary: every probe read (config, index, shard header, quantization and hub metadata).

Each read goes through cluster/input_files.py (regular files only, opened O_NONBLOCK so a FIFO cannot hang it, a
size limit, NUL paths refused), after a stat-only look that names what stands there instead of a file (a directory,
a FIFO, a symlink loop, a dangling symlink) in the probe's words. Every failure is a CheckpointError naming the file.
Strings taken from a checkpoint's JSON must be Unicode text: a lone surrogate escape (`"\\ud800"`) decodes to a str
no UTF-8 stream can print, so it is refused here rather than as a traceback in whatever prints it later.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any, Optional

from cluster.errors import UserError, one_line
from cluster.input_files import DuplicateJsonKey as _DuplicateKey
from cluster.input_files import unique_keys as _unique_keys
from cluster.input_files import (DEFAULT_LIMIT_BYTES, MIB, decode_text, has_lone_surrogate,
                                 JsonValue, json_depth_exceeds, parse_json, read_input_bytes)

METADATA_LIMIT_BYTES = 16 * MIB
"""config.json, hf_quant_config.json, generation_config.json and hub metadata: real ones are a few KB."""
INDEX_LIMIT_BYTES = DEFAULT_LIMIT_BYTES
"""model.safetensors.index.json: a 400B MoE's weight_map names ~400k tensors (tens of MB)."""
MESSAGE_VALUE_CHARS = 80
"""A value quoted in an error message is cut to this many characters (one line, whatever the file holds)."""


class CheckpointError(UserError):
    """A bad checkpoint file; the message is one printable line naming the file and what is wrong."""

    def __init__(self, file: str, message: str, *, field: Optional[str] = None, expected: Optional[str] = None) -> None:
        super().__init__(one_line(f"{file}: {message}"), file=file, field=field, expected=expected)
        self.message = one_line(message)


class CheckpointReadError(CheckpointError):
    """A CheckpointError raised inside cluster/input_files.py, whose error classes take UserError's signature."""

    def __init__(self, message: str, *, file: Optional[str] = None, field: Optional[str] = None,
                 expected: Optional[str] = None) -> None:
        UserError.__init__(self, one_line(message), file=file, field=field, expected=expected)
        self.message = one_line(message.removeprefix(f"{file}: ") if file else message)


def clip(value: Any) -> str:
    """repr(value) cut to MESSAGE_VALUE_CHARS (a value from a file may be megabytes long or hold newlines)."""
    text = repr(value)
    return text if len(text) <= MESSAGE_VALUE_CHARS else text[:MESSAGE_VALUE_CHARS] + "…"


def describe_non_file(path: str) -> Optional[str]:
    """What a path that should be a regular file is instead ("is a directory", "is a symlink loop", ...), or None
    when it is a regular file (following symlinks). Never opens it, so a FIFO cannot block the probe."""
    if "\x00" in path:
        return "contains a NUL byte"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "is a dangling symlink" if os.path.islink(path) else "does not exist"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symlink loop"
        return f"cannot be read: {e.strerror or e}"
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(st.st_mode):
            return f"is {what}, not a file"
    return None


def present(path: str) -> bool:
    """Whether anything stands at `path`, a dangling symlink or a loop included (so neither is silently skipped)."""
    return "\x00" not in path and os.path.lexists(path)


def check_file(path: str, expected: str, *, report_in: Optional[str] = None, field: Optional[str] = None) -> None:
    """CheckpointError unless `path` is a regular file; `report_in` names the file that pointed at it (the index)."""
    what = describe_non_file(path)
    if what is None:
        return
    if report_in is None:
        raise CheckpointError(path, f"{what} (expected {expected})", field=field, expected=expected)
    raise CheckpointError(report_in, f"{field or 'it'} names {path} but it {what}", field=field, expected=expected)


def read_bytes(path: str, what: str, *, limit_bytes: int = METADATA_LIMIT_BYTES, offset: int = 0,
               length: Optional[int] = None) -> bytes:
    """The bytes of a checkpoint file (or `length` of them from `offset`): a regular file, at most `limit_bytes`."""
    check_file(path, f"a {what}")
    return read_input_bytes(path, CheckpointReadError, what, limit_bytes=limit_bytes, offset=offset, length=length)


def read_text(path: str, what: str, *, limit_bytes: int = METADATA_LIMIT_BYTES) -> str:
    """A checkpoint file's UTF-8 text (BOM dropped)."""
    return decode_text(read_bytes(path, what, limit_bytes=limit_bytes), path, CheckpointReadError, what)


def parse_object(text: str, path: str, what: str) -> dict[str, JsonValue]:
    """A JSON object from a checkpoint file, each key once (the decoder would keep the last value and drop the
    first silently); depth, digit-limit and syntax failures as input_files words them."""
    data: Any = None
    if json_depth_exceeds(text):
        data = parse_json(text, path, CheckpointReadError, what, expected="a JSON object")  # raises
    else:
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except _DuplicateKey as e:
            raise CheckpointError(path, f"{what} has duplicate key {clip(e.args[0])}", field=str(e.args[0]),
                                  expected="each key once") from None
        except (ValueError, RecursionError):
            data = parse_json(text, path, CheckpointReadError, what, expected="a JSON object")  # raises the same
    if not isinstance(data, dict):
        raise CheckpointError(path, f"expected a JSON object at the top level, got {type(data).__name__}",
                              expected="a JSON object")
    if "\\u" in text:
        check_unicode(data, path)
    return data


def read_json_object(path: str, what: str, *, limit_bytes: int = METADATA_LIMIT_BYTES) -> dict[str, JsonValue]:
    """Read a checkpoint JSON file that must hold an object."""
    return parse_object(read_text(path, what, limit_bytes=limit_bytes), path, what)


def check_unicode(data: Any, path: str) -> None:
    """CheckpointError naming the key path of the first string (key or value) that is not encodable as UTF-8."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        items: list[tuple[str, Any]]
        if isinstance(value, dict):
            items = [(f"{where}.{k}" if where else str(k), v) for k, v in value.items()]
            keys = list(value)
        elif isinstance(value, list):
            items = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
            keys = []
        else:
            keys, items = ([value] if isinstance(value, str) else []), []
        for s in keys:
            if has_lone_surrogate(s):
                raise CheckpointError(path, f"{where or '<root>'}: {clip(s)} holds a lone surrogate escape, not "
                                      "Unicode text", field=where or None, expected="Unicode text")
        stack.extend(items)


__all__ = ["INDEX_LIMIT_BYTES", "METADATA_LIMIT_BYTES", "CheckpointError", "CheckpointReadError", "check_file",
           "check_unicode", "clip", "describe_non_file", "parse_object", "present", "read_bytes",
           "read_json_object", "read_text"]
