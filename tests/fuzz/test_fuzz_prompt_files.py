"""Fuzz the prompt and trace file boundary: the same rows written as a compact JSON array, an indented one, JSONL,
with a BOM, with CRLF, with U+2028/U+2029 and the other line separators inside strings (and a trace as CSV) are read
as the same rows; mutated bytes, structure and numbers end only in this project's UserError, within a deadline;
N distinct rows are sent as min(N, requests) distinct prompts; and what a loader accepts is RFC 8259 JSON of text
(no NaN, NUL or lone surrogate), unambiguous jsonl rows, a corpus with text, a CSV of ASCII numbers and closed quotes
(a header defect said at the header's line)."""

from __future__ import annotations

import csv
import io
import json
import pathlib
import re
import tempfile
import time
from typing import Any, Callable, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.errors import UserError
from cluster.input_files import json_depth_offset
from cluster.loadgen.conversations import load_conversations
from cluster.loadgen.datasets import load_jsonl_rows
from cluster.loadgen.prompt_sources import build_prompts
from cluster.loadgen.text_prompts import corpus_text
from cluster.loadgen.traces import load_trace
from cluster.config.workload import WorkloadSpec
from cluster.config.prompts import ConversationPrompts
from tests.fuzz.fuzzing import FUZZ, budget

DEADLINE_S = 5.0
"""A load of a small fuzzed file that takes longer than this is a finding (a hang or a quadratic path)."""

TRICKY = "\u2028\u2029\x85\x0b\x0c\x1c\x1d\x1e\r\n\t\"\\{}[],:\ufeff é中😀"
TEXT = st.text(alphabet=st.sampled_from(TRICKY) | st.characters(codec="utf-8", exclude_categories=["Cs"],
                                                                  exclude_characters="\x00"),  # NUL: not text
               min_size=1, max_size=24).filter(lambda s: s.strip() != "")
CATEGORY = st.sampled_from(["code", "chat", "math.v2", "a_b-c"])


@st.composite
def sharegpt_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 8))
    return [{"category": draw(CATEGORY), "id": i,
             "conversations": [{"from": "human", "value": draw(TEXT)}, {"from": "gpt", "value": draw(TEXT)}]}
            for i in range(n)]


def _as_messages(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"category": r["category"], "messages": [{"role": "user", "content": r["conversations"][0]["value"]},
                                                     {"role": "assistant", "content": r["conversations"][1]["value"]}]}
            for r in rows]


PROMPT_ROW = st.one_of(st.builds(lambda t: {"prompt": t}, TEXT),
                       st.builds(lambda ids: {"input_ids": ids}, st.lists(st.integers(0, 2**31 - 1), min_size=1,
                                                                          max_size=6)))


@st.composite
def trace_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    gaps = draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=8))
    t, out = 0, []
    for g in gaps:
        t += g
        out.append({"timestamp_ms": t, "input_tokens": draw(st.integers(1, 10**6)),
                    "output_tokens": draw(st.integers(1, 10**6)), "note": draw(TEXT)})
    return out


def encodings(rows: list[dict[str, Any]]) -> dict[str, bytes]:
    """The same rows in every JSON layout a user's file may have."""
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    out = {"compact": json.dumps(rows, ensure_ascii=False, separators=(",", ":")),
           "indented": json.dumps(rows, ensure_ascii=False, indent=2),
           "ascii-array": json.dumps(rows),
           "jsonl": "\n".join(lines) + "\n",
           "jsonl-blank-lines": "\n\n" + "\n \n".join(lines),
           "jsonl-crlf": "\r\n".join(lines) + "\r\n",
           "array-crlf": json.dumps(rows, ensure_ascii=False, indent=1).replace("\n", "\r\n")}
    data = {k: v.encode("utf-8") for k, v in out.items()}
    data["jsonl-bom"] = b"\xef\xbb\xbf" + data["jsonl"]
    data["array-bom"] = b"\xef\xbb\xbf" + data["indented"]
    return data


def _read_all(load: Callable[[pathlib.Path], list[Any]], rows: list[dict[str, Any]], suffix: str) -> list[list[Any]]:
    with tempfile.TemporaryDirectory() as d:
        got = []
        for name, data in encodings(rows).items():
            f = pathlib.Path(d) / f"{name}{suffix}"
            f.write_bytes(data)
            got.append(load(f))
        return got


