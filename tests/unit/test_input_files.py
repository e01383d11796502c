"""The one bounded read of a user's file: each refusal names the file and is the caller's own error class."""

from __future__ import annotations

import os
import threading

import pytest

from cluster.errors import PromptSourceError
from cluster.input_files import parse_json, read_input_bytes, read_input_text, resolve_input


class _Err(PromptSourceError):
    pass


def test_reads_text_and_drops_a_bom(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"\xef\xbb\xbfhello\r\n")
    assert read_input_text(p, _Err, "prompt file") == "hello\r\n"


def test_fifo_is_refused_without_blocking(tmp_path):
    p = tmp_path / "fifo"
    os.mkfifo(p)
    done = threading.Event()
    errors: list[BaseException] = []

    def go() -> None:
        try:
            read_input_bytes(p, _Err, "config file")
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            errors.append(e)
        done.set()

    threading.Thread(target=go, daemon=True).start()
    assert done.wait(5), "reading a FIFO blocked"
    assert isinstance(errors[0], _Err) and "FIFO" in str(errors[0]) and str(p) in str(errors[0])


def test_symlink_loop_is_named_a_loop(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(_Err, match="symlink loop"):
        resolve_input(a, _Err, "prompt file")


def test_missing_directory_nul_and_size(tmp_path):
    with pytest.raises(_Err, match="not found"):
        read_input_bytes(tmp_path / "nope", _Err, "prompt file")
    with pytest.raises(_Err, match="a directory, not a regular file"):
        read_input_bytes(tmp_path, _Err, "prompt file")
    with pytest.raises(_Err, match="NUL"):
        read_input_bytes(str(tmp_path / "a\x00b"), _Err, "prompt file")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2000)
    with pytest.raises(_Err, match="past the 1000-byte limit"):
        read_input_bytes(big, _Err, "prompt file", limit_bytes=1000)
    assert read_input_bytes(big, _Err, "header", offset=10, length=5) == b"xxxxx"


def test_not_utf8_names_the_line(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    with pytest.raises(_Err, match="line 2: not UTF-8"):
        read_input_text(p, _Err, "prompt file")


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100000 + "]" * 100000, "nests more than"),
    ("1" * 5000, "invalid JSON"),
    ('{"a": ', "invalid JSON"),
])
def test_parse_json_failures_are_the_callers_error(text, fragment):
    with pytest.raises(_Err, match=fragment):
        parse_json(text, "f.json", _Err, "config")


def test_parse_json_depth_ignores_brackets_in_strings():
    assert parse_json('{"a": "' + "[" * 200 + '"}', "f.json", _Err, "config") == {"a": "[" * 200}
