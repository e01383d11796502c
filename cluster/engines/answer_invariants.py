"""What a server's answer to one request must satisfy beyond its types: each invariant declared once, by name, with
its one-line statement; `smoke`, the correctness gate and the load generator's records all check these.

The bounds are SGLang 0.5.23's (reference/sglang-0.5.23.md §3.2, and its scheduler: batch_result_processor.py
counts `spec_verify_ct` once per verify step of a request not yet finished, each step commits its accepted drafts
plus one bonus token; output_streamer.py sends completion_tokens = len(output_ids); schedule_batch.py counts
cached_tokens from the radix-cache prefix of the prompt, once, before any retraction):

- the first output token comes from prefill, not a verify step, and every verify step yields at least one token,
  so spec_verify_ct <= completion_tokens - 1;
- the lower bound: an event that carries new tokens needs a scheduler step that produced them: the first is the
  prefill's, each later one a verify step or the re-prefill after a retraction. Events can merge (a slow reader,
  --stream-interval) but never split, so token-carrying events - 1 <= spec_verify_ct + num_retractions. It is
  checked only where the stream states num_retractions (SGLang native meta_info): the OpenAI streams do not, and
  retractions are real under load. No lower bound from completion_tokens holds: one step may accept every draft.

A type error (a count that is not an integer 0..2^31-1) is found earlier, where the field is read
(answer_fields.count_field: a MalformedAnswerError naming the field); `counts_in_range` repeats it over typed
values so that a record built elsewhere is held to it too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

from cluster.engines.answer_fields import MAX_COUNT, count_field
from cluster.input_files import JsonObject
from cluster.kernel.gate import GateOutput

BROKEN_PREFIX = "answer invariant "
"""How a request's recorded error starts when its answer broke an invariant (then the invariant's name, ': ')."""


@dataclass(frozen=True)
class Answer:
    """What one answer says about its request, typed: the server's counts and, for a stream, what its events did."""

    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    cached_tokens: Optional[int] = None
    spec_verify_ct: Optional[int] = None
    retractions: Optional[int] = None
    """meta_info.num_retractions (SGLang native); None where the answer does not state it."""
    event_tokens: Optional[tuple[int, ...]] = None
    """Tokens each token-carrying event brought, in order (a stream); None for a whole (non-streamed) answer."""
    counts_stated: bool = True
    """The events stated their cumulative counts (SGLang native, OpenAI continuous usage); False where the client
    counted one token per event with text (then each event brought at least one)."""
    count_went_down: Optional[tuple[int, int]] = None
    """(before, after) of a stated cumulative completion_tokens that decreased between events."""
    output_ids: Optional[int] = None
    """How many output_ids the final event (or the whole answer) held; None when it held none."""
    last_event_tokens: Optional[int] = None
    """New tokens the final event brought (an incremental stream's final output_ids hold only those)."""
    events_after_finish: int = 0
    """Events after the one that carried the finish reason that still carried output or another finish reason."""
    error_event: Optional[str] = None
    """The message of an {"error": ...} event inside the stream."""


@dataclass(frozen=True)
class Invariant:
    name: str
    statement: str
    broken: Callable[[Answer], Optional[str]]
    """Why `Answer` breaks it, or None (also when the answer lacks what it needs to judge)."""


@dataclass(frozen=True)
class Broken:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{BROKEN_PREFIX}{self.invariant}: {self.detail}"


def _counts_in_range(a: Answer) -> Optional[str]:
    for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "spec_verify_ct", "retractions"):
        v = getattr(a, name)
        if v is not None and not 0 <= v <= MAX_COUNT:
            return f"{name} {v} is not a count 0..{MAX_COUNT}"
    if a.event_tokens is not None and any(k < 0 for k in a.event_tokens):
        return f"an event brought {min(a.event_tokens)} tokens"
    return None


def _prompt_positive(a: Answer) -> Optional[str]:
    return "prompt_tokens 0: every request holds at least one input token" if a.prompt_tokens == 0 else None


def _cached_within_prompt(a: Answer) -> Optional[str]:
    if a.cached_tokens is not None and a.prompt_tokens is not None and a.cached_tokens > a.prompt_tokens:
        return f"cached_tokens {a.cached_tokens} > prompt_tokens {a.prompt_tokens}"
    return None


def _completion_matches_events(a: Answer) -> Optional[str]:
    if a.count_went_down is not None:
        before, after = a.count_went_down
        return f"the cumulative completion_tokens went down from {before} to {after}"
    if a.event_tokens is None or a.completion_tokens is None:
        return None
    carried = sum(a.event_tokens)
    if a.counts_stated and a.completion_tokens != carried:
        return f"completion_tokens {a.completion_tokens} but the events brought {carried}"
    if not a.counts_stated and a.completion_tokens < len(a.event_tokens):
        return f"completion_tokens {a.completion_tokens} < the {len(a.event_tokens)} events that carried text"
    return None


def _output_ids_match(a: Answer) -> Optional[str]:
    n, ct = a.output_ids, a.completion_tokens
    if a.events_after_finish:  # the finishing event was not the last: finish_reason_last says so, not this
        return None
    if n is None or ct is None or n == ct or (a.last_event_tokens is not None and n == a.last_event_tokens):
        return None
    return f"{n} output_ids but completion_tokens {ct}" + (
        f" (and the final event brought {a.last_event_tokens})" if a.last_event_tokens is not None else "")


def _verify_at_most(a: Answer) -> Optional[str]:
    v, ct = a.spec_verify_ct, a.completion_tokens
    if v and ct is not None and v > ct - 1:
        return f"spec_verify_ct {v} > completion_tokens {ct} - 1 (the first token is prefill's)"
    return None


