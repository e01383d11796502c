"""Conversation datasets: ShareGPT (JSON array, JSONL) and messages JSONL on hand-written files, good and malformed
(file:line), filtered rows counted by reason, categories, dataset output lengths with a tokenizer built here."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from cluster.loadgen.conversations import ConversationError, load_conversations, load_selection, select_rows
from cluster.loadgen.prompt_sources import build_prompts
from cluster.config.workload import WorkloadSpec

REPO = pathlib.Path(__file__).resolve().parents[3]
BUNDLED = REPO / "datasets" / "categories-sharegpt.json"


def _wl(prompts: dict[str, Any], **kw: Any) -> WorkloadSpec:
    base: dict[str, Any] = {"name": "w", "input_tokens": "dataset", "output_tokens": 16, "num_requests": 10,
                            "prompts": prompts}
    base.update(kw)
    return WorkloadSpec.model_validate(base)


def _sg(q: str, a: str = "an answer", **extra: Any) -> dict[str, Any]:
    return {"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}], **extra}


def _write_tokenizer(path: pathlib.Path) -> pathlib.Path:
    """A whitespace word-level tokenizer.json built here: one token per word, so counts are checkable by eye."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = "hello world write code please answer an the a one two three four five six seven eight x y".split()
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    return path


def test_sharegpt_json_array_rows_lines_and_categories(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "d.json"
    f.write_text("[\n" + ",\n".join(json.dumps(r) for r in [
        _sg("write code", category="code"),
        {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "hello"},
                           {"from": "gpt", "value": "hi"}, {"from": "human", "value": "later turn"}]},
        _sg("hello world", kind="chat"),
    ]) + "\n]\n")
    wl = _wl({"source": "sharegpt", "path": str(f), "category": "misc"})
    rows = load_conversations(f, wl.prompts)  # type: ignore[arg-type]
    assert [r.line for r in rows] == [2, 3, 4]
    assert [r.category for r in rows] == ["code", "misc", "misc"]  # rows without `category` get the default
    assert [t.role for t in rows[1].turns] == ["system", "user"] and rows[1].reference == "hi"
    assert rows[1].text == "be brief\n\nhello"
    # category_field names another key
    other = _wl({"source": "sharegpt", "path": str(f), "category_field": "kind"})
    assert [r.category for r in load_conversations(f, other.prompts)] == [None, None, "chat"]  # type: ignore[arg-type]


def test_messages_jsonl_and_prompts_carry_category_and_turns(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"messages": [{"role": "user", "content": "one two"}, {"role": "assistant", "content": "x"}],
         "category": "math"},
        {"messages": [{"role": "user", "content": "three"}], "category": "chat"},
    ]) + "\n")
    wl = _wl({"source": "messages", "path": str(f)})
    prompts = build_prompts(wl, 6, 3, tmp_path)
    assert {p.category for p in prompts} == {"math", "chat"}
    assert all(p.messages is not None and p.messages[0].role == "user" for p in prompts)
    assert all(p.max_tokens is None and p.input_ids is None for p in prompts)  # fixed output, no tokenizer
    assert build_prompts(wl, 6, 3, tmp_path) == prompts  # seeded
    assert sorted(p.text or "" for p in prompts) == ["one two"] * 3 + ["three"] * 3  # each row once per pass


@pytest.mark.parametrize("content, source, where, fragment", [
    ('[\n{"conversations": [{"from": "human", "value": "a"}]},\n{"conversations": 3}\n]', "sharegpt", 3,
     "expected a list field 'conversations'"),
    ('[\n{"conversations": [{"from": "human", "value": "a"}]},\n{"conversations": [{"from": "robot", "value": "a"}]}\n]',
     "sharegpt", 3, "conversations[0].from: expected one of"),
    ('{"conversations": [{"from": "human", "value": 7}]}\n', "sharegpt", 1, "conversations[0].value: expected a string"),
    ('{"conversations": [{"from": "human", "value": "a"}]}\n\n{"conversations": [oops]}\n', "sharegpt", 3,
     "invalid JSON"),
    ('[\n{"conversations": []}\n{"conversations": []}\n]', "sharegpt", 3, "expected ',' or ']'"),
    ('{"messages": [{"role": "user", "content": "a"}], "category": "no spaces allowed"}\n', "messages", 1,
     "category: expected a category name"),
    ('{"messages": [{"role": "user", "content": "a"}]}\n[1, 2]\n', "messages", 2, "expected a JSON object per row"),
    ('{"messages": ["hi"]}\n', "messages", 1, "messages[0]: expected an object"),
])
def test_malformed_rows_name_file_and_line(tmp_path: pathlib.Path, content: str, source: str, where: int,
                                          fragment: str) -> None:
    f = tmp_path / "bad.json"
    f.write_text(content)
    wl = _wl({"source": source, "path": str(f)})
    with pytest.raises(ConversationError) as info:
        load_conversations(f, wl.prompts)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"{f}:{where}: ") and fragment in str(info.value), str(info.value)
    assert info.value.file == f"{f}:{where}"


