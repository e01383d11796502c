"""Fuzz target of the answer invariants (cluster/engines/answer_invariants.py): real SGLang 0.5.23 answers
(tests/contract/fixtures/sglang-0.5.23-cpu, native and OpenAI streams, speculative and not) mutated in what they say:
counts, finish reasons, meta_info/usage fields, event order, SSE framing and read splits.

Each mutated answer goes through the load generator's whole path (framing, the parser's fast paths, the record) and
must be either caught (the request's error names the invariant broken, or another error where the answer has no
finish or no types) or harmless (no error, and the record's figures are what its events state). The judge it is
held to is a reference written here, apart from the parsers: every event decoded with json.loads, no fast path,
the same invariants stated over plain lists. A record error naming an invariant the reference does not find broken
is a false alarm; an answer the reference finds impossible with no error is a miss.
Run with --hypothesis-show-statistics to see how often each invariant caught a mutation.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Optional

from hypothesis import event, given
from hypothesis import strategies as st

from cluster.engines.answer_invariants import BROKEN_PREFIX, invariant_of
from tests.fuzz.fuzzing import FUZZ
from tests.fuzz.test_fuzz_server_responses import FIXTURES, HEAD, _frame, _replay

Doc = dict[str, Any]


def _recorded() -> list[tuple[str, str, list[Doc]]]:
    """(name, path, decoded events without [DONE]) of every recorded stream that answered 200 without an error."""
    out = []
    for f in sorted(FIXTURES.glob("*.json")):
        for e in json.loads(f.read_text())["exchanges"]:
            if "sse" in e and not e["name"].startswith("error"):
                docs = [json.loads(x[len("data: "):]) for x in e["sse"].split("\n\n") if x and x != "data: [DONE]"]
                out.append((f"{f.stem}/{e['name']}", e["request"]["path"], docs))
    return out


RECORDED = _recorded()


# --- the reference judge ----------------------------------------------------------------------------------------

def _native(docs: list[Doc]) -> tuple[set[str], Optional[dict[str, Any]]]:
    """(invariants broken, the record's figures): figures None when the stream has no finish reason."""
    broken: set[str] = set()
    metas = [d.get("meta_info") or {} for d in docs]
    fins = [i for i, m in enumerate(metas) if m.get("finish_reason") is not None]
    if not fins:
        return broken, None
    top, tokens, went_down = 0, [], False
    for m in metas:
        ct = m.get("completion_tokens")
        if ct is None:
            continue
        if ct < top:
            went_down = True
        elif ct > top:
            tokens.append(ct - top)
            top = ct
    fin, mi = docs[fins[0]], metas[fins[0]]
    after = len(docs) - 1 - fins[0]
    verify, retr = mi.get("spec_verify_ct"), mi.get("num_retractions")
    if went_down:
        broken.add("completion_matches_events")
    if after:
        broken.add("finish_reason_last")
    broken |= _prompt_rules(metas, fins[0])
    if verify and verify > top - 1:
        broken.add("verify_steps_at_most_tokens")
    if verify and retr is not None and len(tokens) - 1 > verify + retr:
        broken.add("verify_steps_cover_events")
    ids = fin.get("output_ids")
    before_fin = max([m.get("completion_tokens") or 0 for m in metas[:fins[0]]], default=0)
    fin_delta = max(0, (mi.get("completion_tokens") or 0) - before_fin)
    if not after and isinstance(ids, list) and len(ids) not in (top, fin_delta):
        broken.add("output_ids_match_count")
    return broken, {"completion_tokens": top, "spec_verify_ct": verify, "chunk_tokens": tokens,
                    "finish_reason": _finish_type(mi["finish_reason"])}


ELSEWHERE = "elsewhere: "
"""Marks an invariant broken only by an event whose counts no record keeps (a prompt_tokens 0 on a mid-stream event
of a stream whose finishing event says 3): a record that keeps the finishing event's counts is harmless."""


def _prompt_rules(counts: list[Doc], fin: int) -> set[str]:
    """prompt_tokens_positive and cached_within_prompt over the counts a record keeps (the last stated from the
    finishing event on: every one of those is decoded) and, marked ELSEWHERE, over any event's."""
    broken: set[str] = set()
    for i, c in enumerate(counts):
        prompt, cached = c.get("prompt_tokens"), c.get("cached_tokens")
        if prompt == 0:
            broken.add(ELSEWHERE + "prompt_tokens_positive")
        if cached is not None and prompt is not None and cached > prompt:
            broken.add(ELSEWHERE + "cached_within_prompt")
    kept = counts[fin:]
    prompt = next((c["prompt_tokens"] for c in reversed(kept) if c.get("prompt_tokens") is not None), None)
    cached = next((c["cached_tokens"] for c in reversed(kept) if c.get("cached_tokens") is not None), None)
    if prompt == 0:
        broken.add("prompt_tokens_positive")
    if cached is not None and prompt is not None and cached > prompt:
        broken.add("cached_within_prompt")
    return broken


def _finish_type(fr: Any) -> str:
    return fr if isinstance(fr, str) else fr["type"]


def _openai(docs: list[Doc]) -> tuple[set[str], Optional[dict[str, Any]]]:
    broken: set[str] = set()
    top, tokens, stated, went_down = 0, [], True, False
    finish: Optional[str] = None
    verify: Optional[int] = None
    after = 0
    for d in docs:
        choices = d.get("choices") or []
        content = "".join((c.get("text") or "") + ((c.get("delta") or {}).get("content") or "")
                          + ((c.get("delta") or {}).get("reasoning_content") or "") for c in choices)
        fr = next((c["finish_reason"] for c in choices if c.get("finish_reason") is not None), None)
        if finish is not None and choices and (content or fr is not None):
            after += 1
        ct = (d.get("usage") or {}).get("completion_tokens")
        if ct is not None and ct < top:
            went_down = True
        if ct is not None:
            if choices and ct > top:
                tokens.append(ct - top)
            top = max(top, ct)
        elif content:
            tokens.append(1)
            stated = False
        v = ((d.get("sglext") or {}).get("spec_tokens_details") or {}).get("spec_verify_ct")
        verify = verify if v is None else v
        finish = finish or fr
    if finish is None:
        return broken, None
    completion = top or sum(tokens)
    if went_down or (stated and completion != sum(tokens)) or (not stated and completion < len(tokens)):
        broken.add("completion_matches_events")
    if after:
        broken.add("finish_reason_last")
    if verify and verify > completion - 1:
        broken.add("verify_steps_at_most_tokens")
    fin = next(i for i, d in enumerate(docs) if any(c.get("finish_reason") is not None
                                                    for c in d.get("choices") or []))
    counts = [{"prompt_tokens": u.get("prompt_tokens"),
               "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens")}
              if (u := d.get("usage") or {}).get("completion_tokens") is not None else {} for d in docs]
    broken |= _prompt_rules(counts, fin)
    return broken, {"completion_tokens": completion, "spec_verify_ct": verify, "chunk_tokens": tokens,
                    "finish_reason": finish}