@FUZZ
@given(sharegpt_rows(), st.booleans())
def test_conversation_rows_read_the_same_from_every_encoding(rows: list[dict[str, Any]], messages: bool) -> None:
    src = ConversationPrompts(source="messages" if messages else "sharegpt", path="x")
    data = _as_messages(rows) if messages else rows
    want = [(i, r["category"], r["conversations"][0]["value"], r["conversations"][1]["value"])
            for i, r in enumerate(rows)]
    for got in _read_all(lambda f: [(c.row, c.category, c.text, c.reference) for c in load_conversations(f, src)],
                         data, ".json"):
        assert got == want


@FUZZ
@given(st.lists(PROMPT_ROW, min_size=1, max_size=8))
def test_jsonl_prompts_read_the_same_from_every_encoding(rows: list[dict[str, Any]]) -> None:
    want = [(i, r.get("prompt"), tuple(r["input_ids"]) if "input_ids" in r else None) for i, r in enumerate(rows)]
    for got in _read_all(lambda f: [(p.source_row, p.text, p.input_ids) for _, p in load_jsonl_rows(f)], rows,
                         ".jsonl"):
        assert got == want


def _csv(rows: list[dict[str, Any]], crlf: bool) -> bytes:
    buf = io.StringIO(newline="")
    # with "\n" line ends the writer would leave a bare "\r" unquoted, which RFC 4180 reads as a line end
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\r\n" if crlf else "\n",
                       quoting=csv.QUOTE_MINIMAL if crlf else csv.QUOTE_NONNUMERIC)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue().encode("utf-8")


@FUZZ
@given(trace_rows())
def test_trace_rows_read_the_same_from_every_encoding_and_csv(rows: list[dict[str, Any]]) -> None:
    want = [(i, r["timestamp_ms"] / 1000, r["input_tokens"], r["output_tokens"]) for i, r in enumerate(rows)]

    def read(f: pathlib.Path) -> list[Any]:
        return [(r.row, round(r.timestamp_s, 6), r.input_tokens, r.output_tokens) for r in load_trace(f)]

    want = [(i, round(t, 6), a, b) for i, t, a, b in want]
    for got in _read_all(read, rows, ".jsonl"):
        assert got == want
    with tempfile.TemporaryDirectory() as d:
        for crlf in (False, True):
            for bom in (b"", b"\xef\xbb\xbf"):
                f = pathlib.Path(d) / "t.csv"
                f.write_bytes(bom + _csv(rows, crlf))
                assert read(f) == want


def _prompts_of(source: str, n: int, **kw: Any) -> Callable[[pathlib.Path], object]:
    """What a load actor does with the file: `n` prompts of a workload over it (read, selected, sampled)."""
    def build(f: pathlib.Path) -> object:
        wl = WorkloadSpec.model_validate({"name": "w", "num_requests": n, "prompts": {"source": source, "path": str(f)},
                                          **{"input_tokens": "dataset", "output_tokens": "dataset", **kw}})
        return build_prompts(wl, n, 0, f.parent)
    return build


LOADERS: dict[str, tuple[str, Callable[[pathlib.Path], object]]] = {
    "sharegpt": (".json", _prompts_of("sharegpt", 3, output_tokens=4)),
    "messages": (".json", _prompts_of("messages", 3, output_tokens=4)),
    "jsonl": (".jsonl", _prompts_of("jsonl", 3, input_tokens=4, output_tokens=4)),
    "trace": (".jsonl", _prompts_of("trace", 1)),
    "trace-csv": (".csv", _prompts_of("trace", 1)),
    "corpus": (".jsonl", corpus_text),
}

SPLICES = [b"[" * 200, b"{" * 70, b"9" * 4400, b"1e999", b"-1", b"NaN", b"\x00", b"\xff\xfe", b"\xc3", b'"',
           b"\\", b",", b"]", b"}", b"\n", b"\r", b"\xe2\x80\xa8", b"null", b"true", b"[]", b"{}", b'""',
           b"\xef\xbb\xbf", b'"x' * 70_000]


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "splice", "truncate"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            k = min(at, len(data) - 1)
            data[k] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[at:at] = bytes([draw(st.integers(0, 255))])
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 8))]
        elif op == "splice":
            data[at:at] = draw(st.sampled_from(SPLICES))
        else:
            del data[at:]
    return bytes(data)


