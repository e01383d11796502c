"""HTTP/1.1 response and SSE event framing for the streaming client: bytes in as they are read, a request's record out.

Only chunks that carry at least one output token are recorded (a role-only or usage-only chunk is counted by
the parser as 0 tokens and dropped), so `chunk_arrival_ns[0]` is the first token's arrival (TTFT) and the
chunk gaps are inter-token-chunk latencies. All events delivered by one socket read share that read's timestamp.

A response that is not well-formed HTTP/1.1 (a status line that is not `HTTP/1.x DDD`, a Content-Length or chunk
size that is not plain digits, headers past MAX_HEAD_BYTES, a chunk without its CRLF, an SSE event past
MAX_EVENT_BYTES) raises MalformedAnswerError, the only exception this module raises on a server's bytes; the pool
records it as that request's error. Whatever the split of the same bytes into reads, the record is the same.
"""

from __future__ import annotations

import asyncio
import time
from typing import Mapping, Optional

from cluster.kernel.records import RequestRecord
from cluster.engines.answer_fields import MalformedAnswerError
from cluster.engines.http_call import may_start_status_line
from cluster.engines.base import StreamParser
from cluster.engines.gateway import ROUTED_WORKER_HEADER
from cluster.engines.streams import EVENT_END, event_data

ERROR_BODY_CHARS = 300
MAX_HEAD_BYTES = 65536
"""A response's status line and headers past this are malformed (SGLang's are a few hundred bytes)."""
MAX_LINE_BYTES = 4096
"""A chunk-size or trailer line past this is malformed."""
MAX_EVENT_BYTES = 16 * 1024 * 1024
"""One SSE event past this is malformed (a cumulative /generate chunk of 100k tokens is about 1 MiB)."""

_NL = b"\n"
_CRLF = b"\r\n"
_DATA = b"data: "
_DONE = b"[DONE]"
_WORKER = ROUTED_WORKER_HEADER.lower().encode("latin-1")

# response parse states
_HEAD, _SIZE, _DATA_LEFT, _DATA_CRLF, _TRAILER, _LENGTH, _TO_CLOSE, _DONE_STATE = range(8)


def header_lines(headers: Mapping[str, str]) -> bytes:
    out = []
    for k, v in headers.items():
        if any(c in k or c in v for c in "\r\n\0") or ":" in k:
            raise ValueError(f"HTTP header {k!r}: a name or value holds a line break, NUL or (in the name) ':'")
        out.append(f"{k}: {v}\r\n")
    return "".join(out).encode("latin-1")