def test_filtered_rows_are_counted_by_reason(tmp_path: pathlib.Path) -> None:
    (tmp_path / "tok").mkdir()
    tok = _write_tokenizer(tmp_path / "tok")
    f = tmp_path / "d.jsonl"
    rows = [_sg("hello world", "one two three", category="code"),     # used: 2 in, 3 out
            _sg("   ", "x", category="code"),                          # empty
            {"conversations": [{"from": "human", "value": "hello"}], "category": "code"},  # no answer
            _sg("one two three four five six", "x", category="code"),  # 6 tokens > max_input_tokens 4
            _sg("hello", "a", category="chat")]                        # category not selected
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    wl = _wl({"source": "sharegpt", "path": str(f), "max_input_tokens": 4, "categories": ["code"],
              "tokenizer": str(tok)}, output_tokens="dataset")
    sel, encode = load_selection(wl, tmp_path, "")
    assert encode is not None and [r.line for r in sel.rows] == [1]
    assert sel.filtered == {"empty (no user text before the first answer)": 1,
                            "no reference answer (output_tokens: dataset)": 1,
                            "longer than max_input_tokens 4": 1, "category not selected": 1}
    assert sel.summary().endswith("5 rows read, 1 used (code 1), 4 filtered (1 category not selected, 1 empty (no "
                                  "user text before the first answer), 1 longer than max_input_tokens 4, 1 no "
                                  "reference answer (output_tokens: dataset))")
    prompts = build_prompts(wl, 3, 0, tmp_path)
    # the dataset's own lengths: the prompt as given (token ids counted by the tokenizer), the answer's as max_tokens
    assert [p.max_tokens for p in prompts] == [3, 3, 3] and all(p.input_ids is not None and len(p.input_ids) == 2
                                                                for p in prompts)


def test_all_rows_filtered_is_an_error_not_an_empty_window(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps(_sg("", "x")) + "\n")
    with pytest.raises(ConversationError, match="every row was filtered"):
        build_prompts(_wl({"source": "sharegpt", "path": str(f)}), 2, 0, tmp_path)


def test_output_length_distribution_gives_each_request_its_budget(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text("\n".join(json.dumps(_sg(f"q{i}")) for i in range(5)) + "\n")
    wl = _wl({"source": "sharegpt", "path": str(f)},
             output_tokens={"dist": "uniform", "min": 4, "max": 9}, num_requests=40)
    budgets = [p.max_tokens for p in build_prompts(wl, 40, 1, tmp_path)]
    assert all(b is not None and 4 <= b <= 9 for b in budgets) and len(set(budgets)) > 1


def test_bundled_dataset_has_six_categories_of_two_dozen_rows() -> None:
    wl = _wl({"source": "sharegpt", "path": str(BUNDLED)})
    rows = load_conversations(BUNDLED, wl.prompts)  # type: ignore[arg-type]
    counts: dict[str, int] = {}
    for r in rows:
        assert r.category is not None and r.reference and r.turns[0].role == "user" and r.text.strip()
        counts[r.category] = counts.get(r.category, 0) + 1
    assert counts == {c: 24 for c in ("code", "math", "reasoning", "chat", "summarisation", "translation")}
    assert len({r.text for r in rows}) == len(rows)  # no duplicated prompt
    assert select_rows(BUNDLED, rows, wl, None).filtered == {}


def test_a_selection_of_one_repeated_prompt_says_so(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "d.json"
    f.write_text(json.dumps([_sg("same question", f"answer {i}", id=i) for i in range(40)] + [_sg("other")]))
    sel, _ = load_selection(_wl({"source": "sharegpt", "path": str(f)}, output_tokens=4), tmp_path, "")
    assert sel.summary().endswith("41 rows read, 41 used (- 41), none filtered; only 2 distinct first prompts among "
                                  "the 41 used rows, so a run sends at most that many different prompts")
    f.write_text(json.dumps([_sg(f"question {i}") for i in range(3)]))
    sel, _ = load_selection(_wl({"source": "sharegpt", "path": str(f)}, output_tokens=4), tmp_path, "")
    assert "distinct" not in sel.summary()