def _seed_files() -> dict[str, list[bytes]]:
    conv = [{"category": "code", "conversations": [{"from": "human", "value": "q\u2028x"},
                                                   {"from": "gpt", "value": "a"}]},
            {"category": "chat", "conversations": [{"from": "human", "value": "r"}, {"from": "gpt", "value": "b"}]}]
    trace = [{"timestamp_ms": 0, "input_tokens": 3, "output_tokens": 2, "note": "n"},
             {"timestamp_ms": 5, "input_tokens": 4, "output_tokens": 1, "note": "m"}]
    pick = ("compact", "indented", "jsonl-crlf")
    return {"sharegpt": [encodings(conv)[k] for k in pick],
            "messages": [encodings(_as_messages(conv))[k] for k in pick],
            "jsonl": [encodings([{"prompt": "p"}, {"input_ids": [1, 2]}])[k] for k in pick],
            "trace": [encodings(trace)[k] for k in pick],
            "trace-csv": [_csv(trace, False), _csv(trace, True)],
            "corpus": [encodings([{"text": "t"}, {"prompt": "u"}])[k] for k in pick]}


SEEDS = _seed_files()


@settings(FUZZ, max_examples=budget(1000))  # cheap (~4 ms an example): more mutations for the same time
@given(st.data())
def test_mutated_prompt_files_raise_only_user_errors_within_a_deadline(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(sorted(LOADERS)))
    body = data.draw(mutated(data.draw(st.sampled_from(SEEDS[kind]))))
    _load_only_user_errors(kind, body)


def _load_only_user_errors(kind: str, body: bytes) -> None:
    """Load `body` as a file of `kind`: it parses, or a UserError naming the file escapes, within DEADLINE_S."""
    suffix, load = LOADERS[kind]
    with tempfile.TemporaryDirectory() as d:
        f = pathlib.Path(d) / f"f{suffix}"
        f.write_bytes(body)
        t0 = time.monotonic()
        try:
            load(f)
        except UserError as e:
            assert str(e) and e.file and e.file.startswith(str(f)), (kind, body[:200], str(e)[:300])
        assert time.monotonic() - t0 < DEADLINE_S, (kind, len(body))


@FUZZ
@given(st.lists(st.tuples(CATEGORY, TEXT), min_size=1, max_size=12, unique_by=lambda r: r[1]),
       st.integers(1, 30), st.integers(0, 2**32), st.booleans())
def test_n_distinct_rows_are_sent_as_min_n_requests_distinct_prompts(rows: list[tuple[str, str]], requests: int,
                                                                     seed: int, compact: bool) -> None:
    data = [{"category": c, "conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": "a"}]}
            for c, t in rows]
    with tempfile.TemporaryDirectory() as d:
        f = pathlib.Path(d) / "d.json"
        f.write_text(json.dumps(data, separators=(",", ":")) if compact else
                     "\n".join(json.dumps(r) for r in data), encoding="utf-8")
        wl = WorkloadSpec.model_validate({"name": "w", "input_tokens": "dataset", "output_tokens": 4,
                                          "num_requests": requests, "prompts": {"source": "sharegpt", "path": str(f)}})
        prompts = build_prompts(wl, requests, seed, pathlib.Path(d))
    texts = {t.strip() for _, t in rows}
    assert len(prompts) == requests
    assert len({p.source_row for p in prompts}) == len({p.text for p in prompts}) == min(len(rows), requests)
    for p in prompts:
        assert p.source_row is not None and (p.category, p.text) == (rows[p.source_row][0], rows[p.source_row][1])
    assert {p.text for p in prompts} <= {t for _, t in rows} and texts


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | TEXT
    | st.sampled_from([0, -1, 2**31, 2**63, 10**30, 1e308, -0.0, "", "1e999", "nan", "12", " 3 "]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["from", "value", "role", "content", "category", "prompt", "input_ids", "text", "timestamp_s",
         "timestamp_ms", "input_tokens", "output_tokens", "conversations", "messages"]), inner, max_size=4),
    max_leaves=8)