class Response:
    """One request's response, parsed as bytes arrive: status, headers, chunked/length body, SSE events."""

    __slots__ = ("rec", "parser", "t0_ns", "fut", "state", "buf", "left", "parts", "parts_bytes", "body_err",
                 "status", "keep_alive", "timer", "got_head", "end_ns", "sse_frame_ready")

    def __init__(self, rec: RequestRecord, parser: StreamParser, t0_ns: int, fut: asyncio.Future[int]) -> None:
        self.rec = rec
        self.parser = parser
        self.t0_ns = t0_ns
        self.fut = fut
        self.state = _HEAD
        self.buf = b""
        self.left = 0
        self.parts: list[bytes] = []
        self.parts_bytes = 0
        self.body_err: list[bytes] = []
        self.status = 0
        self.keep_alive = True
        self.timer: Optional[asyncio.TimerHandle] = None
        self.got_head = False
        self.end_ns = 0
        self.sse_frame_ready = False
        """True while a read may open with whole chunk frames of one event each: a 200 chunked stream between frames,
        nothing buffered (the paced case: one event per server write). See event_frames."""

    # --- HTTP framing -------------------------------------------------------------------------------------------
    def event_frames(self, data: bytes, now: int) -> None:
        """Take one read: while the response is `sse_frame_ready`, its whole chunk frames that each hold one plain
        `data: ...` event go through the loop below, not the general state machine; the rest goes to feed().

        A server that writes one event per write() sends one such frame per read while the client keeps up, and
        several per read when it reads late (a saturated client): both are this loop's."""
        if not self.sse_frame_ready:
            self.feed(data, now)
            return
        pos = 0
        n = len(data)
        feed = self.parser.feed
        rec = self.rec
        while True:
            i = data.find(_CRLF, pos)
            if i <= pos:
                break
            try:
                size = int(data[pos:i], 16)
            except ValueError:  # a chunk extension, or not a size: the state machine says which
                break
            start = i + 2
            end = start + size  # the frame's data ends here, its CRLF after
            if size < 8 or end + 2 > n or not data.startswith(_DATA, start) \
                    or data[end - 2 : end + 2] != b"\n\n\r\n" or data.find(_NL, start + 6) != end - 2:
                break
            payload = data[start + 6 : end - 2]
            if payload != _DONE:
                k = feed(payload)
                if k > 0:
                    rec.chunk_arrival_ns.append(now - self.t0_ns)
                    rec.chunk_tokens.append(k)
            pos = end + 2
            if pos == n:
                return
        self.feed(data[pos:] if pos else data, now)

    def feed(self, data: bytes, now: int) -> None:
        self.sse_frame_ready = False
        try:
            self._feed(data, now)
        finally:
            self.sse_frame_ready = (self.state == _SIZE and self.status == 200 and not self.buf and not self.parts)

    def _feed(self, data: bytes, now: int) -> None:
        if self.buf:
            data = self.buf + data
            self.buf = b""
        pos = 0
        n = len(data)
        while pos < n:
            st = self.state
            if st == _SIZE:
                i = data.find(_CRLF, pos)
                if i < 0 or i - pos > MAX_LINE_BYTES:
                    self.buf = _line_rest(data, pos, i, "a chunk-size line")
                    return
                size = _chunk_size(data[pos:i])
                pos = i + 2
                if size == 0:
                    self.state = _TRAILER
                    continue
                end = pos + size
                if end <= n:
                    self._body(data[pos:end], now)
                    pos = end
                    self.state = _DATA_CRLF
                else:
                    self._body(data[pos:], now)
                    self.left = end - n
                    self.state = _DATA_LEFT
                    return
            elif st == _DATA_CRLF:
                if n - pos < 2:
                    self.buf = data[pos:]
                    return
                if data[pos : pos + 2] != _CRLF:
                    raise MalformedAnswerError("malformed chunked body: no CRLF after a chunk")
                pos += 2
                self.state = _SIZE
            elif st == _DATA_LEFT or st == _LENGTH:  # `left` more bytes of a chunk, or of a Content-Length body
                take = min(self.left, n - pos)
                self._body(data[pos : pos + take] if pos or take < n else data, now)
                pos += take
                self.left -= take
                if self.left == 0:
                    if st == _LENGTH:
                        self._finish(now)
                    else:
                        self.state = _DATA_CRLF
            elif st == _TO_CLOSE:
                self._body(data[pos:] if pos else data, now)
                return
            elif st == _TRAILER:
                i = data.find(_CRLF, pos)
                if i < 0 or i - pos > MAX_LINE_BYTES:
                    self.buf = _line_rest(data, pos, i, "a trailer line")
                    return
                line_empty = i == pos
                pos = i + 2
                if line_empty:
                    self._finish(now)
            elif st == _HEAD:
                i = data.find(b"\r\n\r\n", pos)
                if i < 0 or i - pos > MAX_HEAD_BYTES:
                    if i >= 0 or n - pos > MAX_HEAD_BYTES + 3:
                        raise MalformedAnswerError(f"response headers longer than {MAX_HEAD_BYTES} bytes")
                    self.buf = data[pos:]
                    return
                self._head(data[pos:i])
                pos = i + 4
            else:  # _DONE_STATE: bytes after a complete response
                self.keep_alive = False
                return

    def _head(self, raw: bytes) -> None:
        lines = raw.split(_CRLF)
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3 \
                or not parts[1].isdigit():
            raise MalformedAnswerError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        self.rec.http_status = self.status
        self.keep_alive = parts[0] == b"HTTP/1.1"
        chunked = False
        length = -1
        for line in lines[1:]:
            k, _, raw = line.partition(b":")
            k = k.strip().lower()
            v = raw.strip().lower()
            if k == _WORKER:  # the gateway's worker that served it (a URL: kept as sent, not lowercased)
                self.rec.worker = raw.strip().decode("latin-1") or None
            elif k == b"transfer-encoding":
                chunked = b"chunked" in v
            elif k == b"content-length":
                if not v.isdigit() or len(v) > 18 or (length >= 0 and int(v) != length):
                    raise MalformedAnswerError(f"Content-Length: expected one count of decimal digits, got {v[:40]!r}")
                length = int(v)
            elif k == b"content-encoding" and v not in (b"", b"identity"):
                # asked for identity (pool.py): a compressed stream is refused by name, never read as broken SSE
                raise MalformedAnswerError(f"the answer is in Content-Encoding {v[:40].decode('latin-1')!r}; the "
                                           "request asked for identity and a stream is not decoded")
            elif k == b"connection":
                self.keep_alive = v == b"keep-alive" or (self.keep_alive and v != b"close")
        self.got_head = True
        if chunked:
            self.state = _SIZE
        elif length >= 0:
            self.left = length
            self.state = _LENGTH
            if length == 0:
                self._finish(time.monotonic_ns())
        else:
            self.keep_alive = False
            self.state = _TO_CLOSE

    def _finish(self, now: int) -> None:
        self.state = _DONE_STATE  # an event left unterminated at the end is dropped, as SSE says
        self.end_ns = now - self.t0_ns
        if self.status != 200 and self.rec.error is None:
            text = b"".join(self.body_err).decode("utf-8", "replace")
            self.rec.error = f"HTTP {self.status}: {text[:ERROR_BODY_CHARS].strip()}"
        if not self.fut.done():
            self.fut.set_result(self.end_ns)

    @property
    def complete(self) -> bool:
        return self.state == _DONE_STATE

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        """The connection ended under this response: a close-delimited body ends here, anything else is an error."""
        if self.state == _DONE_STATE:
            return
        if self.state == _TO_CLOSE:
            self._finish(time.monotonic_ns())
        elif not self.got_head and self.buf and not may_start_status_line(self.buf):
            # bytes came but cannot begin an HTTP/1.x answer (HTTP/0.9, an HTTP/2 frame, a TLS record): say so,
            # not that nothing came (once per connection, off the per-event path)
            self.fail(f"malformed answer: expected an HTTP/1.x status line, got {self.buf[:40]!r}")
        elif not self.got_head and self.buf:
            self.fail(f"stream broken: connection closed inside the response head after {len(self.buf)} bytes "
                      f"({exc or 'EOF'})")
        elif not self.got_head:
            self.fail(f"connection error: server closed the connection before answering ({exc or 'EOF'})")
        else:
            self.fail(f"stream broken: connection closed mid-response ({exc or 'EOF'})")

    def fail(self, error: str) -> None:
        if self.rec.error is None:
            self.rec.error = error
        self.state = _DONE_STATE
        self.keep_alive = False
        if not self.fut.done():
            self.fut.set_result(time.monotonic_ns() - self.t0_ns)

    # --- SSE framing --------------------------------------------------------------------------------------------
    def _body(self, data: bytes, now: int) -> None:
        if self.status != 200:
            if sum(map(len, self.body_err)) < 4 * ERROR_BODY_CHARS:
                self.body_err.append(data)
            return
        self._events(data, now)

    def _events(self, data: bytes, now: int) -> None:
        parts = self.parts
        if parts:
            # an event's end may straddle the reads: LF LF, or CRLF CRLF cut anywhere
            straddle = EVENT_END.search(_tail3(parts) + data[:3]) is not None
            parts.append(data)
            self.parts_bytes += len(data)
            if not straddle and not _holds_event_end(data):
                if self.parts_bytes > MAX_EVENT_BYTES:
                    raise MalformedAnswerError(f"an SSE event longer than {MAX_EVENT_BYTES} bytes (no blank line)")
                return  # still inside one long event: join once its end arrives
            data = b"".join(parts)
            parts.clear()
            self.parts_bytes = 0
        feed = self.parser.feed
        rec = self.rec
        start = 0
        n_data = len(data)
        while True:
            # JSON never holds a raw newline, so the first "\n" ends a plain one-line event; a one-byte find is
            # a memchr, several times faster than searching for the two-byte separator
            nl = data.find(_NL, start)
            if nl < 0 or nl + 1 >= n_data:
                break
            if data[nl + 1] == 10 and data.startswith(_DATA, start):
                payload = data[start + 6 : nl]
                start = nl + 2
            else:
                m = EVENT_END.search(data, start)
                if m is None:
                    break
                slow = event_data(data[start:m.start()])
                start = m.end()
                if slow is None:
                    continue
                payload = slow
            if payload == _DONE:
                continue
            k = feed(payload)
            if k > 0:
                rec.chunk_arrival_ns.append(now - self.t0_ns)
                rec.chunk_tokens.append(k)
        if start < n_data:
            parts.append(data[start:] if start else data)
            self.parts_bytes = n_data - start
            if self.parts_bytes > MAX_EVENT_BYTES:
                raise MalformedAnswerError(f"an SSE event longer than {MAX_EVENT_BYTES} bytes (no blank line)")


