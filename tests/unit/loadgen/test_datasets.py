"""Prompt sources: determinism, exact lengths, JSONL parsing and its error messages."""

from __future__ import annotations

import json
import pathlib

import pytest

from cluster.loadgen.datasets import RANDOM_ID_LOW, DatasetError
from cluster.loadgen.prompt_sources import build_prompt_sequence, build_prompts
from cluster.config.workload import WorkloadSpec
from cluster.config.prompts import TextPrompts


def _wl(**kw: object) -> WorkloadSpec:
    base: dict[str, object] = {"name": "w", "input_tokens": 64, "output_tokens": 8, "num_requests": 10}
    base.update(kw)
    return WorkloadSpec.model_validate(base)


def test_random_ids_deterministic_exact_length(tmp_path: pathlib.Path) -> None:
    wl = _wl(prompts={"source": "random_ids", "vocab_size": 5000})
    a = build_prompts(wl, 12, 7, tmp_path)
    b = build_prompts(wl, 12, 7, tmp_path)
    c = build_prompts(wl, 12, 8, tmp_path)
    assert a == b
    assert a != c
    assert len(a) == 12
    for p in a:
        assert p.input_ids is not None and p.text is None
        assert len(p.input_ids) == 64
        assert min(p.input_ids) >= RANDOM_ID_LOW and max(p.input_ids) < 5000
    assert len({p.input_ids for p in a}) == 12  # distinct prompts: no accidental prefix-cache hits
    # prefix property: asking for more prompts does not change the first ones
    assert build_prompts(wl, 5, 7, tmp_path) == a[:5]


def test_random_ids_tiny_vocab(tmp_path: pathlib.Path) -> None:
    wl = _wl(prompts={"source": "random_ids", "vocab_size": 32})
    ps = build_prompts(wl, 3, 0, tmp_path)
    assert all(p.input_ids is not None and 8 <= min(p.input_ids) and max(p.input_ids) < 32 for p in ps)


