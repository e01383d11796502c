"""Fuzz target of the live-server boundary: real SGLang 0.5.23 byte streams (tests/contract/fixtures), mutated.

(a) pure: bytes, splits, header sizes, status lines, chunk sizes, SSE framing and the JSON types in meta_info/usage,
fed to the streaming client's framing and the engines' stream parsers. Each response ends in a record or a recorded
error, the only exception the framing raises is MalformedAnswerError (the pool records it), a record never carries a
count that is not a non-negative int, and every split of the same bytes into reads gives the same record on both
read paths (event_frames and the state machine).
(b) live, a few examples: a loopback server replays a mutated answer (whole, split, trickled, never ended) to the
bounded control call (health/info polling, the scrape), to `smoke`, to the gate's request and to a window's
streaming request; each call ends within its deadline with this project's error, a recorded error or an answer.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any, Callable, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.kernel.records import RequestRecord
from cluster.engines.answer_fields import MAX_COUNT, MalformedAnswerError
from cluster.engines.base import StreamParser
from cluster.engines.http_call import call
from cluster.engines.sglang import SGLangEngine
from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser
from cluster.errors import SglbenchError
from cluster.loadgen.client import _apply_meta
from cluster.loadgen.framing import Response
from cluster.kernel.gate import GateOutput
from cluster.loadgen.gate import ask_greedy
from tests.fuzz.fuzzing import FUZZ, budget
from tests.fuzz.replay_server import ReplayServer, Script

FIXTURES = Path(__file__).resolve().parents[1] / "contract" / "fixtures" / "sglang-0.5.23-cpu"


def _streams() -> list[tuple[str, list[bytes]]]:
    """(path, SSE events) of every recorded stream, each event with its blank line."""
    out = []
    for f in sorted(FIXTURES.glob("*.json")):
        for e in json.loads(f.read_text())["exchanges"]:
            if "sse" in e:
                out.append((e["request"]["path"], [x.encode() + b"\n\n" for x in e["sse"].split("\n\n") if x]))
    return out


STREAMS = _streams()
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
DEEP = "__deep__"
WRONG = st.sampled_from(["7", [7], {"n": 7}, -7, 7.5, True, None, "", 10 ** 30, 2 ** 31, [], "null", DEEP])
"""Values of the wrong type or range for a JSON field (and some right ones: null, a big int); DEEP stands for a list
nested 900 levels (under the decoder's limit, past what a repr or an encoder downstream may recurse into)."""


def _mutate_json(event: bytes, draw: Callable[..., Any]) -> bytes:
    """One field of the event's JSON (top level, meta_info, usage, a choice) set to a drawn value."""
    if not event.startswith(b"data: {"):
        return event
    doc = json.loads(event[6:])
    holders = [doc] + [v for v in doc.values() if isinstance(v, dict)]
    holders += [c for c in doc.get("choices") or [] if isinstance(c, dict)]
    holder = draw(st.sampled_from(holders))
    if not holder:
        return event
    key = draw(st.sampled_from(sorted(holder)))
    holder[key] = draw(WRONG)
    text = json.dumps(doc, separators=(",", ":")).encode().replace(b'"%s"' % DEEP.encode(), b"[" * 900 + b"]" * 900)
    return b"data: " + text + b"\n\n"


COUNTS = st.sampled_from([b"2147483648", b"1" + b"0" * 30, b"-1", b'"5"', b"5.5", b"true", b"null", b"0"])
_COUNT = re.compile(rb'("(?:completion|prompt|cached)_tokens": ?)(-?\d+)')


def _mutate_count(event: bytes, draw: Callable[..., Any]) -> bytes:
    """One count's digits in the bytes replaced (what the parsers' fast paths read without decoding the JSON)."""
    hits = list(_COUNT.finditer(event))
    if not hits:
        return event
    m = draw(st.sampled_from(hits))
    value: bytes = draw(COUNTS)
    return event[:m.start(2)] + value + event[m.end(2):]


def _frame(events: list[bytes], per_chunk: int) -> bytes:
    chunks = [b"".join(events[i:i + per_chunk]) for i in range(0, len(events), per_chunk)]
    return b"".join(b"%x\r\n" % len(c) + c + b"\r\n" for c in chunks) + b"0\r\n\r\n"


@st.composite
def responses(draw: Callable[..., Any]) -> tuple[str, bytes]:
    """A recorded stream as one HTTP/1.1 response, with zero or more mutations of its JSON, framing or bytes."""
    path, events = draw(st.sampled_from(STREAMS))
    events = list(events)
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(events) - 1))
        events[i] = _mutate_json(events[i], draw) if draw(st.booleans()) else _mutate_count(events[i], draw)
    sse = draw(st.sampled_from(["as-is", "no-space", "crlf", "comment", "multi-line", "no-blank"]))
    if sse == "no-space":
        events = [e.replace(b"data: ", b"data:", 1) for e in events]
    elif sse == "crlf":
        events = [e[:-2] + b"\r\n\r\n" for e in events]
    elif sse == "comment":
        events = [b": keep-alive\n\n" + e for e in events]
    elif sse == "multi-line":
        events = [e.replace(b",", b",\ndata: ", 1) for e in events]
    elif sse == "no-blank":
        events = [e[:-1] for e in events]
    head = HEAD
    kind = draw(st.sampled_from(["chunked", "chunked", "length", "close", "status", "big-header", "chunk-size"]))
    body = b"".join(events)
    if kind == "length":
        raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    elif kind == "close":
        raw = b"HTTP/1.0 200 OK\r\n\r\n" + body
    else:
        if kind == "status":
            head = draw(st.sampled_from([b"HTTP/1.1 200\r\n", b"HTTP/2 200 OK\r\n", b"HTTP/1.1 20 OK\r\n",
                                         b"HTTP/1.1 503 Busy\r\n", b"ICY 200 OK\r\n", b"HTTP/1.1 +20 OK\r\n",
                                         b"\r\n"])) + head.split(b"\r\n", 1)[1]
        elif kind == "big-header":
            head = head[:-2] + b"X-Pad: " + b"a" * draw(st.sampled_from([100, 65_400, 70_000, 300_000])) + b"\r\n\r\n"
        raw = head + _frame(events, draw(st.integers(1, 3)))
        if kind == "chunk-size":
            size_at = raw.index(b"\r\n\r\n") + 4
            line_end = raw.index(b"\r\n", size_at)
            bad = draw(st.sampled_from([b"-5", b"zz", b"0x10", b"+a", b"1_0", b"f" * 20, b"", b"5;ext=1", b" a"]))
            raw = raw[:size_at] + bad + raw[line_end:]
    op = draw(st.sampled_from(["none", "none", "truncate", "flip", "insert"]))
    if op != "none" and raw:
        at = draw(st.integers(0, len(raw) - 1))
        if op == "truncate":
            raw = raw[:at]
        elif op == "flip":
            raw = raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1:]
        else:
            raw = raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    return path, raw


