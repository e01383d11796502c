"""Keep-alive HTTP/1.1 connections on non-blocking sockets, each read stamped with the kernel's receive time.

Why not aiohttp here: aiohttp hands bytes to a StreamReader and wakes the reading coroutine on a later loop turn,
so a chunk's timestamp carried that scheduling delay (one to several ms at hundreds of streams) and every chunk
paid a task wake-up. Here each connection's socket is read with `recvmsg_into` from an event-loop reader callback
and every read carries the kernel's receive time (SO_TIMESTAMPNS, see Conn); the bytes go straight to the
response's framing (framing.py).
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

from cluster.engines.answer_fields import MalformedAnswerError
from cluster.loadgen.framing import Response, header_lines

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux: each read's ancillary data carries the kernel's receive time of its last segment (CLOCK_REALTIME)."""
_TS = struct.Struct("@qq")
_ANC_BYTES = socket.CMSG_SPACE(_TS.size)
_MAX_KERNEL_LAG_NS = 10_000_000_000
"""A kernel stamp further back than this (or in the future) is taken as a wall-clock step and ignored."""



class Conn:
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
        self.resp: Optional[Response] = None
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
            r.event_frames(data, now)
        except MalformedAnswerError as e:  # a malformed response ends this request, not the window
            r.fail(f"malformed answer: {e}")
            self.abort()
        except Exception as e:  # a parser bug too: this request's error, never a crash of the window
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
        if self.resp is not None:
            self.resp.connection_lost(exc)
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
                       "Accept-Encoding: identity\r\n"
                       ).encode("latin-1") + header_lines(headers)
        self.limit = limit
        self.read_view = memoryview(bytearray(256 * 1024))
        """Every connection's read buffer: a read is copied out before the next one lands (one event loop)."""
        self.read_bufs = [self.read_view]
        self._addr: Optional[tuple[int, tuple[Any, ...]]] = None
        self._idle: list[Conn] = []
        self._all: set[Conn] = set()
        self._waiters: deque[asyncio.Future[Optional[Conn]]] = deque()
        self._heads: dict[tuple[str, int], bytes] = {}
        self._connecting = 0
        self.read_batch_s = read_batch_s if hasattr(select, "epoll") else 0.0
        self._ep: Optional[Any] = select.epoll() if hasattr(select, "epoll") else None
        """Every open connection's socket, for `read_ready`; with read batching also the loop's only watch."""
        self._ep_loop: Optional[asyncio.AbstractEventLoop] = None
        self._by_fd: dict[int, Conn] = {}
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

    def watch(self, c: Conn) -> None:
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

    def unwatch(self, c: Conn, fd: int) -> None:
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
                    + header_lines(headers) + f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1"))
            if not headers and len(self._heads) < 4096:
                self._heads[key] = head
        return head + body

    async def acquire(self, deadline_s: float) -> Conn:
        """An idle connection, a new one while under the limit, or the next one released."""
        while self._idle:
            c = self._idle.pop()
            if not c.closed:
                return c
            self._all.discard(c)
        loop = asyncio.get_running_loop()
        if self.limit and len(self._all) + self._connecting >= self.limit:
            fut: asyncio.Future[Optional[Conn]] = loop.create_future()
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
        c = Conn(self, sock, loop)
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
        c = Conn(self, sock, loop)
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

    def release(self, c: Conn, reuse: bool) -> None:
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

    def _lost(self, c: Conn) -> None:
        if c in self._all and c.resp is None:  # an idle connection the server closed
            self._all.discard(c)
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)  # a slot is free: the waiter connects itself
                return