def _verify_covers_events(a: Answer) -> Optional[str]:
    v, r, events = a.spec_verify_ct, a.retractions, a.event_tokens
    if not v or r is None or events is None or len(events) - 1 <= v + r:
        return None
    return (f"{len(events)} token-carrying events but spec_verify_ct {v} + num_retractions {r} + 1 prefill "
            "(each event needs a step that produced tokens)")


def _finish_last(a: Answer) -> Optional[str]:
    n = a.events_after_finish
    return None if n == 0 else f"{n} event(s) with output after the one that carried the finish reason"


def _no_error_event(a: Answer) -> Optional[str]:
    return None if a.error_event is None else f"the stream carried an error object: {a.error_event}"


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("counts_in_range", "every token and verify-step count is an integer from 0 to 2^31-1",
              _counts_in_range),
    Invariant("no_error_event", "an {\"error\": ...} object inside a stream is the request's error, named by its "
              "message", _no_error_event),
    Invariant("finish_reason_last", "no event after the one carrying the finish reason carries output or another "
              "finish reason", _finish_last),
    Invariant("prompt_tokens_positive", "prompt_tokens > 0 (SGLang refuses a request without input)",
              _prompt_positive),
    Invariant("cached_within_prompt", "cached_tokens <= prompt_tokens (the cache hit is a prefix of the prompt)",
              _cached_within_prompt),
    Invariant("completion_matches_events", "completion_tokens equals the tokens the events brought (never "
              "decreasing) where they state it, and is at least the events that carried text where they do not",
              _completion_matches_events),
    Invariant("output_ids_match_count", "the output_ids of the answer number completion_tokens (or, incremental, "
              "the final event's new tokens)", _output_ids_match),
    Invariant("verify_steps_at_most_tokens", "spec_verify_ct <= completion_tokens - 1 (prefill gives the first "
              "token, each verify step at least one more)", _verify_at_most),
    Invariant("verify_steps_cover_events", "token-carrying events - 1 <= spec_verify_ct + num_retractions, where "
              "the stream states num_retractions", _verify_covers_events),
)
"""Every invariant judged over an `Answer`, in the order smoke shows them and a record names the first broken: an
error event or a finish reason mid-stream first, since either makes the counts after it meaningless."""

CONTENT_ENCODING = ("content_encoding_known", "a body comes in the identity encoding sglbench asks for, or gzip/"
                    "deflate (decoded by the control calls); any other Content-Encoding is refused by name")
"""The one invariant judged on the wire, before there is an Answer (engines/http_call.py, loadgen/framing.py)."""

BY_NAME = {i.name: i for i in INVARIANTS}


def broken(answer: Answer) -> list[Broken]:
    """Every invariant `answer` breaks, in declaration order (empty when it keeps them all)."""
    out = []
    for inv in INVARIANTS:
        why = inv.broken(answer)
        if why is not None:
            out.append(Broken(inv.name, why))
    return out


def counts_answer(counts: JsonObject, where: str, output_ids: Optional[int] = None) -> Answer:
    """The Answer of a whole (non-streamed) answer from the object that holds its counts (SGLang's meta_info, an
    OpenAI usage): each count read typed, a wrong type a MalformedAnswerError naming `where` and the field."""
    c = {k: count_field(counts, k, where) for k in ("prompt_tokens", "completion_tokens", "cached_tokens",
                                                   "spec_verify_ct", "num_retractions")}
    return Answer(prompt_tokens=c["prompt_tokens"], completion_tokens=c["completion_tokens"],
                  cached_tokens=c["cached_tokens"], spec_verify_ct=c["spec_verify_ct"],
                  retractions=c["num_retractions"], output_ids=output_ids)


def checked_gate_output(out: GateOutput, answer: Answer) -> GateOutput:
    """A gate answer as the gate may judge it: unchanged, or, when its counts break an invariant, that prompt's
    error naming it, its counts dropped (the gate's acceptance length must not use them)."""
    bad = broken(answer)
    return out if not bad else replace(out, error=str(bad[0]), completion_tokens=None, spec_verify_ct=None)


def invariant_reasons(errors: Sequence[Optional[str]], request_index: Sequence[int]) -> list[str]:
    """A run's invalid reasons from its requests' recorded errors (and their request_index): one per invariant
    some answers broke, naming it, how many requests and the first one's detail."""
    seen: dict[str, tuple[int, str]] = {}
    for e, i in zip(errors, request_index):
        name = invariant_of(e)
        if name is not None:
            n, first = seen.get(name, (0, f"request {i}: {str(e)[len(BROKEN_PREFIX) + len(name) + 2:]}"))
            seen[name] = (n + 1, first)
    return [f"answers broke invariant {name} ({BY_NAME[name].statement}) in {n} of {len(errors)} requests; "
            f"first: {first}" for name, (n, first) in seen.items()]


def invariant_of(error: Optional[str]) -> Optional[str]:
    """The invariant a request's recorded error names (one written from a `Broken`), else None."""
    if error is None or not error.startswith(BROKEN_PREFIX):
        return None
    name = error[len(BROKEN_PREFIX):].split(":", 1)[0]
    return name if name in BY_NAME else None


__all__ = ["Answer", "BROKEN_PREFIX", "BY_NAME", "Broken", "CONTENT_ENCODING", "INVARIANTS", "Invariant", "broken",
           "checked_gate_output", "counts_answer", "invariant_of", "invariant_reasons"]