def _tail3(parts: list[bytes]) -> bytes:
    """The last three bytes of the buffered reads, without joining them (a read can be a whole event long)."""
    tail = parts[-1][-3:]
    i = len(parts) - 2
    while len(tail) < 3 and i >= 0:
        tail = parts[i][len(tail) - 3:] + tail
        i -= 1
    return tail


def _holds_event_end(data: bytes) -> bool:
    """EVENT_END.search(data) is not None, by two memmem scans: every match holds LF LF or LF CR LF, and the regex
    over every whole read was most of what a read cut mid-event cost (benchmarks/answer_checks.py)."""
    return b"\n\n" in data or b"\n\r\n" in data


def _line_rest(data: bytes, pos: int, crlf: int, what: str) -> bytes:
    """The start of a line still waiting for its CRLF (`crlf` < 0), kept for the next read. A line longer than
    MAX_LINE_BYTES is malformed, said the same whether its CRLF came in this read or is still to come (a CR may
    end what came)."""
    if crlf >= 0 or len(data) - pos > MAX_LINE_BYTES + 1:
        raise MalformedAnswerError(f"{what} longer than {MAX_LINE_BYTES} bytes")
    return data[pos:]


def _chunk_size(line: bytes) -> int:
    """A chunk-size line's size. What int(x, 16) reads (also `+`, `_`, `0x`, spaces) is read here as in
    event_frames' fast path, which must not pay for a stricter check: the same bytes frame the same either way."""
    text = line.split(b";", 1)[0]
    try:
        size = int(text, 16) if len(text) <= 16 else -1
    except ValueError:
        size = -1
    if size < 0:
        raise MalformedAnswerError(f"malformed chunked body: expected a chunk size in hex digits, got {line[:40]!r}")
    return size

