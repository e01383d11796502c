"""Streaming HTTP/1.1 client on non-blocking sockets: keep-alive pool, SSE framing, each read stamped by the kernel.

Why not aiohttp here: aiohttp hands bytes to a StreamReader and wakes the reading coroutine on a later loop turn,
so a chunk's timestamp carried that scheduling delay (one to several ms at hundreds of streams) and every chunk
paid a task wake-up. Here each connection's socket is read with `recvmsg_into` from an event-loop reader callback
and every read carries the kernel's receive time (SO_TIMESTAMPNS, see _Conn); events are framed, parsed and
recorded inline, and the request's coroutine wakes once, at the end.

Only chunks that carry at least one output token are recorded (a role-only or usage-only chunk is counted by
the parser as 0 tokens and dropped), so `chunk_arrival_ns[0]` is the first token's arrival (TTFT) and the
chunk gaps are inter-token-chunk latencies. All events delivered by one socket read share that read's timestamp.
The control calls around a window (/metrics, /flush_cache, the gate) stay on aiohttp: nothing is timed there.
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import time
from collections import deque
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit

from cluster.dataset.records import RequestRecord
from cluster.engines.base import StreamParser

ERROR_BODY_CHARS = 300

_SEP = b"\n\n"
_NL = b"\n"
_CRLF = b"\r\n"
_DATA = b"data: "
_DONE = b"[DONE]"

# response parse states
_HEAD, _SIZE, _DATA_LEFT, _DATA_CRLF, _TRAILER, _LENGTH, _TO_CLOSE, _DONE_STATE = range(8)


def _slow_payload(event: bytes) -> Optional[bytes]:
    """The data of an event that is not one plain `data: ` line (multi-line data, comments, other fields)."""
    datas: list[bytes] = []
    for line in event.split(b"\n"):
        line = line.rstrip(b"\r")
        if line.startswith(b"data:"):
            d = line[5:]
            datas.append(d[1:] if d[:1] == b" " else d)
    return b"\n".join(datas) if datas else None


def _header_lines(headers: Mapping[str, str]) -> bytes:
    out = []
    for k, v in headers.items():
        if any(c in k or c in v for c in "\r\n\0") or ":" in k:
            raise ValueError(f"HTTP header {k!r}: a name or value holds a line break, NUL or (in the name) ':'")
        out.append(f"{k}: {v}\r\n")
    return "".join(out).encode("latin-1")


class _Response:
    """One request's response, parsed as bytes arrive: status, headers, chunked/length body, SSE events."""

    __slots__ = ("rec", "parser", "t0_ns", "fut", "state", "buf", "left", "parts", "body_err", "status",
                 "keep_alive", "timer", "got_head", "end_ns", "sse_frame_ready")

    def __init__(self, rec: RequestRecord, parser: StreamParser, t0_ns: int, fut: asyncio.Future[int]) -> None:
        self.rec = rec
        self.parser = parser
        self.t0_ns = t0_ns
        self.fut = fut
        self.state = _HEAD
        self.buf = b""
        self.left = 0
        self.parts: list[bytes] = []
        self.body_err: list[bytes] = []
        self.status = 0
        self.keep_alive = True
        self.timer: Optional[asyncio.TimerHandle] = None
        self.got_head = False
        self.end_ns = 0
        self.sse_frame_ready = False
        """True while a read may be one whole chunk frame of one event: a 200 chunked stream between frames, nothing
        buffered (the paced case: one event per server write)."""

    # --- HTTP framing -------------------------------------------------------------------------------------------
    def one_event_frame(self, data: bytes, now: int) -> bool:
        """Take `data` when it is exactly one chunk frame holding one plain `data: ...` event; False otherwise
        (then feed() takes it). The common read of a paced stream, handled without the general state machine."""
        i = data.find(_CRLF)
        end = len(data) - 2
        if i <= 0 or not data.startswith(_DATA, i + 2) or data[end - 2 :] != b"\n\n\r\n" \
                or data.find(_NL, i + 8) != end - 2:
            return False
        try:
            if int(data[:i], 16) != end - i - 2:
                return False
        except ValueError:
            return False
        payload = data[i + 8 : end - 2]
        if payload != _DONE:
            k = self.parser.feed(payload)
            if k > 0:
                self.rec.chunk_arrival_ns.append(now - self.t0_ns)
                self.rec.chunk_tokens.append(k)
        return True

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
                if i < 0:
                    self.buf = data[pos:]
                    return
                size = int(data[pos:i].split(b";", 1)[0], 16)
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
                    raise ValueError("malformed chunked body: no CRLF after a chunk")
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
                if i < 0:
                    self.buf = data[pos:]
                    return
                line_empty = i == pos
                pos = i + 2
                if line_empty:
                    self._finish(now)
            elif st == _HEAD:
                i = data.find(b"\r\n\r\n", pos)
                if i < 0:
                    self.buf = data[pos:]
                    if len(self.buf) > 65536:
                        raise ValueError("response headers longer than 64 KiB")
                    return
                self._head(data[pos:i])
                pos = i + 4
            else:  # _DONE_STATE: bytes after a complete response
                self.keep_alive = False
                return

    def _head(self, raw: bytes) -> None:
        lines = raw.split(_CRLF)
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        self.rec.http_status = self.status
        self.keep_alive = parts[0] == b"HTTP/1.1"
        chunked = False
        length = -1
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            v = v.strip().lower()
            if k == b"transfer-encoding":
                chunked = b"chunked" in v
            elif k == b"content-length":
                length = int(v)
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
            straddle = parts[-1][-1:] == b"\n" and data[:1] == b"\n"
            parts.append(data)
            if _SEP not in data and not straddle:
                return  # still inside one long event: join once its end arrives
            data = b"".join(parts)
            parts.clear()
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
            k = feed(payload)
            if k > 0:
                rec.chunk_arrival_ns.append(now - self.t0_ns)
                rec.chunk_tokens.append(k)
        if start < n_data:
            parts.append(data[start:] if start else data)


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux: each read's ancillary data carries the kernel's receive time of its last segment (CLOCK_REALTIME)."""
_TS = struct.Struct("@qq")
_ANC_BYTES = socket.CMSG_SPACE(_TS.size)
_MAX_KERNEL_LAG_NS = 10_000_000_000
"""A kernel stamp further back than this (or in the future) is taken as a wall-clock step and ignored."""


class _Conn:
    """One keep-alive connection on its own non-blocking socket, read with `recvmsg_into` from the event loop's
    reader callback.

    Arrival times are the kernel's receive timestamps (SO_TIMESTAMPNS), not the moment Python got round to the
    socket: when the loop is busy with other streams, or the process was not scheduled, a read's bytes still get
    the time they reached the socket. The stamp is CLOCK_REALTIME; it is moved onto the monotonic clock by the
    lag `time_ns() - stamp` measured at the read itself, so no offset can drift or step mid-window. Where the
    kernel gives no stamp, the read's own `monotonic_ns()` is used. Reads go into the pool's one buffer and only
    the bytes read are copied out."""

    __slots__ = ("pool", "sock", "loop", "resp", "closed", "_out", "kernel_stamps", "read_ahead")

    def __init__(self, pool: StreamPool, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.sock = sock
        self.loop = loop
        self.resp: Optional[_Response] = None
        self.closed = False
        self._out: list[bytes] = []
        self.kernel_stamps = 0
        self.read_ahead = False
        """Read by the pool's catch_up since the loop last called `_readable`: its callback may already be queued."""
        pool.watch(self)

    def _readable(self) -> None:
        if self.read_ahead:
            # the loop's callback, queued before catch_up read the socket: skipping it saves a read that would find
            # nothing (level-triggered, what came since is reported again at the loop's next poll)
            self.read_ahead = False
            return
        try:
            n, anc, _flags, _addr = self.sock.recvmsg_into(self.pool.read_bufs, _ANC_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        now = time.monotonic_ns()
        self.pool.busy_since_ns = -1
        if anc:
            lag = time.time_ns() - _kernel_ns(anc[0][2])
            if 0 <= lag < _MAX_KERNEL_LAG_NS:
                now -= lag
                self.kernel_stamps += 1
        if n == 0:
            self._lost(None)
            return
        data = self.pool.read_view[:n].tobytes()
        r = self.resp
        if r is None:  # bytes while idle: the connection is out of step, never reuse it
            self._lost(None)
            return
        try:
            if not (r.sse_frame_ready and r.one_event_frame(data, now)):
                r.feed(data, now)
        except Exception as e:  # a malformed response (or a parser bug) ends this request, not the window
            r.fail(f"stream broken: {type(e).__name__}: {e}")
            self.abort()

    def write(self, data: bytes) -> None:
        if self._out:
            self._out.append(data)
            return
        try:
            k = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            k = 0
        except OSError as e:
            self._lost(e)
            return
        if k < len(data):
            self._out.append(data[k:])
            self.loop.add_writer(self.sock.fileno(), self._writable)

    def _writable(self) -> None:
        data = b"".join(self._out)
        try:
            k = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        self._out = [data[k:]] if k < len(data) else []
        if not self._out:
            self.loop.remove_writer(self.sock.fileno())

    def _lost(self, exc: Optional[BaseException]) -> None:
        if self.closed:
            return
        self.abort()
        r = self.resp
        if r is not None and r.state != _DONE_STATE:
            if r.state == _TO_CLOSE:
                r._finish(time.monotonic_ns())
            elif not r.got_head:
                r.fail(f"connection error: server closed the connection before answering ({exc or 'EOF'})")
            else:
                r.fail(f"stream broken: connection closed mid-response ({exc or 'EOF'})")
        self.pool._lost(self)

    def abort(self) -> None:
        if self.closed:
            return
        self.closed = True
        fd = self.sock.fileno()
        if fd >= 0:
            self.pool.unwatch(self, fd)
            if self._out:
                self.loop.remove_writer(fd)
        self.sock.close()


def _kernel_ns(raw: bytes) -> int:
    sec, nsec = _TS.unpack_from(raw)
    return int(sec * 1_000_000_000 + nsec)


class StreamPool:
    """Keep-alive HTTP/1.1 connections to one server, at most `limit` open (0 = unbounded); `headers` go on every
    request (the engine's API key).

    `read_batch_s` > 0 (Linux): the connections' sockets sit in one epoll set of the pool's; its first readable
    socket starts a timer of `read_batch_s`, and then every socket ready by then is read in one loop turn. At
    hundreds of paced streams this takes one event-loop wake-up per batch instead of one per event, and arrival
    times stay the kernel's receive stamps. What it costs: two events of one stream that land inside one batch
    are read together and share the later stamp (so keep it well under the servers' inter-token latency), and a
    response's end is seen up to `read_batch_s` late, which delays a closed loop's next send by as much.

    A send that comes after `BUSY_NS` of this thread's CPU spent on sends with no read between them also reads
    whatever the pool's sockets hold (`catch_up`): when many responses end at once (a closed loop's wave), the
    loop runs one task step per ending request, each building and sending the next (50-140 us), before it polls
    the sockets again; at 256 streams that run lasted 10-20 ms, so a stream's next event could land before its
    last one was read, and one read then gave both the later kernel stamp. CPU time, not wall time: a client
    descheduled (a CPU quota, a busy core) goes unread too, but reading then gains nothing. A socket read there
    skips the loop's own callback for it once (already queued, it would find the socket empty: a system call and
    an exception for nothing). Linux: the sockets sit in one epoll set of the pool's as well as the loop's."""

    BUSY_NS = 4_000_000
    """This thread's CPU spent on sends with no read between them after which a send reads the ready sockets.

    A saturated loop's turns open with runs of sends too, and reading there splits reads that would each carry many
    events into more, smaller ones: at 1 ms a saturated client lost a third of its rate, at 2 ms 15 %, at 4 ms
    nothing measurable; events of one stream 5 ms or more apart are still never merged by a run of sends."""

    def __init__(self, base_url: str, limit: int, headers: Mapping[str, str] = {},
                 read_batch_s: float = 0.0) -> None:
        u = urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            # the servers sglbench measures are its own, on http://host:port; TLS would put a decryption step
            # between the kernel's receive stamp and the event it times
            raise ValueError(f"base URL: expected http://host:port (plain HTTP/1.1), got {base_url!r}")
        self.host = u.hostname
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        host = u.netloc.rsplit("@", 1)[-1]
        self._fixed = (f"Host: {host}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
                       ).encode("latin-1") + _header_lines(headers)
        self.limit = limit
        self.read_view = memoryview(bytearray(256 * 1024))
        """Every connection's read buffer: a read is copied out before the next one lands (one event loop)."""
        self.read_bufs = [self.read_view]
        self._addr: Optional[tuple[int, tuple[Any, ...]]] = None
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()
        self._waiters: deque[asyncio.Future[Optional[_Conn]]] = deque()
        self._heads: dict[tuple[str, int], bytes] = {}
        self._connecting = 0
        self.read_batch_s = read_batch_s if hasattr(select, "epoll") else 0.0
        self._ep: Optional[Any] = select.epoll() if hasattr(select, "epoll") else None
        """Every open connection's socket, for `read_ready`; with read batching also the loop's only watch."""
        self._ep_loop: Optional[asyncio.AbstractEventLoop] = None
        self._by_fd: dict[int, _Conn] = {}
        self.busy_since_ns = -1
        """This thread's CPU time at the first send since a socket of the pool was last read (-1: none since)."""

    async def __aenter__(self) -> StreamPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for c in list(self._all):
            c.abort()
        self._all.clear()
        self._idle.clear()
        if self._ep is not None:
            if self._ep_loop is not None:
                self._ep_loop.remove_reader(self._ep.fileno())
            self._ep.close()
            self._ep = None

    def watch(self, c: _Conn) -> None:
        fd = c.sock.fileno()
        if self._ep is not None:
            self._ep.register(fd, select.EPOLLIN)
            self._by_fd[fd] = c
        if not self.read_batch_s:
            c.loop.add_reader(fd, c._readable)
        elif self._ep_loop is None:
            assert self._ep is not None  # read batching is only on where epoll is
            self._ep_loop = c.loop
            c.loop.add_reader(self._ep.fileno(), self._first_ready)

    def unwatch(self, c: _Conn, fd: int) -> None:
        if not self.read_batch_s:
            c.loop.remove_reader(fd)
        if self._by_fd.pop(fd, None) is not None and self._ep is not None:
            try:
                self._ep.unregister(fd)
            except OSError:
                pass

    def catch_up(self) -> None:
        """After a send: read the ready sockets if the sends since the last read took BUSY_NS (see the class doc)."""
        cpu_ns = time.thread_time_ns()
        if self.busy_since_ns < 0:
            self.busy_since_ns = cpu_ns
        elif cpu_ns - self.busy_since_ns > self.BUSY_NS:
            self.busy_since_ns = cpu_ns
            self.read_ready(ahead=not self.read_batch_s)

    def read_ready(self, ahead: bool = False) -> None:
        """Read every socket that holds bytes now; `ahead`: outside the loop's own reader callbacks (catch_up)."""
        if self._ep is None:
            return
        for fd, _ in self._ep.poll(0):
            c = self._by_fd.get(fd)
            if c is not None:
                c.read_ahead = False
                c._readable()
                c.read_ahead = ahead

    def _first_ready(self) -> None:
        assert self._ep is not None and self._ep_loop is not None
        self._ep_loop.remove_reader(self._ep.fileno())
        self._ep_loop.call_later(self.read_batch_s, self._read_ready)

    def _read_ready(self) -> None:
        ep = self._ep
        if ep is None or self._ep_loop is None:  # closed meanwhile
            return
        self.read_ready()
        self._ep_loop.add_reader(ep.fileno(), self._first_ready)

    def request_bytes(self, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        key = (path, len(body))
        head = self._heads.get(key) if not headers else None
        if head is None:
            head = (f"POST {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._fixed
                    + _header_lines(headers) + f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1"))
            if not headers and len(self._heads) < 4096:
                self._heads[key] = head
        return head + body

    async def acquire(self, deadline_s: float) -> _Conn:
        """An idle connection, a new one while under the limit, or the next one released."""
        while self._idle:
            c = self._idle.pop()
            if not c.closed:
                return c
            self._all.discard(c)
        loop = asyncio.get_running_loop()
        if self.limit and len(self._all) + self._connecting >= self.limit:
            fut: asyncio.Future[Optional[_Conn]] = loop.create_future()
            self._waiters.append(fut)
            got = await asyncio.wait_for(fut, max(0.0, deadline_s - time.monotonic()))
            if got is not None:
                return got
        self._connecting += 1  # holds the slot while connecting: no await between the check and here
        try:
            sock = await asyncio.wait_for(self._connect(loop), max(0.0, deadline_s - time.monotonic()))
        except BaseException:
            self._connecting -= 1
            self._wake()  # the slot it held is free again
            raise
        self._connecting -= 1
        c = _Conn(self, sock, loop)
        self._all.add(c)
        return c

    async def preopen(self, n: int, timeout_s: float) -> int:
        """Open up to `n` connections at once (never past the limit) and keep them idle; return how many opened.

        A closed loop's first wave would otherwise pay each connection's set-up inside its TTFT, one after another
        on this loop (about 11 ms for the last of 64 here), while every later request reuses a kept-alive one.
        A connection that fails or does not open within `timeout_s` is dropped silently: the request that would
        have used it connects itself, and records that error, as before."""
        if self.limit:
            n = min(n, self.limit - len(self._all) - self._connecting)
        if n <= 0:
            return 0
        loop = asyncio.get_running_loop()
        self._connecting += n  # each slot is held from here until its own connect ends
        opened = await asyncio.gather(*(self._open_idle(loop, timeout_s) for _ in range(n)))
        return sum(opened)

    async def _open_idle(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> bool:
        try:
            sock = await asyncio.wait_for(self._connect(loop), timeout_s)
        except (OSError, asyncio.TimeoutError):
            self._connecting -= 1
            self._wake()
            return False
        except BaseException:
            self._connecting -= 1
            raise
        self._connecting -= 1
        c = _Conn(self, sock, loop)
        self._all.add(c)
        self.release(c, reuse=True)  # to a request already waiting for a slot, else idle
        return True

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        if self._addr is None:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            if not infos:
                raise OSError(f"cannot resolve {self.host}:{self.port}")
            self._addr = (infos[0][0], infos[0][4])
        family, addr = self._addr
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                pass  # no kernel stamps here: reads keep their own monotonic_ns()
            await loop.sock_connect(sock, addr)
        except BaseException:
            sock.close()
            raise
        return sock

    def release(self, c: _Conn, reuse: bool) -> None:
        c.resp = None
        if not reuse or c.closed:
            c.abort()
            self._all.discard(c)
            self._wake()
            return
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(c)
                return
        self._idle.append(c)

    def _lost(self, c: _Conn) -> None:
        if c in self._all and c.resp is None:  # an idle connection the server closed
            self._all.discard(c)
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)  # a slot is free: the waiter connects itself
                return


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
    r = _Response(rec, parser, t0_ns, fut)
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
        reuse = r.state == _DONE_STATE and r.keep_alive  # fail() clears keep_alive: never reuse after one
    finally:
        if r.timer is not None:
            r.timer.cancel()
        pool.release(c, reuse)
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
