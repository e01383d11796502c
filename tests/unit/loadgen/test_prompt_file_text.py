"""Prompt, trace and corpus files: non-JSON constants, non-text strings, ambiguous rows and CSV numbers refused."""

from __future__ import annotations

import pathlib
from typing import Callable

import pytest

from cluster.errors import PromptSourceError
from cluster.input_files import first_text_problem, has_lone_surrogate, parse_json, text_problem
from cluster.loadgen.conversations import load_conversations
from cluster.loadgen.datasets import load_jsonl_rows
from cluster.loadgen.text_prompts import corpus_text
from cluster.loadgen.traces import load_trace
from cluster.config.prompts import ConversationPrompts


def _write(tmp: pathlib.Path, name: str, body: str | bytes) -> pathlib.Path:
    p = tmp / name
    p.write_bytes(body.encode() if isinstance(body, str) else body)
    return p


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_non_json_constant_is_refused_in_every_json_source(tmp_path: pathlib.Path, literal: str) -> None:
    cases: list[tuple[Callable[[pathlib.Path], object], str, str, int]] = [
        (lambda p: load_jsonl_rows(p), "p.jsonl", '{"input_ids": [1, 2]}\n{"input_ids": [1, %s]}\n' % literal, 2),
        (lambda p: load_trace(p), "t.jsonl",
         '{"timestamp_s": 0, "input_tokens": 4, "output_tokens": 4}\n'
         '{"timestamp_s": %s, "input_tokens": 4, "output_tokens": 4}\n' % literal, 2),
        (lambda p: corpus_text(p), "c.jsonl", '{"text": "a"}\n{"text": "b", "w": %s}\n' % literal, 2),
        (lambda p: load_conversations(p, ConversationPrompts(source="sharegpt", path=str(p))), "s.json",
         '[{"conversations": [{"from": "human", "value": "hi"}], "score": %s}]' % literal, 1),
    ]
    for load, name, body, line in cases:
        path = _write(tmp_path, name, body)
        with pytest.raises(PromptSourceError, match=f"{name}:{line}: invalid JSON \\({literal} is not JSON"):
            load(path)


@pytest.mark.parametrize("escape,why", [("\\ud800", "lone surrogate"), ("\\udfff", "lone surrogate"),
                                         ("\\u0000", "NUL")])
def test_a_string_that_is_not_text_is_refused_at_its_row(tmp_path: pathlib.Path, escape: str, why: str) -> None:
    p = _write(tmp_path, "p.jsonl", '{"prompt": "fine"}\n\n{"prompt": "a %s b"}\n' % escape)
    with pytest.raises(PromptSourceError, match=f"p.jsonl:3: 'prompt' holds a {why}"):
        load_jsonl_rows(p)
    key = _write(tmp_path, "k.json", '[{"conversations": [{"from": "human", "value": "hi", "x%s": 1}]}]' % escape)
    with pytest.raises(PromptSourceError, match=f"k.json:1: .*\\(a key\\) holds a {why}"):
        load_conversations(key, ConversationPrompts(source="sharegpt", path=str(key)))


def test_a_surrogate_pair_escape_is_text(tmp_path: pathlib.Path) -> None:
    p = _write(tmp_path, "p.jsonl", '{"prompt": "smile \\ud83d\\ude00"}\n')
    (_, prompt), = load_jsonl_rows(p)
    assert prompt.text == "smile \U0001F600"


def test_text_problem_and_the_walk_agree() -> None:
    assert text_problem("ok \U0001F600") is None
    assert text_problem("a\x00b") == "holds a NUL character"
    assert "lone surrogate" in (text_problem("\ud800") or "")
    assert first_text_problem({"a": [1, {"b": "x\ud800"}]}) == ("a[1].b", text_problem("\ud800"))
    assert first_text_problem({"a": ["fine", 2.5, None]}) is None
    assert has_lone_surrogate("a\udc80") and not has_lone_surrogate("a\x00\U0001F600")


def test_parse_json_refuses_constants_only_when_asked(tmp_path: pathlib.Path) -> None:
    assert parse_json('{"x": NaN}', "f.json", PromptSourceError, "file")["x"] != 0
    with pytest.raises(PromptSourceError, match="NaN is not JSON"):
        parse_json('{"x": NaN}', "f.json", PromptSourceError, "file", allow_nan=False)


def test_a_row_with_both_prompt_and_input_ids_is_refused(tmp_path: pathlib.Path) -> None:
    p = _write(tmp_path, "p.jsonl", '{"prompt": "x"}\n{"input_ids": [3], "prompt": "y"}\n')
    with pytest.raises(PromptSourceError, match="p.jsonl:2: expected exactly one of 'prompt', 'input_ids', got both"):
        load_jsonl_rows(p)


