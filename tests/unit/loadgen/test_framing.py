"""Response framing: the frame loop a read of whole one-event chunk frames takes agrees with the state machine on
every split of one response."""

from __future__ import annotations

import asyncio
import json

import pytest

from cluster.kernel.records import RequestRecord
from cluster.engines.answer_fields import MalformedAnswerError
from cluster.engines.streams import OpenAIStreamParser
from cluster.loadgen.framing import Response

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _frame(data: bytes, ext: bytes = b"") -> bytes:
    return b"%x" % len(data) + ext + b"\r\n" + data + b"\r\n"


def _chunk(text: str, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"id": "c", "object": "text_completion", "choices": [
        {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}).encode() + b"\n\n"


# one response, every kind of frame: plain one-event frames, a frame with a chunk extension, two events in one frame,
# the finishing chunk as a two-line event (its data lines joined by a newline are the JSON), [DONE], the last chunk
FRAMES = [_frame(_chunk("a")), _frame(_chunk("b")), _frame(_chunk("c"), ext=b";x=1"), _frame(_chunk("d")),
          _frame(_chunk("e") + _chunk("f")), _frame(_chunk("g")),
          _frame(b'data: {"id":"c","object":"text_completion",\ndata: "choices":[{"index":0,"text":"h",'
                 b'"finish_reason":"length"}]}\n\n'),
          _frame(b"data: [DONE]\n\n"), b"0\r\n\r\n"]
BODY = b"".join(FRAMES)


def _run(reads: list[tuple[bytes, int]], frames: bool) -> tuple[RequestRecord, Response]:
    loop = asyncio.new_event_loop()
    try:
        rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=1, max_tokens=8)
        r = Response(rec, OpenAIStreamParser(), 0, loop.create_future())
        r.feed(HEAD, 0)
        for data, now in reads:
            if frames:
                r.event_frames(data, now)
            else:
                r.feed(data, now)
        return rec, r
    finally:
        loop.close()


def test_the_frame_loop_and_the_state_machine_give_one_record_on_every_split() -> None:
    whole, w = _run([(BODY, 1)], frames=False)
    assert whole.chunk_tokens == [1] * 8 and w.parser.meta().finish_reason == "length" and w.parser.meta().error is None
    splits = [[(BODY[i : i + step], i) for i in range(0, len(BODY), step)]  # reads of `step` bytes, each its time
              for step in (1, 7, 40, 97, 160, len(BODY))]
    # reads of k whole frames from frame j on (every kind of frame opens a read somewhere)
    splits += [([(b"".join(FRAMES[:j]), 0)] if j else [])
               + [(b"".join(FRAMES[i : i + k]), i) for i in range(j, len(FRAMES), k)]
               for k in (1, 2, 3) for j in range(k)]
    for step, reads in enumerate(splits):
        via_frames, r = _run(reads, frames=True)
        via_machine, m = _run(reads, frames=False)
        assert via_frames == via_machine, step
        assert r.parser.meta() == m.parser.meta() == w.parser.meta()
        assert r.complete and r.keep_alive
        assert len(via_frames.chunk_arrival_ns) == 8


def test_several_whole_frames_in_one_read_each_get_that_read_s_time() -> None:
    frames = [_frame(_chunk(t)) for t in "abc"]
    rec, r = _run([(frames[0], 5), (frames[1] + frames[2] + frames[0][:9], 9)], frames=True)
    assert rec.chunk_arrival_ns == [5, 9, 9] and rec.chunk_tokens == [1, 1, 1]
    assert not r.sse_frame_ready  # a frame's head is buffered: the next read goes to the state machine


def test_a_frame_without_its_crlf_is_malformed_on_both_paths() -> None:
    bad = _frame(_chunk("a"))[:-2] + b"XX" + _frame(_chunk("b"))
    for frames in (True, False):
        with pytest.raises(MalformedAnswerError, match="no CRLF after a chunk"):
            _run([(bad, 1)], frames=frames)


def test_an_error_status_s_frames_are_its_error_body_on_both_paths() -> None:
    head = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
    for frames in (True, False):
        loop = asyncio.new_event_loop()
        try:
            rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=1,
                                max_tokens=8)
            r = Response(rec, OpenAIStreamParser(), 0, loop.create_future())
            r.feed(head, 0)
            take = r.event_frames if frames else r.feed
            take(_frame(_chunk("a")), 1)  # a whole one-event frame, but not a 200 stream's
            take(b"0\r\n\r\n", 2)
        finally:
            loop.close()
        assert rec.chunk_arrival_ns == [] and rec.http_status == 503
        assert rec.error is not None and rec.error.startswith("HTTP 503: data: ")


@pytest.mark.parametrize("head, error", [
    (b"", "connection error: server closed the connection before answering (EOF)"),
    (b"HTTP/1.1 20", "stream broken: connection closed inside the response head after 11 bytes (EOF)"),
    (b'{"a": 1}', "malformed answer: expected an HTTP/1.x status line, got b'{\"a\": 1}'"),
    (b"\x16\x03\x01\x00", "malformed answer: expected an HTTP/1.x status line, got b'\\x16\\x03\\x01\\x00'"),
])
def test_a_close_before_the_head_says_what_came(head: bytes, error: str) -> None:
    """A close before the response head was whole: nothing came, part of a head came, or bytes that cannot begin an
    HTTP/1.x answer came (an HTTP/0.9 body, a TLS record) — once all three read 'closed before answering'."""
    loop = asyncio.new_event_loop()
    try:
        rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=1, max_tokens=8)
        r = Response(rec, OpenAIStreamParser(), 0, loop.create_future())
        if head:
            r.feed(head, 0)
        r.connection_lost(None)
        assert rec.error == error and r.complete
    finally:
        loop.close()
