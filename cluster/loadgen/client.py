"""Streaming requests over the pool: one POST, its response framed and recorded as it is read, one wake-up at its end.

The pool (pool.py) reads each socket from an event-loop reader callback and stamps each read with the kernel's
receive time; the framing (framing.py) parses status, headers, chunked body and SSE events inline and records each
token-carrying chunk. The request's coroutine wakes once, when the response ends. The control calls around a window
(/metrics, /flush_cache, the gate) stay on aiohttp: nothing is timed there.
"""

from __future__ import annotations

import asyncio
import time
from typing import Mapping

from cluster.kernel.records import RequestRecord
from cluster.engines.answer_fields import MAX_COUNT
from cluster.engines.answer_invariants import broken
from cluster.engines.streams import stream_answer
from cluster.engines.base import StreamParser
from cluster.loadgen.framing import Response
from cluster.loadgen.pool import StreamPool

__all__ = ["StreamPool", "stream_request"]


async def stream_request(
    pool: StreamPool,
    path: str,
    body: bytes,
    parser: StreamParser,
    t0_ns: int,
    timeout_s: float,
    rec: RequestRecord,
    headers: Mapping[str, str] = {},
) -> int:
    """POST one streaming request and fill `rec` (send time, chunks, meta, error); return the response end (ns from t0).

    Never raises for request-level failures: HTTP status != 200, timeouts, connection errors and error chunks
    all end up in `rec.error`, so every request sent has exactly one record. `timeout_s` bounds the whole request
    (waiting for a connection, connecting, the response).
    """
    clock = time.monotonic_ns
    rec.actual_send_ns = clock() - t0_ns
    deadline_s = time.monotonic() + timeout_s
    loop = asyncio.get_running_loop()
    try:
        c = await pool.acquire(deadline_s)
    except asyncio.TimeoutError:
        rec.error = f"timeout after {timeout_s:g} s"
        _apply_meta(parser, rec)
        return clock() - t0_ns
    except OSError as e:
        rec.error = f"connection error: {type(e).__name__}: {e}"
        _apply_meta(parser, rec)
        return clock() - t0_ns
    fut: asyncio.Future[int] = loop.create_future()
    r = Response(rec, parser, t0_ns, fut)
    c.resp = r
    reuse = False
    try:
        if c.closed:
            r.fail("connection error: the pooled connection closed before the request was sent")
        else:
            c.write(pool.request_bytes(path, body, headers))
            r.timer = loop.call_at(loop.time() + max(0.0, deadline_s - time.monotonic()),
                                   r.fail, f"timeout after {timeout_s:g} s")
            pool.catch_up()
        end_ns = await fut
        reuse = r.complete and r.keep_alive  # fail() clears keep_alive: never reuse after one
    finally:
        if r.timer is not None:
            r.timer.cancel()
        pool.release(c, reuse)
    _apply_meta(parser, rec)
    return end_ns


def _apply_meta(parser: StreamParser, rec: RequestRecord) -> None:
    meta = parser.meta()
    if meta.completion_tokens is not None and meta.completion_tokens > MAX_COUNT:
        # a count the parsers' fast paths read past what a request can hold (checked here, once per request, not
        # per event): the chunks' shares are cut where their sum reaches MAX_COUNT, so every int32 column of the
        # window's tables can take them, and the request is an error
        meta.malformed = meta.malformed or (f"completion_tokens {meta.completion_tokens} is past {MAX_COUNT}, more "
                                            "than a request can hold")
        meta.completion_tokens = None
        total = 0
        for i, k in enumerate(rec.chunk_tokens):
            rec.chunk_tokens[i] = k = min(k, MAX_COUNT - total)
            total += k
    rec.prompt_tokens = meta.prompt_tokens
    rec.completion_tokens = meta.completion_tokens
    rec.cached_tokens = meta.cached_tokens
    rec.spec_verify_ct = meta.spec_verify_ct
    rec.spec_correct_drafts_histogram = meta.spec_correct_drafts_histogram
    rec.finish_reason = meta.finish_reason
    if rec.error is not None:
        return
    if meta.error is not None:
        rec.error = f"error chunk: {meta.error}"
    elif meta.malformed is not None:
        rec.error = f"malformed answer: {meta.malformed}"
    elif meta.finish_reason is None:
        rec.error = "stream ended without a finish_reason"
    else:
        # a well-typed answer that cannot be (engines/answer_invariants.py): the request's error names the
        # invariant, and the run that holds it is invalid (analysis/run_row.py)
        bad = broken(stream_answer(meta, rec.chunk_tokens))
        if bad:
            rec.error = str(bad[0])
