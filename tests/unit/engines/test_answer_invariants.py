"""The answer invariants: every recorded real SGLang 0.5.23 answer keeps them all (through the same parsers the load
generator, smoke and the gate use), each invariant's bound is where SGLang's semantics put it, and the gate turns an
answer that breaks one into that prompt's error naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from cluster.analysis.correctness import evaluate_gate
from cluster.engines.answer_invariants import (INVARIANTS, Answer, Broken, broken, counts_answer, invariant_of,
                                               invariant_reasons)
from cluster.engines.registry import get_engine
from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser, event_data, split_events, stream_answer

FIXTURES = Path(__file__).resolve().parents[2] / "contract" / "fixtures" / "sglang-0.5.23-cpu"


def _exchanges() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{f.stem}/{e['name']}", e) for f in sorted(FIXTURES.glob("*.json"))
            for e in json.loads(f.read_text())["exchanges"]]


RECORDED_STREAMS = [(n, e) for n, e in _exchanges() if "sse" in e]
RECORDED_WHOLE = [(n, e) for n, e in _exchanges() if e["request"]["path"] in ("/generate", "/v1/completions",
                                                                               "/v1/chat/completions")
                  and e["status"] == 200 and "json" in e]


def _stream(e: dict[str, Any]) -> Answer:
    parser = SGLangNativeParser() if e["request"]["path"] == "/generate" else OpenAIStreamParser()
    payloads = [event_data(x) for x in split_events(e["sse"].encode())]
    tokens = [k for k in (parser.feed(p) for p in payloads if p is not None and p != b"[DONE]") if k > 0]
    return stream_answer(parser.meta(), tokens)


def test_the_recorded_answers_are_the_ones_listed() -> None:
    assert [n for n, _ in RECORDED_STREAMS] == [f"{t}/{x}" for t in ("baseline", "nextn3") for x in (
        "generate_stream", "generate_stream_adapter", "completions_stream_adapter", "chat_stream_adapter",
        "error_negative_max_new_tokens_stream")]
    assert [n for n, _ in RECORDED_WHOLE] == [f"{t}/{x}" for t in ("baseline", "nextn3") for x in (
        "generate_nonstream", "generate_batch", "generate_gate", "completions_nonstream", "chat_nonstream")]


@pytest.mark.parametrize("name, exchange", RECORDED_STREAMS, ids=[n for n, _ in RECORDED_STREAMS])
def test_every_recorded_stream_keeps_every_invariant(name: str, exchange: dict[str, Any]) -> None:
    a = _stream(exchange)
    if name.endswith("error_negative_max_new_tokens_stream"):  # SGLang's own error event: recognised, named
        assert [b.invariant for b in broken(a)] == ["no_error_event"]
        assert "max_new_tokens must be at least 0" in str(broken(a)[0])
    else:
        assert broken(a) == [] and a.completion_tokens == 12 and sum(a.event_tokens or ()) == 12


@pytest.mark.parametrize("name, exchange", RECORDED_WHOLE, ids=[n for n, _ in RECORDED_WHOLE])
def test_every_recorded_whole_answer_keeps_every_invariant(name: str, exchange: dict[str, Any]) -> None:
    doc = exchange["json"]
    if exchange["request"]["path"] == "/generate":
        for item in doc if isinstance(doc, list) else [doc]:
            a = counts_answer(item["meta_info"], "meta_info", len(item["output_ids"]))
            assert broken(a) == [] and a.completion_tokens == len(item["output_ids"])
            out = get_engine("sglang").parse_gate_response(item)  # the gate's own read
            assert out.error is None and out.completion_tokens == a.completion_tokens
    else:
        assert broken(counts_answer(doc["usage"], "usage")) == []
        if exchange["request"]["path"] == "/v1/completions":
            assert get_engine("vllm").parse_gate_response(doc).error is None


def _a(**kw: Any) -> Answer:
    base: dict[str, Any] = dict(prompt_tokens=8, completion_tokens=12, cached_tokens=0, spec_verify_ct=5,
                                retractions=0, event_tokens=(1, 1, 2, 3, 4, 1), output_ids=12, last_event_tokens=1)
    base.update(kw)
    return Answer(**base)


@pytest.mark.parametrize("kept, broke, invariant", [
    (dict(spec_verify_ct=11), dict(spec_verify_ct=12), "verify_steps_at_most_tokens"),
    (dict(cached_tokens=8), dict(cached_tokens=9), "cached_within_prompt"),
    (dict(prompt_tokens=1), dict(prompt_tokens=0), "prompt_tokens_positive"),
    (dict(spec_verify_ct=5, retractions=0), dict(spec_verify_ct=4, retractions=0), "verify_steps_cover_events"),
    (dict(spec_verify_ct=4, retractions=1), dict(spec_verify_ct=3, retractions=1), "verify_steps_cover_events"),
    (dict(spec_verify_ct=1, retractions=None, event_tokens=(1,) * 12), dict(spec_verify_ct=1, retractions=0,
                                                                         event_tokens=(1,) * 12),
     "verify_steps_cover_events"),
    (dict(event_tokens=(12,)), dict(event_tokens=(11,)), "completion_matches_events"),
    (dict(counts_stated=False, event_tokens=(1,) * 12), dict(counts_stated=False, event_tokens=(1,) * 13),
     "completion_matches_events"),
    (dict(output_ids=1), dict(output_ids=2), "output_ids_match_count"),
    (dict(events_after_finish=0), dict(events_after_finish=1), "finish_reason_last"),
    (dict(error_event=None), dict(error_event="boom"), "no_error_event"),
    (dict(completion_tokens=2**31 - 1, spec_verify_ct=None, event_tokens=None, output_ids=None),
     dict(completion_tokens=-1, spec_verify_ct=None, event_tokens=None, output_ids=None), "counts_in_range"),
])
def test_each_bound_is_where_sglang_puts_it(kept: dict[str, Any], broke: dict[str, Any], invariant: str) -> None:
    assert invariant not in {b.invariant for b in broken(_a(**kept))}
    assert invariant in {b.invariant for b in broken(_a(**broke))}


def test_no_verify_steps_is_no_bound_on_the_events() -> None:
    """spec_verify_ct 0 or absent (a baseline server, or a one-token answer): neither verify bound applies."""
    for v in (0, None):
        assert broken(_a(spec_verify_ct=v, completion_tokens=1, event_tokens=(1,), output_ids=1)) == []
        assert broken(_a(spec_verify_ct=v)) == []


def test_the_invariants_have_distinct_names_and_one_line_statements() -> None:
    names = [i.name for i in INVARIANTS]
    assert len(set(names)) == len(names) == 9
    assert all(i.statement and "\n" not in i.statement for i in INVARIANTS)


def test_a_record_error_names_its_invariant_and_a_run_reason_counts_them() -> None:
    e = str(Broken("cached_within_prompt", "cached_tokens 9 > prompt_tokens 8"))
    assert invariant_of(e) == "cached_within_prompt" and invariant_of("timeout after 5 s") is None
    assert invariant_of("answer invariant nope: x") is None
    reasons = invariant_reasons([None, e, "boom", e], [10, 11, 12, 13])
    assert len(reasons) == 1 and "cached_within_prompt" in reasons[0] and "in 2 of 4 requests" in reasons[0] \
        and "first: request 11: cached_tokens 9 > prompt_tokens 8" in reasons[0]


def _gate_answer(verify: Optional[int]) -> dict[str, Any]:
    meta = {"id": "g", "finish_reason": {"type": "length", "length": 8}, "prompt_tokens": 6, "completion_tokens": 8,
            "cached_tokens": 0, "spec_verify_ct": verify}
    return {"text": "The answer is 4.", "output_ids": list(range(8)), "meta_info": meta}


def test_the_gate_turns_an_impossible_answer_into_that_prompt_s_error_naming_the_invariant() -> None:
    engine = get_engine("sglang")
    assert engine.parse_gate_response(_gate_answer(7)).error is None
    out = engine.parse_gate_response(_gate_answer(8))
    assert out.error is not None and invariant_of(out.error) == "verify_steps_at_most_tokens"
    assert out.spec_verify_ct is None and out.completion_tokens is None  # the gate's acceptance never uses them
    from cluster.kernel.gate import GATE_PROMPTS

    result = evaluate_gate({p.prompt_id: out for p in GATE_PROMPTS}, None, None, is_nextn=False,
                           check_answers=False)
    assert not result.passed and all("answer invariant verify_steps_at_most_tokens" in r for r in result.reasons)


def test_the_live_server_answers_doc_lists_every_invariant_with_its_statement() -> None:
    from cluster.engines.answer_invariants import CONTENT_ENCODING

    doc = (Path(__file__).resolve().parents[3] / "docs" / "live-server-answers.md").read_text()
    for name, statement in [(i.name, i.statement) for i in INVARIANTS] + [CONTENT_ENCODING]:
        assert f"| `{name}` | {statement} |" in doc, name
