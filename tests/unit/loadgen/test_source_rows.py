"""Row identity across every prompt source: a row is its 0-based ordinal in its file (never its line, which a compact
JSON array shares across all rows), each prompt carries it as `Prompt.source_row`, and N distinct rows give
min(N, requests) distinct prompts."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from cluster.engines.base import ChatTurn, Prompt
from cluster.loadgen.conversations import load_conversations, load_selection
from cluster.loadgen.datasets import PromptArray, load_jsonl_rows
from cluster.loadgen.prompt_sources import build_prompt_sequence, build_prompts
from cluster.loadgen.sessions import Answer, next_turn
from cluster.loadgen.traces import load_trace
from cluster.config.workload import WorkloadSpec


def _wl(prompts: dict[str, Any], **kw: Any) -> WorkloadSpec:
    base: dict[str, Any] = {"name": "w", "input_tokens": "dataset", "output_tokens": 16, "num_requests": 10,
                            "prompts": prompts}
    base.update(kw)
    return WorkloadSpec.model_validate(base)


def _sharegpt(n: int) -> list[dict[str, Any]]:
    return [{"category": "code" if i % 2 else "chat",
             "conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": f"answer {i}"}]}
            for i in range(n)]


def _write_tokenizer(path: pathlib.Path) -> pathlib.Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["question", "answer"] + [str(i) for i in range(50)]
    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}},
                                     unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    return path


@pytest.mark.parametrize("source", ["sharegpt", "messages"])
def test_a_compact_json_array_of_40_rows_is_40_distinct_prompts(tmp_path: pathlib.Path, source: str) -> None:
    # the collapse: every row of a compact array is on line 1, and rows keyed by line became one prompt
    rows = _sharegpt(40)
    if source == "messages":
        rows = [{"category": r["category"], "messages": [{"role": "user", "content": r["conversations"][0]["value"]},
                                                         {"role": "assistant", "content": "ok"}]} for r in rows]
    f = tmp_path / "d.json"
    f.write_text(json.dumps(rows))
    wl = _wl({"source": source, "path": str(f)}, num_requests=40)
    loaded = load_conversations(f, wl.prompts)  # type: ignore[arg-type]
    assert [r.row for r in loaded] == list(range(40)) and {r.line for r in loaded} == {1}
    prompts = build_prompts(wl, 40, 0, tmp_path)
    assert len({p.text for p in prompts}) == 40
    assert sorted(p.source_row for p in prompts if p.source_row is not None) == list(range(40))
    assert {p.category for p in prompts} == {"code", "chat"}
    for p in prompts:
        assert p.source_row is not None and p.text == f"question {p.source_row}"
        assert p.category == ("code" if p.source_row % 2 else "chat")


def test_compact_array_rows_keep_their_own_token_counts(tmp_path: pathlib.Path) -> None:
    # lengths and output budgets were keyed by line too: one row's counts served all of them
    rows = [{"conversations": [{"from": "human", "value": " ".join(["question"] * (i + 1))},
                               {"from": "gpt", "value": " ".join(["answer"] * (i + 1))}]} for i in range(6)]
    f = tmp_path / "d.json"
    f.write_text(json.dumps(rows))
    tok = _write_tokenizer(tmp_path)
    wl = _wl({"source": "sharegpt", "path": str(f), "tokenizer": str(tok)}, output_tokens="dataset")
    sel, _ = load_selection(wl, tmp_path, "")
    assert sel.input_tokens == {i: i + 1 for i in range(6)} and sel.output_tokens == {i: i + 1 for i in range(6)}
    prompts = build_prompts(wl, 6, 3, tmp_path)
    assert sorted((p.source_row, p.max_tokens, len(p.input_ids or ())) for p in prompts) == \
        [(i, i + 1, i + 1) for i in range(6)]


@pytest.mark.parametrize("n_rows,n_requests", [(1, 5), (7, 3), (7, 7), (7, 20)])
def test_n_distinct_rows_send_min_n_requests_distinct_prompts(tmp_path: pathlib.Path, n_rows: int,
                                                              n_requests: int) -> None:
    f = tmp_path / "d.json"
    f.write_text(json.dumps(_sharegpt(n_rows)))
    prompts = build_prompts(_wl({"source": "sharegpt", "path": str(f)}), n_requests, 1, tmp_path)
    assert len(prompts) == n_requests
    assert len({p.text for p in prompts}) == len({p.source_row for p in prompts}) == min(n_rows, n_requests)


def test_jsonl_prompts_carry_their_row_ordinal_from_an_array_or_lines(tmp_path: pathlib.Path) -> None:
    rows = [{"prompt": f"p{i}"} for i in range(4)] + [{"input_ids": [5, 6]}]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.json"
    a.write_text("\n\n".join(json.dumps(r) for r in rows) + "\n")  # blank lines are no rows
    b.write_text(json.dumps(rows))
    assert [(p.source_row, p.text) for _, p in load_jsonl_rows(a)] == \
        [(p.source_row, p.text) for _, p in load_jsonl_rows(b)] == [(i, f"p{i}") for i in range(4)] + [(4, None)]
    assert [line for line, _ in load_jsonl_rows(a)] == [1, 3, 5, 7, 9]
    prompts = build_prompts(_wl({"source": "jsonl", "path": str(b)}, input_tokens=8), 5, 0, tmp_path)
    assert sorted(p.source_row or 0 for p in prompts) == list(range(5))
    for p in prompts:
        assert p.text is None if p.source_row == 4 else p.text == f"p{p.source_row}"


def test_trace_prompts_carry_their_row_ordinal(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps([{"timestamp_s": i, "input_tokens": 3 + i, "output_tokens": 2} for i in range(5)]))
    assert [(r.row, r.line) for r in load_trace(f)] == [(i, 1) for i in range(5)]
    prompts = build_prompts(_wl({"source": "trace", "path": str(f)}, output_tokens="dataset"), 4, 0, tmp_path)
    assert [(p.source_row, len(p.input_ids or ())) for p in prompts] == [(i, 3 + i) for i in range(4)]


@pytest.mark.parametrize("extra", [{}, {"shared_prefix": {"groups": 2, "tokens": 4}}])
@pytest.mark.parametrize("input_tokens", [16, {"dist": "uniform", "min": 8, "max": 16}])
def test_random_ids_source_row_is_the_draw_index(tmp_path: pathlib.Path, extra: dict[str, Any],
                                                 input_tokens: Any) -> None:
    wl = _wl({"source": "random_ids", "vocab_size": 500, **extra}, input_tokens=input_tokens)
    prompts = build_prompts(wl, 9, 0, tmp_path)
    assert [p.source_row for p in prompts] == list(range(9))
    seq = build_prompt_sequence(wl, 9, 0, tmp_path)
    assert list(seq) == prompts  # the array form builds the same prompts, rows included


def test_prompt_array_slices_keep_their_rows() -> None:
    import numpy as np

    arr = PromptArray(np.arange(20, dtype=np.int32).reshape(10, 2))
    assert [p.source_row for p in arr[3:9:2]] == [3, 5, 7]
    assert arr[3:9:2][1] == Prompt(input_ids=(10, 11), source_row=5)
    assert arr[-1].source_row == 9 and arr[::3][::2][1].source_row == 6


def test_text_prompts_source_row_is_the_window_draw(tmp_path: pathlib.Path) -> None:
    tok = _write_tokenizer(tmp_path)
    corpus = tmp_path / "c.txt"
    corpus.write_text(" ".join(f"question {i}" for i in range(40)))
    wl = _wl({"source": "text", "path": str(corpus), "tokenizer": str(tok)}, input_tokens=4)
    assert [p.source_row for p in build_prompts(wl, 6, 0, tmp_path)] == list(range(6))


def test_a_later_session_turn_keeps_its_own_source_row() -> None:
    first = Prompt(text="q", messages=(ChatTurn("user", "q"),), source_row=3)
    later = Prompt(text="more", messages=(ChatTurn("user", "more"),), source_row=3)
    assert next_turn(first, Answer("a", None), later).source_row == 3
    ids = next_turn(Prompt(input_ids=(1,), source_row=0), Answer("", (2,)), Prompt(input_ids=(3,), source_row=1))
    assert ids.source_row == 1 and ids.input_ids == (1, 2, 3)


def test_a_row_the_tokenizer_makes_nothing_of_is_filtered_not_sent_empty(tmp_path: pathlib.Path) -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "question": 1}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Replace("\u200b", "")  # a zero-width space is no user text once normalized
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    f = tmp_path / "d.json"
    f.write_text(json.dumps([{"conversations": [{"from": "human", "value": v}, {"from": "gpt", "value": "question"}]}
                             for v in ("question", "\u200b")]))
    wl = _wl({"source": "sharegpt", "path": str(f), "tokenizer": str(tmp_path)}, output_tokens="dataset")
    sel, _ = load_selection(wl, tmp_path, "")
    assert [r.row for r in sel.rows] == [0]
    assert sel.filtered == {"no tokens (the tokenizer made nothing of its text)": 1}
    assert all(p.input_ids for p in build_prompts(wl, 4, 0, tmp_path))