def judge(path: str, docs: list[Doc]) -> tuple[set[str], Optional[dict[str, Any]]]:
    return _native(docs) if path == "/generate" else _openai(docs)


def test_every_recorded_answer_keeps_every_invariant_by_the_reference_and_by_the_load_path() -> None:
    assert len(RECORDED) == 8
    for name, path, docs in RECORDED:
        broken, figures = judge(path, docs)
        assert broken == set() and figures is not None, name  # nothing broken, not even elsewhere
        rec = _replay(path, _raw(docs, "as-is"), [], frames=False)
        assert rec[0] is None and rec[5] == figures["completion_tokens"] and rec[2] == figures["chunk_tokens"], name


# --- mutations --------------------------------------------------------------------------------------------------

def _counts_holder(d: Doc) -> Optional[Doc]:
    return d.get("meta_info") if "meta_info" in d else d.get("usage")


def _mutate(path: str, docs: list[Doc], draw: Callable[..., Any]) -> str:
    """One mutation of what the events say, in place; returns its kind (for the statistics)."""
    native = path == "/generate"
    kind = draw(st.sampled_from(["count", "final-count", "finish", "drop-key", "swap", "duplicate", "drop-event",
                                 "reorder-keys", "extra-object", "text"]))
    i = draw(st.integers(0, len(docs) - 1))
    n = draw(st.integers(0, 20))
    if kind == "count":
        holder = _counts_holder(docs[i])
        if holder is not None and holder.get("completion_tokens") is not None:
            holder["completion_tokens"] = max(0, holder["completion_tokens"] + draw(st.integers(-3, 3)))
    elif kind == "final-count":
        last = docs[-1] if native else docs[draw(st.integers(0, len(docs) - 1))]
        if native:
            key = draw(st.sampled_from(["prompt_tokens", "cached_tokens", "spec_verify_ct", "num_retractions",
                                        "completion_tokens"]))
            if isinstance(last.get("meta_info"), dict):
                last["meta_info"][key] = n
        else:
            spec = (last.get("sglext") or {}).get("spec_tokens_details")
            if spec is not None:
                spec["spec_verify_ct"] = n
            elif last.get("usage"):
                last["usage"][draw(st.sampled_from(["prompt_tokens", "completion_tokens"]))] = n
    elif kind == "finish":
        if native and isinstance(docs[i].get("meta_info"), dict):
            docs[i]["meta_info"]["finish_reason"] = draw(st.sampled_from(
                [None, {"type": "length", "length": n}, {"type": "stop", "matched": 2}]))
        elif docs[i].get("choices"):
            docs[i]["choices"][0]["finish_reason"] = draw(st.sampled_from([None, "length", "stop"]))
    elif kind == "drop-key":
        holder = _counts_holder(docs[i]) if draw(st.booleans()) else docs[i]
        if holder:
            holder.pop(draw(st.sampled_from(sorted(holder))), None)
    elif kind == "swap":
        j = draw(st.integers(0, len(docs) - 1))
        docs[i], docs[j] = docs[j], docs[i]
    elif kind == "duplicate":
        docs.insert(i, copy.deepcopy(docs[i]))
    elif kind == "reorder-keys":  # the same object, its keys (and meta_info's or usage's) in another order
        keys = list(docs[i])
        order = draw(st.permutations(keys))
        docs[i] = {k: docs[i][k] for k in order}
        holder = _counts_holder(docs[i])
        if holder:
            inner = draw(st.permutations(list(holder)))
            docs[i]["meta_info" if "meta_info" in docs[i] else "usage"] = {k: holder[k] for k in inner}
    elif kind == "extra-object":  # a key the parser does not read, after the others, holding look-alike counts
        docs[i][draw(st.sampled_from(["extra", "stats", "sglext_future"]))] = {
            "completion_tokens": n, "finish_reason": draw(st.sampled_from([None, "length"])), "prompt_tokens": n}
    elif kind == "text":  # a content string emptied or filled (what a stream without usage counts)
        for c in docs[i].get("choices") or []:
            if "text" in c:
                c["text"] = draw(st.sampled_from(["", "x"]))
            elif isinstance(c.get("delta"), dict):
                c["delta"]["content"] = draw(st.sampled_from(["", "x", None]))
    elif len(docs) > 1:
        del docs[i]
    return kind