def _write(path: pathlib.Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_jsonl_relative_path_sampling_and_cycling(tmp_path: pathlib.Path) -> None:
    (tmp_path / "data").mkdir()
    rows = [json.dumps({"prompt": f"hello {i}"}) for i in range(5)] + ["", json.dumps({"input_ids": [5, 6, 7]})]
    _write(tmp_path / "data" / "p.jsonl", rows)
    wl = _wl(prompts={"source": "jsonl", "path": "data/p.jsonl"})
    a = build_prompts(wl, 15, 3, tmp_path)
    assert a == build_prompts(wl, 15, 3, tmp_path)
    assert len(a) == 15
    texts = {p.text for p in a if p.text is not None}
    assert texts == {f"hello {i}" for i in range(5)}
    assert sum(1 for p in a if p.input_ids == (5, 6, 7)) in (2, 3)  # two full passes, then 3 of a third
    # each full pass over the 6 prompts uses every prompt once
    assert sorted(repr(p) for p in a[:6]) == sorted(repr(p) for p in set(a))
    assert build_prompts(wl, 15, 4, tmp_path) != a
    # an absolute path ignores base_dir
    wl_abs = _wl(prompts={"source": "jsonl", "path": str(tmp_path / "data" / "p.jsonl")})
    assert build_prompts(wl_abs, 15, 3, pathlib.Path("/nonexistent")) == a


@pytest.mark.parametrize(
    "line, expected",
    [
        ("{not json", "p.jsonl:2: invalid JSON"),
        ("[1, 2]", "p.jsonl:2: expected a JSON object"),
        ('{"input_ids": [1, "x"]}', "p.jsonl:2: field 'input_ids'"),
        ('{"input_ids": []}', "p.jsonl:2: field 'input_ids'"),
        ('{"prompt": 3}', "p.jsonl:2: field 'prompt'"),
        ('{"text": "hi"}', "p.jsonl:2: expected field 'prompt'"),
    ],
)
def test_jsonl_bad_line_names_file_and_line(tmp_path: pathlib.Path, line: str, expected: str) -> None:
    _write(tmp_path / "p.jsonl", [json.dumps({"prompt": "ok"}), line])
    wl = _wl(prompts={"source": "jsonl", "path": "p.jsonl"})
    with pytest.raises(DatasetError, match=expected.replace("[", r"\[")) as ei:
        build_prompts(wl, 2, 0, tmp_path)
    assert str(tmp_path / "p.jsonl") in str(ei.value)


def test_jsonl_missing_and_empty(tmp_path: pathlib.Path) -> None:
    wl = _wl(prompts={"source": "jsonl", "path": "missing.jsonl"})
    with pytest.raises(DatasetError, match="missing.jsonl: prompt file not found"):
        build_prompts(wl, 1, 0, tmp_path)
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    wl = _wl(prompts={"source": "jsonl", "path": "empty.jsonl"})
    with pytest.raises(DatasetError, match="empty.jsonl: no prompts"):
        build_prompts(wl, 1, 0, tmp_path)


def test_text_source_goes_through_the_corpus_tokenizer(tmp_path: pathlib.Path) -> None:
    # build_prompts serves every source (the load actor no longer special-cases 'text'): a corpus without a
    # tokenizer is the text source's own error, naming the tokenizer.json it looked for
    from cluster.loadgen.text_prompts import TextPromptError

    (tmp_path / "corpus.txt").write_text("some words " * 50)
    wl = _wl(prompts=TextPrompts(source="text", path="corpus.txt"))
    with pytest.raises(TextPromptError, match="tokenizer.json"):
        build_prompts(wl, 1, 0, tmp_path, model_path=str(tmp_path / "no-model"))


def _shared(input_tokens: object, groups: int = 3, tokens: int = 32, vocab: int = 5000) -> WorkloadSpec:
    return WorkloadSpec.model_validate({
        "name": "sp", "input_tokens": input_tokens, "output_tokens": 4, "num_requests": 1,
        "prompts": {"source": "random_ids", "vocab_size": vocab, "shared_prefix": {"groups": groups, "tokens": tokens}}})


def test_shared_prefix_groups_take_equal_shares(tmp_path: pathlib.Path) -> None:
    w = _shared(40)
    ps = build_prompts(w, 10, seed=7, base_dir=tmp_path)
    assert all(p.input_ids is not None and len(p.input_ids) == 40 for p in ps)
    heads = [p.input_ids[:32] for p in ps if p.input_ids]
    counts = sorted(heads.count(h) for h in set(heads))
    assert counts == [3, 3, 4]  # 10 requests over 3 groups: shares differ by at most one
    assert len({p.input_ids[32:] for p in ps if p.input_ids}) == 10  # each request's own ids are its own
    assert all(RANDOM_ID_LOW <= t < 5000 for p in ps for t in p.input_ids or ())
    assert build_prompts(w, 10, seed=7, base_dir=tmp_path) == ps
    assert [h for h in heads] != [p.input_ids[:32] for p in build_prompts(w, 10, seed=8, base_dir=tmp_path)
                                  if p.input_ids]
    # the array path (fixed lengths) gives the same prompts
    assert list(build_prompt_sequence(w, 10, seed=7, base_dir=tmp_path)) == ps
    # the prompts' own ids are those of the same workload without shared prefixes at input_tokens - tokens
    plain = WorkloadSpec.model_validate({"name": "sp", "input_tokens": 8, "output_tokens": 4, "num_requests": 1,
                                         "prompts": {"source": "random_ids", "vocab_size": 5000}})
    assert [p.input_ids[32:] for p in ps if p.input_ids] == [p.input_ids for p in build_prompts(plain, 10, 7, tmp_path)]


def test_shared_prefix_with_a_length_distribution(tmp_path: pathlib.Path) -> None:
    w = _shared({"dist": "uniform", "min": 33, "max": 60}, groups=2)
    ps = build_prompts(w, 8, seed=1, base_dir=tmp_path)
    assert len({p.input_ids[:32] for p in ps if p.input_ids}) == 2
    assert all(p.input_ids is not None and 33 <= len(p.input_ids) <= 60 for p in ps)


@pytest.mark.parametrize("input_tokens, shortest", [(32, 32), ({"dist": "uniform", "min": 20, "max": 90}, 20)])
def test_shared_prefix_longer_than_the_input_is_refused(input_tokens: object, shortest: int) -> None:
    from cluster.config.loader import SpecError

    with pytest.raises((SpecError, ValueError)) as e:
        _shared(input_tokens)
    assert "input_tokens" in str(e.value) and f"its shortest: {shortest}" in str(e.value)


def test_shared_prefix_is_part_of_the_run_key_and_plain_keys_are_unchanged() -> None:
    plain = WorkloadSpec.model_validate({"name": "sp", "input_tokens": 40, "output_tokens": 4, "num_requests": 1})
    assert plain.identity()["prompts"] == {"source": "random_ids", "path": None, "vocab_size": 32000,
                                           "tokenizer": None}
    shared = _shared(40, vocab=32000)
    assert shared.identity()["prompts"]["shared_prefix"] == {"groups": 3, "tokens": 32}  # type: ignore[index]
