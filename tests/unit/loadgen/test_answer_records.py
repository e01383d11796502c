"""The load generator's record of an answer framed with CRLF event ends is the record of the same answer with LF
ones (SSE allows both; SGLang writes LF): a window request no longer loses every event of such a stream."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from cluster.engines.streams import SGLangNativeParser
from cluster.kernel.records import RequestRecord
from cluster.loadgen.client import StreamPool, stream_request
from tests.fuzz.replay_server import ReplayServer, Script


def _stream(end: bytes) -> bytes:
    events = []
    for ct in (1, 2, 3):
        meta = {"id": "r", "finish_reason": {"type": "length", "length": 3} if ct == 3 else None, "prompt_tokens": 3,
                "completion_tokens": ct, "cached_tokens": 0}
        events.append(b"data: " + json.dumps({"text": "a" * ct, "output_ids": list(range(ct)),
                                              "meta_info": meta}).encode() + end)
    events.append(b"data: [DONE]" + end)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n" % len(e) + e + b"\r\n" for e in events) + b"0\r\n\r\n"


def _record(raw: bytes, split: int) -> RequestRecord:
    async def one(url: str) -> RequestRecord:
        rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=3, max_tokens=3)
        async with StreamPool(url, 1) as pool:
            await stream_request(pool, "/generate", b"{}", SGLangNativeParser(), time.monotonic_ns(), 5.0, rec)
        return rec

    pieces = tuple(raw[i:i + split] for i in range(0, len(raw), split)) if split else (raw,)
    with ReplayServer(lambda m, p: Script(pieces, gap_s=0.001 if split else 0.0)) as srv:
        return asyncio.run(one(srv.url))


@pytest.mark.parametrize("split", [0, 1, 7])
def test_crlf_event_ends_give_the_record_lf_ones_give(split: int) -> None:
    lf, crlf = _record(_stream(b"\n\n"), split), _record(_stream(b"\r\n\r\n"), split)
    assert lf.error is None and lf.chunk_tokens == [1, 1, 1] and lf.completion_tokens == 3
    assert (crlf.error, crlf.chunk_tokens, crlf.completion_tokens, crlf.finish_reason) == \
        (lf.error, lf.chunk_tokens, lf.completion_tokens, lf.finish_reason)


def test_a_gzip_stream_is_refused_by_name_not_read_as_broken_sse() -> None:
    """The client asks for identity; a server that compresses the stream anyway gets its coding named (before: the
    compressed bytes held no event end, and the record said the stream ended without a finish_reason)."""
    import gzip

    raw = _stream(b"\n\n")
    head, _, chunked = raw.partition(b"\r\n\r\n")
    body = gzip.compress(b"".join(chunked.split(b"\r\n")[1::2]))
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    rec = _record(answer, 0)
    assert rec.error == ("malformed answer: the answer is in Content-Encoding 'gzip'; the request asked for identity "
                         "and a stream is not decoded")
