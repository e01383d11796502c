"""The experiment file itself: read through cluster/input_files (a FIFO, a directory, a symlink loop, a NUL in the
path are SpecErrors naming the file, never a hang or a ValueError), a BOM dropped, and lines counted as an editor
counts them (YAML's other line breaks, U+2028, U+0085 and a lone CR inside a comment or a string, do not move the
reported line)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cluster.config.loader import load_spec, parse_spec_text
from cluster.config.fields import SpecError
from tests.unit.config.test_bad_inputs import VALID


@pytest.mark.timeout(10)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError) as info:
        load_spec(fifo)
    assert info.value.file == str(fifo) and "a FIFO, not a regular file" in info.value.message


def test_a_symlink_loop_is_named_as_a_loop(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(SpecError) as info:
        load_spec(a)
    assert info.value.file == str(a) and "symlink loop" in info.value.message


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert "a directory, not a regular file" in info.value.message


def test_a_nul_byte_in_the_path_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(str(tmp_path / "spec\x00.yaml"))
    assert "NUL byte" in info.value.message and "\x00" not in str(info.value)


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + VALID.encode())
    assert load_spec(path).name == "demo"


@pytest.mark.parametrize("brk", ["\u2028", "\u2029", "\x85"])
def test_other_yaml_line_breaks_do_not_move_the_reported_line(brk: str) -> None:
    """A simulator GPU name is free text (it is JSON to the server, never an argv word), so it may hold one."""
    text = f'sim:\n  gpu_name: "RTX{brk}PRO"\n' + VALID.replace("repeats: 2", "repeats: 0")
    with pytest.raises(SpecError) as info:
        parse_spec_text(text, "x.yaml")
    assert (info.value.line, info.value.field) == (22, "repeats")


@pytest.mark.parametrize("literal", ["0x" + "f" * 4000, "1" * 4301, "-" + "9" * 4400])
def test_integers_past_the_digit_limit_are_located(literal: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec_text(VALID.replace("repeats: 2", f"repeats: {literal}"), "x.yaml")
    assert (info.value.line, info.value.field) == (20, "repeats")
    assert f"({sys.get_int_max_str_digits()})" in info.value.message and len(str(info.value)) < 300


def test_an_error_stays_one_line_whatever_it_quotes(tmp_path: Path) -> None:
    """A key, a file name or a value with a line break is escaped in the message (the CLI prints one error line)."""
    with pytest.raises(SpecError) as info:
        parse_spec_text(VALID + 'server:\n  env:\n    "A\\nB\\u2028C": x\n', "x.yaml")
    assert info.value.field == "server.env.A\nB\u2028C" and "\n" not in str(info.value) and "\u2028" not in str(info.value)
    path = tmp_path / "two\nlines.yaml"
    path.write_text(VALID.replace("repeats: 2", "repeats: 0"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.file == str(path) and str(info.value).startswith(f"{tmp_path}/two\\nlines.yaml:20: repeats")


@pytest.mark.parametrize(("literal", "fragment"), [("1:30", "base-60"), ("-1:00:00", "base-60"), ("0755", "octal"),
                                                   ("1:30.5", "base-60")])
def test_yaml11_number_forms_are_refused_not_converted(literal: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec_text(VALID + f"health_timeout_s: {literal}\n", "x.yaml")
    assert (info.value.line, info.value.field) == (21, "health_timeout_s") and fragment in info.value.message


@pytest.mark.parametrize("literal", ["0", "0.5", "0x1f", "1_000", "'1:30'", "1e3"])
def test_plain_numbers_and_quoted_text_still_read(literal: str) -> None:
    try:
        parse_spec_text(VALID + f"server:\n  args:\n    some-flag: {literal}\n", "x.yaml")
    except SpecError as e:
        pytest.fail(str(e))


@pytest.mark.parametrize(("output", "fragment"), [
    ("S3://bucket/x", "lowercase (s3://"), ("s4://bucket/x", "URI scheme 's4'"), ("s3:bucket/x", "written s3://"),
    ("hdfs:/x", "written hdfs://"), ("ftp://host/x", "URI scheme 'ftp'")])
def test_an_output_uri_pyarrow_cannot_open_is_refused(output: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec_text(VALID + f"output: {output}\n", "x.yaml")
    assert (info.value.line, info.value.field) == (21, "output") and fragment in info.value.message


@pytest.mark.parametrize("output", ["results", "../shared/results", "/data/r", "s3://bucket/prefix", "gs://b/p",
                                    "file:///tmp/r", "C:/results"])
def test_an_output_location_that_opens_is_accepted(output: str) -> None:
    assert parse_spec_text(VALID + f"output: {output}\n", "x.yaml").output == output


def test_a_secret_with_a_newline_is_refused_without_showing_it() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec_text(VALID + 'server:\n  env:\n    HF_TOKEN: "hf_abcdefSECRET\\n"\n', "x.yaml")
    assert info.value.field == "server.env.HF_TOKEN" and "contains a newline" in info.value.message
    assert "SECRET" not in str(info.value) and "hf_abc" not in str(info.value)
