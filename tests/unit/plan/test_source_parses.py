"""A prompt or trace file is parsed once per validation, whatever the number of variants (issue 37: a 10⁷-row trace
took 176 s to validate, parsed once per variant)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from cluster.config.loader import parse_spec_text
from cluster.plan.inputs import check_prompts
from cluster.plan.runs import expand_variants
from cluster.plan.source_parses import SourceParses

REPO = Path(__file__).resolve().parents[3]

SPEC = """\
version: 1
name: parse-once
model: {{path: "sim://m", engine: sim}}
variants:
  - {{name: baseline, baseline: true}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: [1, 2, 3]}}}}
workloads:
{workloads}
load: {{request_rate: [2]}}
"""


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    real: Callable[..., Any] = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _validate(tmp_path: Path, workloads: str) -> int:
    spec = parse_spec_text(SPEC.format(workloads=workloads))
    variants = expand_variants(spec)
    assert len(variants) == 4, "baseline and NEXTN with 1, 2 and 3 draft steps"
    check_prompts(spec, variants, {}, tmp_path)
    return len(variants)


def test_a_trace_is_parsed_once_for_four_variants_and_two_workloads(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.loadgen.traces as traces

    trace = tmp_path / "t.csv"
    trace.write_text("timestamp_s,input_tokens,output_tokens\n" + "".join(f"{i / 10},{8 + i % 5},4\n"
                                                                         for i in range(50)))
    calls = _counting(monkeypatch, traces, "load_trace")
    _validate(tmp_path, f"""\
  - {{name: a, input_tokens: dataset, output_tokens: dataset, num_requests: 10, prompts: {{source: trace, path: {trace}}}}}
  - {{name: b, input_tokens: dataset, output_tokens: dataset, num_requests: 30, prompts: {{source: trace, path: t.csv}}}}
""")
    assert len(calls) == 1, f"the trace was parsed {len(calls)} times (once per variant and workload before)"


def test_a_jsonl_prompt_file_and_a_conversation_dataset_are_parsed_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.loadgen.conversations as conversations
    import cluster.loadgen.datasets as datasets

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": [1, 2, i]}) + "\n" for i in range(3, 9)))
    shutil.copy(REPO / "datasets" / "categories-sharegpt.json", tmp_path / "chat.json")
    jsonl_calls = _counting(monkeypatch, datasets, "load_jsonl_rows")
    chat_calls = _counting(monkeypatch, conversations, "load_selection")
    _validate(tmp_path, """\
  - {name: ids, input_tokens: 8, output_tokens: 4, num_requests: 4, prompts: {source: jsonl, path: p.jsonl}}
  - {name: chat, input_tokens: dataset, output_tokens: 4, num_requests: 4, prompts: {source: sharegpt, path: chat.json}}
""")
    assert (len(jsonl_calls), len(chat_calls)) == (1, 1), "once per variant before (4, 4)"


def test_a_file_rewritten_between_two_checks_is_parsed_again(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("one")
    parses = SourceParses()
    read: Callable[[], str] = f.read_text
    assert parses.get("text", f, read) == parses.get("text", f, read) == "one" and parses.parses == 1
    f.write_text("three")  # another size: another file as far as the parse is concerned
    assert parses.get("text", f, read) == "three" and parses.parses == 2
    assert parses.get("other kind", f, read) == "three" and parses.parses == 3
