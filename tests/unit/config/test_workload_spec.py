"""Workload spec: prompt sources as a union by `source`, lengths as count / distribution / dataset, and run keys of
workloads that use neither unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.config.loader import SpecError, load_spec
from cluster.config.workload import WorkloadSpec
from cluster.config.prompts import ConversationPrompts, RandomIdsPrompts

HEAD = """version: 1
name: e
model: {path: sim://m, engine: sim}
variants: [{name: base}]
load: {concurrency: [1]}
workloads:
"""


def _load(tmp_path: Path, workload: str) -> Any:
    f = tmp_path / "e.yaml"
    f.write_text(HEAD + workload)
    return load_spec(f)


def test_old_workloads_keep_their_run_key_identity() -> None:
    # the form WorkloadSpec.model_dump had when PromptSource was one flat model: run keys hash it
    w = WorkloadSpec.model_validate({"name": "w", "input_tokens": 128, "output_tokens": 64, "num_requests": 8})
    assert isinstance(w.prompts, RandomIdsPrompts)
    assert w.identity() == {"name": "w", "input_tokens": 128, "output_tokens": 64, "num_requests": 8,
                            "prompts": {"source": "random_ids", "path": None, "vocab_size": 32000,
                                        "tokenizer": None},
                            "ignore_eos": True, "temperature": 0.0, "api": "native"}
    j = WorkloadSpec.model_validate({"name": "w", "input_tokens": 128, "output_tokens": 64, "num_requests": 8,
                                     "prompts": {"source": "jsonl", "path": "p.jsonl"}})
    assert j.identity()["prompts"] == {"source": "jsonl", "path": "p.jsonl", "vocab_size": 32000, "tokenizer": None}


@pytest.mark.parametrize("workload, line, field, fragment", [
    ("  - {name: w, input_tokens: 64, output_tokens: 8, num_requests: 2,\n"
     "     prompts: {source: sharegpt, path: d.json}}\n", 7, "workloads.0.input_tokens", "must be 'dataset'"),
    ("  - name: w\n    input_tokens: dataset\n    output_tokens: 8\n    num_requests: 2\n", 8,
     "workloads.0.input_tokens", "no lengths of its own"),
    ("  - name: w\n    input_tokens: 8\n    output_tokens: dataset\n    num_requests: 2\n", 9,
     "workloads.0.output_tokens", "needs prompt source 'sharegpt', 'messages' or 'trace'"),
    ("  - name: w\n    input_tokens: 8\n    output_tokens: dataset\n    num_requests: 2\n"
     "    prompts: {source: trace, path: t.csv}\n", 8, "workloads.0.input_tokens", "replays each row's own lengths"),
    ("  - name: w\n    input_tokens: {dist: normal, mean: 100, min: 1, max: 400}\n    output_tokens: 8\n"
     "    num_requests: 2\n", 8, "workloads.0.input_tokens.std", "needs 'std'"),
    ("  - name: w\n    input_tokens: lots\n    output_tokens: 8\n    num_requests: 2\n", 8,
     "workloads.0.input_tokens", "expected a token count, a {dist, mean, std, min, max} mapping or 'dataset'"),
    ("  - name: w\n    input_tokens: 8\n    output_tokens: 8\n    num_requests: 2\n"
     "    prompts: {source: sharegpt, path: d.json, vocab_size: 10}\n", 11, "workloads.0.prompts.vocab_size",
     "unknown field; expected one of: source, path, category_field"),
    ("  - name: w\n    input_tokens: dataset\n    output_tokens: 8\n    num_requests: 2\n"
     "    prompts: {source: messages}\n", 11, "workloads.0.prompts.path", "prompt source 'messages' needs 'path'"),
    ("  - name: w\n    input_tokens: dataset\n    output_tokens: 8\n    num_requests: 2\n"
     "    prompts: {source: sharegpt, path: d.json, categories: [code, 'a b']}\n", 11,
     "workloads.0.prompts.categories.1", "category 'a b' must be"),
])
def test_bad_workloads_name_line_and_field(tmp_path: Path, workload: str, line: int, field: str,
                                           fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        _load(tmp_path, workload)
    assert (info.value.field, info.value.line) == (field, line), str(info.value)
    assert fragment in info.value.message, info.value.message


def test_conversation_source_parses(tmp_path: Path) -> None:
    spec = _load(tmp_path, "  - name: w\n    input_tokens: dataset\n    output_tokens: dataset\n    num_requests: 2\n"
                           "    prompts: {source: sharegpt, path: d.json, category_field: topic, categories: [code], "
                           "tokenizer: tok}\n")
    src = spec.workloads[0].prompts
    assert isinstance(src, ConversationPrompts) and src.category_field == "topic" and src.categories == ["code"]
    assert spec.workloads[0].input_tokens_max() is None and spec.workloads[0].output_tokens_nominal() is None


TRACE_WL = ("  - name: w\n    input_tokens: dataset\n    output_tokens: dataset\n    num_requests: 2\n"
            "    prompts: {source: trace, path: t.csv}\n")


@pytest.mark.parametrize("load, workloads, field, fragment", [
    ("{concurrency: [1], arrival: trace}", TRACE_WL, "load.request_rate", "give at least one"),
    ("{request_rate: [2], arrival: trace}", TRACE_WL + "  - {name: r, input_tokens: 8, output_tokens: 8, "
     "num_requests: 2}\n", "workloads.1.prompts.source", "has prompt source 'random_ids'"),
])
def test_trace_arrivals_need_rates_and_trace_workloads(tmp_path: Path, load: str, workloads: str, field: str,
                                                        fragment: str) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(HEAD.replace("load: {concurrency: [1]}", f"load: {load}") + workloads)
    with pytest.raises(SpecError) as info:
        load_spec(f)
    assert info.value.field == field and fragment in info.value.message, str(info.value)
    f.write_text(HEAD.replace("load: {concurrency: [1]}", "load: {request_rate: [2, 4], arrival: trace}") + TRACE_WL)
    from cluster.plan.runs import make_plan

    points = {p.load.label for p in make_plan(load_spec(f))}
    assert points == {"r2 trace", "r4 trace"}