def _parser(path: str) -> StreamParser:
    return SGLangNativeParser() if path == "/generate" else OpenAIStreamParser()


def _replay(path: str, raw: bytes, cuts: list[int], frames: bool) -> tuple[Any, ...]:
    """What the pool and the client make of `raw` read in pieces at `cuts`: the record's fields and the meta."""
    loop = asyncio.new_event_loop()
    try:
        rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=1, max_tokens=8)
        parser = _parser(path)
        r = Response(rec, parser, 0, loop.create_future())
        bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(raw))), len(raw)]
        for a, b in zip(bounds, bounds[1:]):
            if r.complete:
                break
            try:
                (r.event_frames if frames else r.feed)(raw[a:b], 0)
            except MalformedAnswerError as e:  # what the pool does with it
                r.fail(f"malformed answer: {e}")
        r.connection_lost(None)
        _apply_meta(parser, rec)
        return (rec.error, rec.http_status, rec.chunk_tokens, rec.chunk_arrival_ns, rec.prompt_tokens,
                rec.completion_tokens, rec.cached_tokens, rec.spec_verify_ct, rec.finish_reason, parser.meta())
    finally:
        loop.close()


@FUZZ
@given(responses(), st.lists(st.integers(0, 400_000), max_size=12), st.integers(1, 64))
def test_every_mutated_response_is_a_record_or_its_error_the_same_for_every_split(
        case: tuple[str, bytes], cuts: list[int], step: int) -> None:
    path, raw = case
    whole = _replay(path, raw, [], frames=False)
    error, status, tokens, _, prompt, completion, cached, verify, finish, _ = whole
    for count in (prompt, completion, cached, verify):  # what the window's int32 columns can hold
        assert count is None or (type(count) is int and 0 <= count <= MAX_COUNT), whole
    assert finish is None or isinstance(finish, str)
    assert error is not None or (status == 200 and finish is not None), whole  # never a silent good request
    assert all(type(k) is int and k >= 0 for k in tokens) and sum(tokens) <= MAX_COUNT
    small = list(range(0, min(len(raw), 3000), step))  # byte-steps over the head and first frames
    for reads in (cuts, small, cuts + small):
        assert _replay(path, raw, reads, frames=True) == whole
        assert _replay(path, raw, reads, frames=False) == whole


