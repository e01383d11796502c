"""Each failure class of a prompt, trace, corpus, tokenizer or chat-template file: it ends in the source's own
PromptSourceError naming file:line, field and what was expected (never a traceback or a hang), and what JSON allows
inside a string (U+2028, U+2029, U+0085, form feeds) never splits a row."""

from __future__ import annotations

import json
import os
import pathlib
import threading
from typing import Any, Callable

import pytest

from cluster.engines.base import ChatTurn
from cluster.errors import PromptSourceError
from cluster.loadgen.chat_template import ChatTemplate, ChatTemplateError, load_chat_template
from cluster.loadgen.conversations import ConversationError, load_conversations
from cluster.loadgen.datasets import DatasetError, load_jsonl_rows
from cluster.loadgen.text_prompts import TextPromptError, corpus_text, load_tokenizer
from cluster.loadgen.traces import TraceError, load_trace
from cluster.config.prompts import ConversationPrompts

SEPARATORS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
"""Characters str.splitlines splits at that JSON allows unescaped inside a string."""


def _sharegpt() -> ConversationPrompts:
    return ConversationPrompts(source="sharegpt", path="x")


@pytest.mark.parametrize("sep", SEPARATORS)
def test_a_line_separator_inside_a_string_does_not_split_a_jsonl_row(tmp_path: pathlib.Path, sep: str) -> None:
    rows = [{"conversations": [{"from": "human", "value": f"a{sep}b"}, {"from": "gpt", "value": "c"}]},
            {"conversations": [{"from": "human", "value": "d"}, {"from": "gpt", "value": "e"}]}]
    f = tmp_path / "d.jsonl"
    f.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    got = load_conversations(f, _sharegpt())
    assert [(r.row, r.line, r.text) for r in got] == [(0, 1, f"a{sep}b"), (1, 2, "d")]
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"prompt": f"x{sep}y"}, ensure_ascii=False) + "\r\n" + json.dumps({"prompt": "z"}) + "\r\n",
                 encoding="utf-8")
    assert [(line, pr.text) for line, pr in load_jsonl_rows(p)] == [(1, f"x{sep}y"), (2, "z")]
    t = tmp_path / "t.jsonl"
    t.write_text(json.dumps({"timestamp_s": 0, "input_tokens": 1, "output_tokens": 1, "note": sep},
                            ensure_ascii=False) + "\n" + json.dumps({"timestamp_s": 1, "input_tokens": 2,
                                                                     "output_tokens": 1}) + "\n", encoding="utf-8")
    assert [(r.row, r.line, r.input_tokens) for r in load_trace(t)] == [(0, 1, 1), (1, 2, 2)]
    c = tmp_path / "c.jsonl"
    c.write_text(json.dumps({"text": f"one{sep}two"}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert corpus_text(c) == f"one{sep}two"


LOADERS: dict[str, tuple[str, Callable[[pathlib.Path], object], type[PromptSourceError]]] = {
    "sharegpt": ("d.json", lambda f: load_conversations(f, _sharegpt()), ConversationError),
    "jsonl": ("p.jsonl", load_jsonl_rows, DatasetError),
    "trace": ("t.jsonl", load_trace, TraceError),
    "corpus": ("c.jsonl", corpus_text, TextPromptError),
}


def _row_of(kind: str, value: str) -> str:
    """A row of `kind` whose one free field holds the raw JSON text `value`."""
    return {"sharegpt": '{"conversations": [{"from": "human", "value": "q"}], "x": %s}',
            "jsonl": '{"prompt": "p", "x": %s}',
            "trace": '{"timestamp_s": 0, "input_tokens": 1, "output_tokens": 1, "x": %s}',
            "corpus": '{"text": "t", "x": %s}'}[kind] % value


def _refused(kind: str, tmp_path: pathlib.Path, text: str) -> PromptSourceError:
    name, load, error = LOADERS[kind]
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    with pytest.raises(error) as info:
        load(f)
    assert info.value.file and info.value.file.startswith(str(f)), info.value.file
    assert info.value.expected, "every refusal says what was expected"
    return info.value


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize("array", [False, True])
def test_deep_nesting_is_refused_with_its_line(tmp_path: pathlib.Path, kind: str, array: bool) -> None:
    deep = "[" * 5000 + "]" * 5000  # json.loads raises RecursionError far before this
    good = _row_of(kind, "1")
    text = f"[\n{good},\n{_row_of(kind, deep)}\n]\n" if array else f"{good}\n{_row_of(kind, deep)}\n"
    err = _refused(kind, tmp_path, text)
    assert "nests more than" in str(err) and str(err.file).endswith(":3" if array else ":2"), str(err)


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize("array", [False, True])
def test_an_integer_past_the_digit_limit_is_refused_with_its_line(tmp_path: pathlib.Path, kind: str,
                                                                  array: bool) -> None:
    huge = "9" * 5000  # past sys.get_int_max_str_digits(): int() raises ValueError inside the decoder
    good = _row_of(kind, "1")
    text = f"[{good},\n{_row_of(kind, huge)}]" if array else f"{good}\n{_row_of(kind, huge)}\n"
    err = _refused(kind, tmp_path, text)
    assert "invalid JSON" in str(err) and str(err.file).endswith(":2"), str(err)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_syntax_error_inside_an_indented_array_names_its_own_line(tmp_path: pathlib.Path, kind: str) -> None:
    row = json.loads(_row_of(kind, "1"))
    body = json.dumps([row, row], indent=2)
    lines = body.split("\n")
    k = max(i for i, ln in enumerate(lines) if '"x": 1' in ln)
    lines[k] = lines[k].replace('"x": 1', '"x": 1,,')
    err = _refused(kind, tmp_path, "\n".join(lines))
    assert str(err.file).endswith(f":{k + 1}"), (str(err), k + 1)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_text_after_the_arrays_closing_bracket_is_refused(tmp_path: pathlib.Path, kind: str) -> None:
    good = _row_of(kind, "1")
    err = _refused(kind, tmp_path, f"[{good}]\n[{good}]\n")
    assert "after the JSON array" in str(err) and str(err.file).endswith(":2")


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_non_utf8_file_names_the_line(tmp_path: pathlib.Path, kind: str) -> None:
    name, load, error = LOADERS[kind]
    f = tmp_path / name
    f.write_bytes(_row_of(kind, "1").encode() + b"\n" + _row_of(kind, '"\xff\xfe"').encode("latin-1") + b"\n")
    with pytest.raises(error, match="line 2: not UTF-8"):
        load(f)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_fifo_is_refused_without_blocking(tmp_path: pathlib.Path, kind: str) -> None:
    name, load, error = LOADERS[kind]
    f = tmp_path / name
    os.mkfifo(f)
    caught: list[BaseException] = []
    t = threading.Thread(target=lambda: _catch(load, f, caught), daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # unblock the reader so the test process can end, then fail
        with open(f, "w"):
            pass
        pytest.fail("reading a FIFO blocked")
    assert len(caught) == 1 and isinstance(caught[0], error) and "FIFO" in str(caught[0])


def _catch(load: Callable[[pathlib.Path], object], f: pathlib.Path, out: list[BaseException]) -> None:
    try:
        load(f)
    except BaseException as e:  # noqa: BLE001 - the test inspects whatever escaped
        out.append(e)


def test_a_symlink_loop_is_named_as_a_loop(tmp_path: pathlib.Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(DatasetError, match="symlink loop"):
        load_jsonl_rows(a)


def test_a_csv_field_past_the_csv_modules_limit_names_its_line(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("timestamp_s,input_tokens,output_tokens,note\n0,1,1,ok\n1,1,1," + "x" * 200_000 + "\n")
    with pytest.raises(TraceError, match="not a CSV record") as info:
        load_trace(f)
    assert info.value.file == f"{f}:3"


def test_csv_rows_are_read_by_record_with_their_start_line(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text('timestamp_s,input_tokens,output_tokens,note\r\n0,1,1,"two\r\nlines"\r\n\r\n1,2,1,"a\u2028b"\r\n',
                 encoding="utf-8")
    assert [(r.row, r.line, r.input_tokens) for r in load_trace(f)] == [(0, 2, 1), (1, 5, 2)]
    f.write_text("timestamp_s,input_tokens,output_tokens\n0,1,1,extra\n")
    with pytest.raises(TraceError, match="4 fields where the header has 3") as info:
        load_trace(f)
    assert info.value.file == f"{f}:2"


@pytest.mark.parametrize("cell,field", [("1" + "0" * 400, "timestamp_ms"), ("2000000", "input_tokens"),
                                        ("1" + "0" * 30, "output_tokens")])
def test_out_of_range_trace_numbers_name_their_field(tmp_path: pathlib.Path, cell: str, field: str) -> None:
    row: dict[str, Any] = {"timestamp_s": 0, "input_tokens": 1, "output_tokens": 1}
    if field == "timestamp_ms":
        del row["timestamp_s"]
    row[field] = int(cell)
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(TraceError) as info:  # an int past a float's range was an OverflowError traceback
        load_trace(f)
    assert info.value.field == field and info.value.file == f"{f}:1" and len(str(info.value)) < 400


def test_token_ids_and_prompt_lengths_have_domain_bounds(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"input_ids": [1, 2**31]}) + "\n")
    with pytest.raises(DatasetError, match="non-negative integers up to 2147483647") as info:
        load_jsonl_rows(f)
    assert info.value.field == "input_ids" and info.value.file == f"{f}:1"


def test_a_corpus_row_with_an_empty_text_is_kept(tmp_path: pathlib.Path) -> None:
    c = tmp_path / "c.jsonl"
    c.write_text('{"text": "", "prompt": "not this"}\n{"prompt": "b"}\n')
    assert corpus_text(c) == "\n\nb"
    c.write_text('{"text": 3}\n')
    with pytest.raises(TextPromptError, match="'text' or 'prompt'") as info:
        corpus_text(c)
    assert info.value.file == f"{c}:1" and info.value.field == "text"


@pytest.mark.parametrize("body", [b"{not json", b"[]", b'{"model": {"type": "Nope"}}', b"\xff\xfe"])
def test_a_malformed_tokenizer_json_is_a_text_prompt_error(tmp_path: pathlib.Path, body: bytes) -> None:
    f = tmp_path / "tokenizer.json"
    f.write_bytes(body)
    with pytest.raises(TextPromptError) as info:
        load_tokenizer(f)
    assert info.value.file == str(f)


def test_a_chat_template_that_raises_while_rendering_is_a_chat_template_error(tmp_path: pathlib.Path) -> None:
    tpl = ChatTemplate(tmp_path / "chat_template.jinja", "{{ messages[0]['content'] + 1 }}", "", "")
    with pytest.raises(ChatTemplateError, match="TypeError") as info:
        tpl.render((ChatTurn("user", "hi"),), {})
    assert info.value.file == str(tmp_path / "chat_template.jinja")
    loop = ChatTemplate(tmp_path / "t.jinja", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "", "")
    with pytest.raises(ChatTemplateError):
        loop.render((ChatTurn("user", "hi"),), {})


def test_a_tokenizer_config_that_cannot_be_parsed_names_the_file(tmp_path: pathlib.Path) -> None:
    cfg = tmp_path / "tokenizer_config.json"
    cfg.write_text('{"chat_template": ' + "[" * 3000 + "]" * 3000 + "}")
    with pytest.raises(ChatTemplateError, match="nests more than") as info:
        load_chat_template(tmp_path)
    assert info.value.file == str(cfg)
    cfg.unlink()
    os.mkfifo(cfg)
    with pytest.raises(ChatTemplateError, match="FIFO"):
        load_chat_template(tmp_path)


@pytest.mark.parametrize("field,value", [("timestamp_s", True), ("timestamp_s", "3"), ("input_tokens", "12"),
                                         ("output_tokens", False)])
def test_a_json_trace_row_takes_json_numbers_only(tmp_path: pathlib.Path, field: str, value: object) -> None:
    # float(True) is 1.0 and "12" was read as a CSV cell: both were accepted as numbers from a JSON row
    row: dict[str, object] = {"timestamp_s": 0, "input_tokens": 1, "output_tokens": 1, field: value}
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(TraceError) as info:
        load_trace(f)
    assert info.value.field == field and info.value.file == f"{f}:1"
    c = tmp_path / "t.csv"
    c.write_text("timestamp_s,input_tokens,output_tokens\n3,12,4.0\n")  # a CSV cell is text: numbers are parsed
    assert [(r.timestamp_s, r.input_tokens, r.output_tokens) for r in load_trace(c)] == [(3.0, 12, 4)]


def test_a_bad_row_of_a_compact_array_is_named_by_its_ordinal(tmp_path: pathlib.Path) -> None:
    # every row of a compact array is on line 1: "d.json:1" alone does not say which row is wrong
    good = {"conversations": [{"from": "human", "value": "q"}]}
    f = tmp_path / "d.json"
    f.write_text(json.dumps([good, good, {"conversations": [{"from": "robot", "value": "q"}]}]))
    with pytest.raises(ConversationError) as info:
        load_conversations(f, _sharegpt())
    assert info.value.file == f"{f}:1" and str(info.value).endswith("(source_row 2)")
    assert info.value.field == "conversations[0].from"
    p = tmp_path / "p.json"
    p.write_text(json.dumps([{"prompt": "a"}, {"prompt": ""}]))
    with pytest.raises(DatasetError, match=r"\(source_row 1\)$"):
        load_jsonl_rows(p)
    t = tmp_path / "t.json"
    t.write_text(json.dumps([{"timestamp_s": 1, "input_tokens": 1, "output_tokens": 1},
                             {"timestamp_s": 0, "input_tokens": 1, "output_tokens": 1}]))
    with pytest.raises(TraceError, match=r"goes back in time.*\(source_row 1\)$"):
        load_trace(t)


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize("array", [False, True])
def test_a_key_given_twice_in_a_row_is_refused(tmp_path: pathlib.Path, kind: str, array: bool) -> None:
    # json.loads keeps the last value of a repeated key: the first one was silently lost
    good = _row_of(kind, "1")
    twice = _row_of(kind, '{"a": 1, "a": 2}')
    err = _refused(kind, tmp_path, f"[{good},\n{twice}]" if array else f"{good}\n{twice}\n")
    assert "key 'a' appears twice" in str(err) and str(err.file).endswith(":2"), str(err)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_two_values_on_one_jsonl_line_are_refused(tmp_path: pathlib.Path, kind: str) -> None:
    good = _row_of(kind, "1")
    err = _refused(kind, tmp_path, f"{good}\n{good} {good}\n")
    assert "extra data" in str(err) and str(err.file).endswith(":2"), str(err)


def test_a_large_compact_array_is_read_in_linear_time(tmp_path: pathlib.Path) -> None:
    # each element's line was counted from the file's start: 20,000 rows of 13 MB took ~30 s (0.5 s now)
    import time

    rows = [{"conversations": [{"from": "human", "value": f"question {i} " * 20},
                               {"from": "gpt", "value": "answer " * 40}]} for i in range(20_000)]
    f = tmp_path / "d.json"
    f.write_text(json.dumps(rows))
    t0 = time.monotonic()
    got = load_conversations(f, _sharegpt())
    assert len(got) == 20_000 and got[-1].row == 19_999
    assert time.monotonic() - t0 < 15.0