@pytest.mark.parametrize("body,message", [
    (b"", "the corpus is empty"), (b" \n\t\r\n", "whitespace only"), (b"\xef\xbb\xbf\n", "the corpus is empty|white"),
    (b"one\ntwo \x00\n", "c.txt:2: the corpus holds a NUL"), (b"caf\xe9\n", "not UTF-8 text"),
])
def test_a_corpus_without_text_is_refused(tmp_path: pathlib.Path, body: bytes, message: str) -> None:
    with pytest.raises(PromptSourceError, match=message):
        corpus_text(_write(tmp_path, "c.txt", body))


def test_a_jsonl_corpus_of_blank_texts_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(PromptSourceError, match="no text to draw prompts from"):
        corpus_text(_write(tmp_path, "c.jsonl", '{"text": " "}\n{"text": ""}\n'))


HEADER = "timestamp_s,input_tokens,output_tokens\n"


@pytest.mark.parametrize("cell", ["1_0", "\u0661\u0660", "\uff11\uff10", "nan", "inf", "1e1", "+10", "0x10", "10.",
                                  ".5", "1\u00a00"])
def test_a_csv_count_is_ascii_digits(tmp_path: pathlib.Path, cell: str) -> None:
    p = _write(tmp_path, "t.csv", HEADER + f"0,10,5\n1,{cell},5\n")
    with pytest.raises(PromptSourceError, match="t.csv:3: input_tokens"):
        load_trace(p)


@pytest.mark.parametrize("cell", ["1_0", "\u0661", "nan", "inf", "-0", "1e", "0x1"])
def test_a_csv_time_is_an_ascii_number(tmp_path: pathlib.Path, cell: str) -> None:
    p = _write(tmp_path, "t.csv", HEADER + f"0,10,5\n{cell},10,5\n")
    with pytest.raises(PromptSourceError, match="t.csv:3: timestamp_s"):
        load_trace(p)


def test_csv_numbers_a_writer_emits_are_read(tmp_path: pathlib.Path) -> None:
    rows = load_trace(_write(tmp_path, "t.csv", HEADER + "0,10,5\n1.5, 12 ,6.0\n1.7e1,3,4\n"))
    assert [(r.timestamp_s, r.input_tokens, r.output_tokens) for r in rows] == [(0, 10, 5), (1.5, 12, 6), (17, 3, 4)]


def test_an_unclosed_quote_is_refused_at_its_record(tmp_path: pathlib.Path) -> None:
    p = _write(tmp_path, "t.csv", HEADER + '0,10,5\n1,10,"5\n')
    with pytest.raises(PromptSourceError, match="t.csv:3: not a CSV record \\(a quoted field is not closed"):
        load_trace(p)


def test_two_time_columns_are_refused_at_the_header(tmp_path: pathlib.Path) -> None:
    p = _write(tmp_path, "t.csv", "\n\ntimestamp_s,timestamp_ms,input_tokens,output_tokens\n0,,10,5\n")
    with pytest.raises(PromptSourceError, match=r"t.csv:3: the CSV header needs timestamp_s \(or timestamp_ms, not "):
        load_trace(p)


BAD_INPUTS = pathlib.Path(__file__).parents[2] / "data" / "bad_inputs"
ROW_CASES = sorted(p.name for p in BAD_INPUTS.iterdir()
                   if p.name.startswith(("prompt_", "trace_", "sharegpt_", "text_corpus_"))
                   and "command=validate" in (p / "spec.yaml").read_text().splitlines()[0])


@pytest.mark.parametrize("case", ROW_CASES)
def test_a_prompt_row_error_points_at_the_experiments_line_too(case: str, tmp_path: pathlib.Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The row's own field (input_ids, timestamp_s) is named in the message; the error's field is the spec's, so
    the experiment's line is said as well (a row field as the field lost it)."""
    import re
    import shutil

    from tests.unit.config.test_bad_inputs import _invoke

    shutil.copytree(BAD_INPUTS / case, tmp_path / case)
    monkeypatch.chdir(tmp_path / case)
    code, out = _invoke(["validate", "spec.yaml"])
    assert code == 2, out
    assert re.search(r"^error: spec\.yaml:\d+: workloads\.0\.prompts\.(path|tokenizer|max_input_tokens): ", out,
                     re.M), out


def test_a_nul_in_a_csv_trace_is_refused_at_its_line(tmp_path: pathlib.Path) -> None:
    p = _write(tmp_path, "t.csv", "timestamp_s,input_tokens,output_tokens,note\n0,10,5,a\n1,10,5,b\x00c\n")
    with pytest.raises(PromptSourceError, match="t.csv:3: the CSV holds a NUL character"):
        load_trace(p)