# --- (b) live ---------------------------------------------------------------------------------------------------

DEADLINE_S = 0.4


@st.composite
def scripts(draw: Callable[..., Any]) -> Script:
    _, raw = draw(responses())
    how = draw(st.sampled_from(["whole", "split", "trickle", "hang"]))
    if how == "whole":
        return Script((raw,))
    if how == "split":
        k = draw(st.integers(1, 512))
        return Script(tuple(raw[i:i + k] for i in range(0, len(raw), k)))
    cut = draw(st.integers(0, max(0, min(len(raw), 2000) - 1)))
    return Script((raw[:cut],), gap_s=0.02, then=how)


def _ends_in_time(t0: float, slack_s: float = 0.6) -> None:
    assert time.monotonic() - t0 < DEADLINE_S + slack_s


@settings(FUZZ, max_examples=budget(8))
@given(scripts())
def test_a_control_call_ends_within_its_deadline_with_an_answer_or_our_error(script: Script) -> None:
    with ReplayServer(lambda m, p: script) as srv:
        t0 = time.monotonic()
        got: Optional[BaseException] = None
        try:
            call(srv.url, "/generate", method="POST", body=b"{}", timeout_s=DEADLINE_S)
        except SglbenchError as e:
            got = e
        _ends_in_time(t0)
        assert script.then == "close" or got is not None  # an answer never finished is an error


@settings(FUZZ, max_examples=budget(6))
@given(scripts())
def test_a_gate_request_ends_within_its_deadline_with_an_answer_or_its_error(script: Script) -> None:
    with ReplayServer(lambda m, p: script) as srv:
        async def ask() -> GateOutput:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                return await ask_greedy(session, SGLangEngine(), srv.url, "Say OK", 4, "m", DEADLINE_S)

        t0 = time.monotonic()
        answer = asyncio.run(ask())
        _ends_in_time(t0)
    assert isinstance(answer, GateOutput)
    if answer.error is None:
        assert answer.completion_tokens is None or type(answer.completion_tokens) is int
    else:
        assert answer.text == "" and answer.token_ids is None


@settings(FUZZ, max_examples=budget(6))
@given(scripts())
def test_a_window_request_ends_within_its_deadline_as_a_record_or_its_error(script: Script) -> None:
    from cluster.loadgen.client import StreamPool, stream_request

    async def one(url: str) -> RequestRecord:
        rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=1, max_tokens=8)
        async with StreamPool(url, 1) as pool:
            await stream_request(pool, "/generate", b"{}", SGLangNativeParser(), time.monotonic_ns(), DEADLINE_S, rec)
        return rec

    with ReplayServer(lambda m, p: script) as srv:
        t0 = time.monotonic()
        rec = asyncio.run(one(srv.url))
        _ends_in_time(t0)
    assert rec.error is not None or (rec.http_status == 200 and rec.finish_reason is not None)
    assert script.then == "close" or rec.error is not None
    for count in (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens, rec.spec_verify_ct):
        assert count is None or (type(count) is int and 0 <= count <= MAX_COUNT)
    assert sum(rec.chunk_tokens) <= MAX_COUNT


@settings(FUZZ, max_examples=budget(4))
@given(scripts())
def test_smoke_ends_within_its_calls_deadlines_with_a_table_or_our_error(script: Script) -> None:
    from cluster.engines.smoke import run_smoke

    with ReplayServer(lambda m, p: script) as srv:
        t0 = time.monotonic()
        try:
            checks = run_smoke(srv.url, DEADLINE_S)
            assert checks and all(c.ok or c.found for c in checks)
        except SglbenchError:
            pass
        # at most one deadline per call smoke makes (health, model_info, server_info twice, generate, flush)
        assert time.monotonic() - t0 < 6 * DEADLINE_S + 1.5


@settings(FUZZ, max_examples=budget(4))
@given(scripts())
def test_smoke_of_a_deployment_ends_within_its_calls_deadlines(script: Script) -> None:
    """The deployment smoke asks GET /workers first (is it SGLang's gateway?): whatever that answer is, a table or
    our error, within one deadline per call (health, workers, then the server's six or the gateway's five)."""
    from cluster.engines.gateway_smoke import deployment_failure, smoke_deployment

    with ReplayServer(lambda m, p: script) as srv:
        t0 = time.monotonic()
        try:
            targets = smoke_deployment(srv.url, DEADLINE_S)
            assert targets and all(c.ok or c.found for t in targets for c in t.checks)
            deployment_failure(targets)
        except SglbenchError:
            pass
        assert time.monotonic() - t0 < 8 * DEADLINE_S + 1.5
