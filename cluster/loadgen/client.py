"""Streaming HTTP client: one pooled aiohttp session per window, SSE framing, raw chunk timestamps per request.

Only chunks that carry at least one output token are recorded (a role-only or usage-only chunk is counted by
the parser as 0 tokens and dropped), so `chunk_arrival_ns[0]` is the first token's arrival (TTFT) and the
chunk gaps are inter-token-chunk latencies. All events delivered by one socket read share that read's timestamp.
"""

from __future__ import annotations

import asyncio
import time
from typing import Mapping, Optional

import aiohttp

from cluster.engines.base import StreamParser
from cluster.dataset.records import RequestRecord

READ_BUFSIZE = 4 * 1024 * 1024
"""Per-connection read buffer: cumulative SGLang chunks of long outputs are large, and small buffers stall readers."""

ERROR_BODY_CHARS = 300

_SEP = b"\n\n"
_NL = b"\n"
_DATA = b"data: "
_DONE = b"[DONE]"


def new_session(limit: int, headers: Mapping[str, str] = {}) -> aiohttp.ClientSession:
    """The one pooled session of a window: keep-alive connections, `limit` of them at most (0 = unbounded);
    `headers`: the engine's (its API key)."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, force_close=False)
    return aiohttp.ClientSession(
        connector=connector,
        read_bufsize=READ_BUFSIZE,
        timeout=aiohttp.ClientTimeout(total=None),
        headers={"Content-Type": "application/json", "Accept": "text/event-stream", **headers},
    )


def _slow_payload(event: bytes) -> Optional[bytes]:
    """The data of an event that is not one plain `data: ` line (multi-line data, comments, other fields)."""
    datas: list[bytes] = []
    for line in event.split(b"\n"):
        line = line.rstrip(b"\r")
        if line.startswith(b"data:"):
            d = line[5:]
            datas.append(d[1:] if d[:1] == b" " else d)
    return b"\n".join(datas) if datas else None


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    parser: StreamParser,
    t0_ns: int,
    timeout: aiohttp.ClientTimeout,
    rec: RequestRecord,
    headers: Mapping[str, str] = {},
) -> int:
    """POST one streaming request and fill `rec` (send time, chunks, meta, error); return the response end (ns from t0).

    Never raises for request-level failures: HTTP status != 200, timeouts, connection errors and error chunks
    all end up in `rec.error`, so every request sent has exactly one record.
    """
    arrivals = rec.chunk_arrival_ns
    tokens = rec.chunk_tokens
    feed = parser.feed
    clock = time.monotonic_ns
    rec.actual_send_ns = clock() - t0_ns
    try:
        async with session.post(url, data=body, timeout=timeout, headers=headers or None) as resp:
            rec.http_status = resp.status
            if resp.status != 200:
                text = await resp.text(errors="replace")
                rec.error = f"HTTP {resp.status}: {text[:ERROR_BODY_CHARS].strip()}"
                return clock() - t0_ns
            parts: list[bytes] = []
            async for data in resp.content.iter_any():
                now = clock() - t0_ns
                if parts:
                    straddle = parts[-1][-1:] == b"\n" and data[:1] == b"\n"
                    parts.append(data)
                    if _SEP not in data and not straddle:
                        continue  # still inside one long event: join once its end arrives
                    data = b"".join(parts)
                    parts.clear()
                start = 0
                n_data = len(data)
                while True:
                    # JSON never holds a raw newline, so the first "\n" ends a plain one-line event; a one-byte
                    # find is a memchr, several times faster than searching for the two-byte separator
                    nl = data.find(_NL, start)
                    if nl < 0 or nl + 1 >= n_data:
                        break
                    if data[nl + 1] == 10 and data.startswith(_DATA, start):
                        payload = data[start + 6 : nl]
                        start = nl + 2
                    else:
                        end = data.find(_SEP, start)
                        if end < 0:
                            break
                        slow = _slow_payload(data[start:end])
                        start = end + 2
                        if slow is None:
                            continue
                        payload = slow
                    if payload == _DONE:
                        continue
                    n = feed(payload)
                    if n > 0:
                        arrivals.append(now)
                        tokens.append(n)
                if start < len(data):
                    parts.append(data[start:] if start else data)
            end_ns = clock() - t0_ns
    except asyncio.TimeoutError:
        rec.error = f"timeout after {timeout.total:g} s"
        end_ns = clock() - t0_ns
    except aiohttp.ClientPayloadError as e:
        rec.error = f"stream broken: {e}"
        end_ns = clock() - t0_ns
    except (aiohttp.ClientError, OSError) as e:
        rec.error = f"connection error: {type(e).__name__}: {e}"
        end_ns = clock() - t0_ns
    _apply_meta(parser, rec)
    return end_ns


def _apply_meta(parser: StreamParser, rec: RequestRecord) -> None:
    meta = parser.meta()
    rec.prompt_tokens = meta.prompt_tokens
    rec.completion_tokens = meta.completion_tokens
    rec.cached_tokens = meta.cached_tokens
    rec.spec_verify_ct = meta.spec_verify_ct
    rec.finish_reason = meta.finish_reason
    if rec.error is not None:
        return
    if meta.error is not None:
        rec.error = f"error chunk: {meta.error}"
    elif meta.finish_reason is None:
        rec.error = "stream ended without a finish_reason"