def _replace_at(value: Any, path: list[int], new: Any) -> Any:
    """`value` with the node reached by following `path` (each step an index among a container's children,
    taken modulo their number) replaced by `new`."""
    if not path or not isinstance(value, (list, dict)) or not value:
        return new
    keys = list(range(len(value))) if isinstance(value, list) else list(value)
    k = keys[path[0] % len(keys)]
    out = list(value) if isinstance(value, list) else dict(value)
    out[k] = _replace_at(value[k], path[1:], new)
    return out


@FUZZ
@given(st.data())
def test_rows_with_a_mutated_structure_or_number_raise_only_user_errors(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(sorted(LOADERS)))
    rows = {"sharegpt": [{"category": "c", "conversations": [{"from": "human", "value": "q"},
                                                              {"from": "gpt", "value": "a"}]}],
            "messages": [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}],
            "jsonl": [{"prompt": "p"}, {"input_ids": [1, 2, 3]}],
            "trace": [{"timestamp_s": 0, "input_tokens": 2, "output_tokens": 2}],
            "trace-csv": [{"timestamp_s": 0, "input_tokens": 2, "output_tokens": 2}],
            "corpus": [{"text": "t"}]}[kind]
    path = data.draw(st.lists(st.integers(0, 7), max_size=5))
    mutant = _replace_at(rows, path, data.draw(JSON_VALUE))
    if kind == "trace-csv":
        cells = mutant if isinstance(mutant, list) else [mutant]
        body = "timestamp_s,input_tokens,output_tokens\n" + "\n".join(
            ",".join(json.dumps(v) if not isinstance(v, str) else v for v in (r.values() if isinstance(r, dict)
                                                                             else [r])) for r in cells)
    else:
        body = json.dumps(mutant) if data.draw(st.booleans()) or not isinstance(mutant, list) else \
            "\n".join(json.dumps(r) for r in mutant)
    _load_only_user_errors(kind, body.encode("utf-8"))


def _depth_offset_by_characters(text: str, limit: int) -> Optional[int]:
    """The reference: a loop over every character, tracking strings and escapes."""
    depth, in_str, esc = 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return i
        elif ch in "]}":
            depth -= 1
    return None


@FUZZ
@given(st.text(alphabet=st.sampled_from('[]{}"\\ a,:\n'), max_size=200), st.integers(0, 6))
def test_the_depth_scan_agrees_with_a_character_loop(text: str, limit: int) -> None:
    assert json_depth_offset(text, limit) == _depth_offset_by_characters(text, limit)


# ------------------------------------------------------------------ what an accepted file may hold
# The targets above only say a bad file ends in a UserError; these say what a file that is ACCEPTED must be, so a
# silent accept is a finding: its JSON is RFC 8259 JSON (no NaN/Infinity), every string in it is text (no NUL, no
# lone surrogate), a jsonl row names one of prompt/input_ids, a corpus has text, a CSV's numbers are ASCII spellings
# and its quotes are closed, and a CSV header defect is reported at the header's line.

def _not_constant(name: str) -> Any:
    raise ValueError(name)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _is_text(s: str) -> bool:
    return "\x00" not in s and not any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def _accepted(kind: str, body: bytes) -> Optional[object]:
    """What the loader returns for `body`, or None when it refuses it with a UserError naming the file."""
    suffix, load = LOADERS[kind]
    with tempfile.TemporaryDirectory() as d:
        f = pathlib.Path(d) / f"f{suffix}"
        f.write_bytes(body)
        try:
            return load(f)
        except UserError as e:
            assert e.file and e.file.startswith(str(f)), (kind, str(e)[:300])
            return None


def _check_accepted_json(kind: str, body: bytes) -> None:
    if _accepted(kind, body) is None:
        return
    text = body.decode("utf-8-sig")
    values = [json.loads(text, parse_constant=_not_constant)] if text.lstrip().startswith("[") else \
        [json.loads(ln, parse_constant=_not_constant) for ln in text.split("\n") if ln.strip()]
    assert all(_is_text(s) for v in values for s in _strings(v)), (kind, body[:200])
    rows = [r for v in values for r in (v if isinstance(v, list) else [v])]
    if kind == "jsonl":
        assert all(("prompt" in r) != ("input_ids" in r) for r in rows), body[:200]
    if kind == "corpus":
        assert any(isinstance(r.get("text", r.get("prompt")), str) and r.get("text", r.get("prompt")).strip()
                   for r in rows), body[:200]