FRAMINGS = ["as-is", "crlf", "no-space", "comment", "multi-line"]


def _raw(docs: list[Doc], framing: str) -> bytes:
    events = [b"data: " + json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n" for d in docs]
    events.append(b"data: [DONE]\n\n")
    if framing == "crlf":
        events = [e[:-2] + b"\r\n\r\n" for e in events]
    elif framing == "no-space":
        events = [e.replace(b"data: ", b"data:", 1) for e in events]
    elif framing == "comment":
        events = [b": keep-alive\n\n" + e for e in events]
    elif framing == "multi-line":
        events = [e.replace(b",", b",\ndata: ", 1) for e in events]
    return HEAD + _frame(events, 1)


@st.composite
def mutated(draw: Callable[..., Any]) -> tuple[str, list[Doc], str, list[str]]:
    name, path, docs = draw(st.sampled_from(RECORDED))
    docs = copy.deepcopy(docs)
    kinds = [_mutate(path, docs, draw) for _ in range(draw(st.integers(1, 2)))]
    return path, docs, draw(st.sampled_from(FRAMINGS)), [f"{name}: {k}" for k in kinds]


@FUZZ
@given(mutated(), st.lists(st.integers(0, 20_000), max_size=8), st.booleans())
def test_a_mutated_recorded_answer_is_caught_by_a_named_invariant_or_harmless(
        case: tuple[str, list[Doc], str, list[str]], cuts: list[int], frames: bool) -> None:
    path, docs, framing, _ = case
    rec = _replay(path, _raw(docs, framing), cuts, frames)
    error, chunk_tokens, completion, verify, finish = rec[0], rec[2], rec[5], rec[7], rec[8]
    broken, figures = judge(path, docs)
    named = invariant_of(error)
    if error is None:
        event("harmless")
        assert not {b for b in broken if not b.startswith(ELSEWHERE)}, (broken, rec)  # else a miss
        assert figures is not None and (completion, verify, chunk_tokens, finish) == (
            figures["completion_tokens"], figures["spec_verify_ct"], figures["chunk_tokens"],
            figures["finish_reason"]), (figures, rec)
    elif named is not None:
        event(f"caught: {named}")
        assert named in broken or ELSEWHERE + named in broken, (named, broken, error)  # else a false alarm
    else:
        event(f"other error: {error.split(':')[0]}")
        assert not error.startswith(BROKEN_PREFIX)
        assert figures is None or broken or "error" in error, (error, broken, figures)