ODD_STRINGS = st.sampled_from(["\\ud800", "\\udfff", "\\u0000", "x\\ud83d", "\\ude00y", "\\ud83d\\ude00", "\\u00e9",
                               " ", ""])
ODD_LITERALS = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-0", "1.5", "null"])


@FUZZ
@given(st.data())
def test_an_accepted_json_prompt_file_is_json_of_text(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(["sharegpt", "messages", "jsonl", "trace", "corpus"]))
    row = {"sharegpt": '{"category": "c", "conversations": [{"from": "human", "value": "q%s"}, '
                       '{"from": "gpt", "value": "a"}], "w": %s}',
           "messages": '{"messages": [{"role": "user", "content": "q%s"}, {"role": "assistant", "content": "a"}], '
                       '"w": %s}',
           "jsonl": '{"prompt": "p%s", "w": %s}',
           "trace": '{"timestamp_s": 0, "input_tokens": 2, "output_tokens": 2, "note": "%s", "w": %s}',
           "corpus": '{"text": "%s", "w": %s}'}[kind]
    rows = [row % (data.draw(ODD_STRINGS), data.draw(ODD_LITERALS)) for _ in range(data.draw(st.integers(1, 3)))]
    if kind == "jsonl" and data.draw(st.booleans()):
        rows.append('{"prompt": "p", "input_ids": [1, 2]}')
    if data.draw(st.booleans()):
        rows = [r.replace('"w"', '"w\\u0000"' if data.draw(st.booleans()) else '"w"') for r in rows]
    body = ("[" + ",".join(rows) + "]") if data.draw(st.booleans()) else "\n".join(rows) + "\n"
    _check_accepted_json(kind, body.encode("utf-8"))


CSV_CELLS = st.sampled_from(["10", "10.0", " 12 ", "1_0", "\u0661\u0660", "\uff11\uff10", "nan", "inf", "1e1", "+3",
                             "0x10", "10.", ".5", "1\u00a00", "\u20073", "1e-3"])
CSV_NUMBER = re.compile(r"[ \t]*[0-9.eE+-]+[ \t]*")
"""The reference: a number a CSV writer emits is spelled in ASCII digits, a point, an exponent and its sign."""


@FUZZ
@given(st.lists(st.tuples(CSV_CELLS, CSV_CELLS, CSV_CELLS), min_size=1, max_size=4), st.booleans(),
       st.integers(0, 2), st.sampled_from(["", "timestamp_ms", "input_tokens", "timestamp_x"]),
       st.sampled_from(["1", "note", "a\x00b"]))
def test_an_accepted_csv_trace_has_ascii_numbers_closed_quotes_and_one_good_header(
        cells: list[tuple[str, str, str]], open_quote: bool, blank_lines: int, extra_column: str, extra: str) -> None:
    header = ["timestamp_s", "input_tokens", "output_tokens"] + ([extra_column] if extra_column else [])
    records = [list(c) + ([extra] if extra_column else []) for c in cells]
    if open_quote:  # the last field opens a quote the file never closes
        records[-1][-1] = '"' + records[-1][-1]
    body = "\n" * blank_lines + "\n".join(",".join(r) for r in [header, *records]) + ("" if open_quote else "\n")
    with tempfile.TemporaryDirectory() as d:
        f = pathlib.Path(d) / "t.csv"
        f.write_bytes(body.encode("utf-8"))
        try:
            rows = load_trace(f)
        except UserError as e:
            if extra_column not in ("", "timestamp_x"):  # the header is the defect: said at its line
                assert e.file == f"{f}:{blank_lines + 1}", (body, str(e))
            return
    assert extra_column in ("", "timestamp_x") and body.count('"') % 2 == 0 and "\x00" not in body, body
    assert len(rows) == len(cells)
    for c in cells:
        assert all(CSV_NUMBER.fullmatch(x) for x in c), (c, body)
