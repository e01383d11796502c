"""The streaming HTTP/1.1 client against a raw-bytes loopback server: framings, keep-alive, failures, read stamps."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from typing import Any, Awaitable, Callable, Optional

import pytest

from cluster.kernel.records import RequestRecord
from cluster.engines.streams import SGLangNativeParser
from cluster.loadgen.client import StreamPool, stream_request
from cluster.loadgen.pool import Conn

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _event(k: int, n: int) -> bytes:
    meta = {"id": "x", "finish_reason": {"type": "length", "length": n} if k == n else None,
            "prompt_tokens": 3, "completion_tokens": k, "cached_tokens": 0}
    return b"data: " + json.dumps({"text": "t" * k, "output_ids": list(range(k)), "meta_info": meta}).encode() + b"\n\n"


def _sse(n: int) -> bytes:
    return b"".join(_event(k, n) for k in range(1, n + 1)) + b"data: [DONE]\n\n"


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


async def _read_request(reader: asyncio.StreamReader) -> Optional[bytes]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return head + await reader.readexactly(length)


async def _serve(handler: Handler, body: Callable[[str], Awaitable[None]]) -> None:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await body(f"http://127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()


async def _one(pool: StreamPool, timeout_s: float = 5.0, headers: dict[str, str] = {},
               t0_ns: Optional[int] = None) -> RequestRecord:
    rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=3, max_tokens=4)
    await stream_request(pool, "/generate", b'{"x":1}', SGLangNativeParser(),
                         time.monotonic_ns() if t0_ns is None else t0_ns, timeout_s, rec, headers)
    return rec


def _with_thread_server(srv: socket.socket, serve: Callable[[], None],
                        body: Callable[[], Awaitable[RequestRecord]]) -> RequestRecord:
    """`body` on a new event loop while `serve` answers on `srv` from a thread (so the loop's stalls are not the
    server's); `srv` is closed after."""
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        return asyncio.run(body())
    finally:
        srv.close()
        th.join(5)


def _spin(seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
    """Keep this thread busy (it spends CPU, unlike time.sleep) for `seconds` on `clock`."""
    end = clock() + seconds
    while clock() < end:
        pass


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


async def _three_events_50_ms_apart(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    """Answer one request with a chunked stream of three events, one write each, 50 ms apart."""
    await _read_request(r)
    w.write(CHUNKED_HEAD)
    for k in range(1, 4):
        await asyncio.sleep(0.05)
        w.write(_chunked([_event(k, 3)])[:-5] if k < 3 else _chunked([_event(k, 3), b"data: [DONE]\n\n"]))
        await w.drain()


def test_keep_alive_reuses_one_connection_for_sequential_requests_and_sends_the_headers() -> None:
    connections: list[int] = []
    seen: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(1)
        while (req := await _read_request(r)) is not None:
            seen.append(req)
            w.write(CHUNKED_HEAD + _chunked([_event(k, 4) for k in range(1, 5)] + [b"data: [DONE]\n\n"]))
            await w.drain()
        w.close()

    async def body(url: str) -> None:
        async with StreamPool(url, 2, {"Authorization": "Bearer s3cret"}) as pool:
            recs = [await _one(pool, headers={"X-Category": "code"}) for _ in range(3)]
        for rec in recs:
            assert rec.error is None and rec.chunk_tokens == [1, 1, 1, 1] and rec.completion_tokens == 4
            assert rec.http_status == 200 and rec.finish_reason == "length"

    asyncio.run(_serve(handler, body))
    assert len(connections) == 1  # three requests, one kept-alive connection
    assert seen[0].startswith(b"POST /generate HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer s3cret\r\n" in seen[0] and b"\r\nX-Category: code\r\n" in seen[0]
    assert seen[0].endswith(b"\r\n\r\n" + b'{"x":1}')


@pytest.mark.parametrize("framing", ["chunked-bytewise", "length", "close", "http10"])
def test_every_framing_gives_the_same_record(framing: str) -> None:
    sse = _sse(5)

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        if framing == "chunked-bytewise":  # every byte of the chunk framing and the events split across writes
            raw = CHUNKED_HEAD + _chunked([sse[i : i + 11] for i in range(0, len(sse), 11)])
        elif framing == "length":
            raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(sse) + sse
        elif framing == "close":
            raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + sse
        else:
            raw = b"HTTP/1.0 200 OK\r\n\r\n" + sse
        step = 3 if framing == "chunked-bytewise" else 64
        for i in range(0, len(raw), step):
            w.write(raw[i : i + step])
            await w.drain()
        w.close()

    async def body(url: str) -> None:
        async with StreamPool(url, 1) as pool:
            rec = await _one(pool)
        assert rec.error is None, rec.error
        assert sum(rec.chunk_tokens) == 5 and rec.completion_tokens == 5 and len(rec.chunk_arrival_ns) == 5
        assert rec.chunk_arrival_ns == sorted(rec.chunk_arrival_ns)

    asyncio.run(_serve(handler, body))


def test_each_read_is_stamped_when_it_arrives_not_when_the_response_ends() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _three_events_50_ms_apart(r, w)
        w.close()

    async def body(url: str) -> None:
        async with StreamPool(url, 1) as pool:
            rec = await _one(pool)
        assert rec.error is None, rec.error
        gaps_ms = [(b - a) / 1e6 for a, b in zip(rec.chunk_arrival_ns, rec.chunk_arrival_ns[1:])]
        assert rec.chunk_arrival_ns[0] / 1e6 >= 45 and all(40 <= g <= 150 for g in gaps_ms), gaps_ms

    asyncio.run(_serve(handler, body))


def test_failures_each_end_in_one_error_and_the_connection_is_not_reused() -> None:
    modes = iter(["503", "midstream", "garbage", "ok"])
    connections: list[int] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(1)
        while (await _read_request(r)) is not None:
            mode = next(modes)
            if mode == "503":
                w.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10\r\n\r\noverloaded")
            elif mode == "midstream":
                w.write(CHUNKED_HEAD + _chunked([_event(1, 4)])[:-5])
                await w.drain()
                w.close()
                return
            elif mode == "garbage":
                w.write(CHUNKED_HEAD + b"zz\r\nnot hex\r\n")
            else:
                w.write(CHUNKED_HEAD + _chunked([_sse(2)]))
            await w.drain()

    async def body(url: str) -> None:
        async with StreamPool(url, 1) as pool:
            recs = [await _one(pool) for _ in range(4)]
        assert recs[0].error == "HTTP 503: overloaded" and recs[0].http_status == 503
        assert recs[1].error is not None and recs[1].error.startswith("stream broken: connection closed mid-response")
        assert recs[1].chunk_tokens == [1]
        assert recs[2].error == ("malformed answer: malformed chunked body: expected a chunk size in hex digits, "
                                 "got b'zz'")
        assert recs[3].error is None and sum(recs[3].chunk_tokens) == 2

    asyncio.run(_serve(handler, body))
    # the 503 (complete, keep-alive) reused the first connection; the broken stream and the garbage did not
    assert len(connections) == 3


def test_timeout_covers_a_full_pool_and_a_silent_server() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        await asyncio.sleep(2)  # never answers in time
        w.close()

    async def body(url: str) -> None:
        async with StreamPool(url, 1) as pool:
            t0 = time.monotonic()
            recs = await asyncio.gather(_one(pool, 0.3), _one(pool, 0.3))
            took_s = time.monotonic() - t0
        # the second request waited for the one connection; both give up at their own 0.3 s
        assert [r.error for r in recs] == ["timeout after 0.3 s"] * 2 and took_s < 1.0

    asyncio.run(_serve(handler, body))


def test_header_injection_and_non_http_urls_are_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        StreamPool("http://127.0.0.1:1", 1, {"Authorization": "Bearer x\r\nX-Evil: 1"})
    with pytest.raises(ValueError, match="expected http://host:port"):
        StreamPool("ftp://127.0.0.1:1", 1)


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive timestamps (SO_TIMESTAMPNS) are Linux's")
def test_a_read_delayed_by_a_busy_loop_keeps_the_time_the_bytes_reached_the_socket() -> None:
    """The first event reaches the socket 50 ms after the request, while the client's event loop is blocked from
    20 to 220 ms: its arrival must be the kernel's receive time (~50 ms), not the moment Python read it (~220 ms)."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            buf = b""
            while b'{"x":1}' not in buf:
                buf += conn.recv(65536)
            t0 = time.monotonic()
            conn.sendall(CHUNKED_HEAD)
            time.sleep(max(0.0, t0 + 0.05 - time.monotonic()))
            conn.sendall(_chunked([_event(1, 2)])[:-5])
            time.sleep(max(0.0, t0 + 0.3 - time.monotonic()))
            conn.sendall(_chunked([_event(2, 2), b"data: [DONE]\n\n"]))
            conn.recv(1)  # until the client closes

    async def body() -> RequestRecord:
        loop = asyncio.get_running_loop()
        loop.call_later(0.02, time.sleep, 0.2)  # the loop is busy: no read can run until 220 ms
        async with StreamPool(f"http://127.0.0.1:{port}", 1) as pool:
            return await _one(pool)

    rec = _with_thread_server(srv, serve, body)
    assert rec.error is None, rec.error
    first_ms = (rec.chunk_arrival_ns[0] - rec.actual_send_ns) / 1e6
    assert 45 <= first_ms <= 150, first_ms  # a user-space stamp would be >= 220 ms
    assert (rec.chunk_arrival_ns[1] - rec.actual_send_ns) / 1e6 >= 280


@pytest.mark.skipif(sys.platform != "linux", reason="catch_up reads an epoll set; the stamps are SO_TIMESTAMPNS")
def test_a_send_after_a_busy_stretch_reads_what_landed_meanwhile_so_two_events_do_not_merge() -> None:
    """Stream A's events land 50 and 100 ms after its request. The loop is busy from 30 to ~75 ms (other streams'
    ends and their next sends), then sends request B and stays busy until ~150 ms (more of that run). One read
    at 150 ms would see both events and stamp both 100 ms (a read carries its last segment's time); the read made
    right after B's send takes event 1 alone, so it keeps its own 50 ms."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    order = iter(range(2))

    def answer(conn: socket.socket) -> None:
        with conn:
            buf = b""
            while b'{"x":1}' not in buf:
                buf += conn.recv(65536)
            if next(order) == 0:  # stream A
                t0 = time.monotonic()
                conn.sendall(CHUNKED_HEAD)
                for k, due_s in ((1, 0.05), (2, 0.1), (3, 0.25)):
                    time.sleep(max(0.0, t0 + due_s - time.monotonic()))
                    conn.sendall(_chunked([_event(k, 3)])[:-5] if k < 3
                                 else _chunked([_event(3, 3), b"data: [DONE]\n\n"]))
            else:
                conn.sendall(CHUNKED_HEAD + _chunked([_sse(1)]))
            conn.recv(1)  # until the client closes

    def serve() -> None:
        for _ in range(2):
            threading.Thread(target=answer, args=(srv.accept()[0],), daemon=True).start()

    async def body() -> RequestRecord:
        loop = asyncio.get_running_loop()
        async with StreamPool(f"http://127.0.0.1:{port}", 2) as pool:
            assert await pool.preopen(2, 2.0) == 2  # B's send then needs no await
            a = asyncio.ensure_future(_one(pool))
            await asyncio.sleep(0.03)
            pool.catch_up()  # a send of the busy stretch (another stream's next request)...
            _spin(0.045)  # ...and the rest of its work
            b = asyncio.ensure_future(_one(pool))  # its send runs first in the next turn, before the loop polls...
            loop.call_soon(_spin, 0.075)  # ...then this, before any reader callback of that turn
            rec_a, rec_b = await asyncio.gather(a, b)
        assert rec_b.error is None, rec_b.error
        return rec_a

    rec = _with_thread_server(srv, serve, body)
    assert rec.error is None, rec.error
    first_ms, second_ms = ((t - rec.actual_send_ns) / 1e6 for t in rec.chunk_arrival_ns[:2])
    assert 45 <= first_ms <= 90, (first_ms, second_ms)  # merged with event 2 it would be >= 100
    assert second_ms >= 95


def test_only_sends_that_kept_the_loop_busy_past_busy_ns_with_no_read_read_the_sockets() -> None:
    """Reading after every send (or after wall time unread: a descheduled client) split a saturated client's reads
    and cost it a third to a half of its rate. Only CPU spent on sends with no read between them counts, past
    BUSY_NS, and a read anywhere restarts it."""
    polls: list[int] = []
    pool = StreamPool("http://127.0.0.1:1", 1)
    pool.read_ready = lambda ahead=False: polls.append(1)  # type: ignore[method-assign]
    pool.catch_up()  # the first send since a read starts the count
    time.sleep(0.01)  # descheduled, not busy
    pool.catch_up()
    assert polls == []
    _spin(StreamPool.BUSY_NS / 1e9 + 0.002, time.thread_time)
    pool.catch_up()
    pool.catch_up()  # counted from the read it just made
    assert polls == [1]
    pool.busy_since_ns = -1  # what a socket read does
    _spin(StreamPool.BUSY_NS / 1e9 + 0.002, time.thread_time)
    pool.catch_up()
    assert polls == [1]
    pool.close()


def test_a_socket_read_ahead_skips_the_loop_s_queued_callback_once() -> None:
    """catch_up reads a socket ahead of the loop's reader callback, which may already be queued: that callback would
    find the socket empty (a system call and an exception for nothing)."""
    reads: list[int] = []

    class Counting(socket.socket):
        def recvmsg_into(self, *a: Any, **kw: Any) -> Any:
            reads.append(1)
            return super().recvmsg_into(*a, **kw)

    left, right = socket.socketpair()
    sock = Counting(left.family, left.type, fileno=left.detach())
    sock.setblocking(False)

    async def body() -> None:
        pool = StreamPool("http://127.0.0.1:1", 1)
        c = Conn(pool, sock, asyncio.get_running_loop())
        c.read_ahead = True
        c._readable()  # the queued callback: skipped, no read
        assert reads == [] and not c.read_ahead
        c._readable()  # the next one reads (nothing there yet)
        assert reads == [1] and not c.closed
        pool.close()

    try:
        asyncio.run(body())
    finally:
        right.close()


@pytest.mark.skipif(sys.platform != "linux", reason="read batching uses epoll; its stamps are SO_TIMESTAMPNS")
def test_batched_reads_keep_each_event_s_kernel_stamp_and_read_later() -> None:
    """read_batch_s = 30 ms (far above a real setting, so the effect is unmistakable): three events 50 ms apart on
    two streams. Each read waits up to 30 ms for other sockets, yet every arrival keeps the time its bytes landed
    (gaps ~50 ms, not shifted by the wait), and the response's end is seen up to 30 ms after its last event."""
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _three_events_50_ms_apart(r, w)
        await r.read()  # until the client closes

    t0_ns = time.monotonic_ns()

    async def body(url: str) -> None:
        async with StreamPool(url, 2, read_batch_s=0.03) as pool:
            assert pool.read_batch_s == 0.03
            recs = await asyncio.gather(_one(pool, t0_ns=t0_ns), _one(pool, t0_ns=t0_ns))
            seen_end_ns = time.monotonic_ns()
        for rec in recs:
            assert rec.error is None, rec.error
            gaps_ms = [(b - a) / 1e6 for a, b in zip(rec.chunk_arrival_ns, rec.chunk_arrival_ns[1:])]
            assert len(gaps_ms) == 2 and all(40 <= g <= 65 for g in gaps_ms), gaps_ms
        last_ns = t0_ns + max(rec.chunk_arrival_ns[-1] for rec in recs)
        assert (seen_end_ns - last_ns) / 1e6 >= 20, "the end of the stream was read before the batch window closed"

    asyncio.run(_serve(handler, body))


def test_preopen_fills_the_free_slots_with_idle_connections_that_requests_then_reuse() -> None:
    connections: list[int] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(1)
        while await _read_request(r) is not None:
            w.write(CHUNKED_HEAD + _chunked([_event(k, 4) for k in range(1, 5)] + [b"data: [DONE]\n\n"]))
            await w.drain()
        w.close()

    async def body(url: str) -> None:
        async with StreamPool(url, 3) as pool:
            assert await pool.preopen(5, 2.0) == 3  # never past the limit
            assert await pool.preopen(1, 2.0) == 0  # no slot left
            recs = await asyncio.gather(*(_one(pool) for _ in range(6)))
        assert all(r.error is None and r.completion_tokens == 4 for r in recs)

    asyncio.run(_serve(handler, body))
    assert len(connections) == 3


def test_preopen_against_a_dead_port_opens_nothing_and_frees_its_slots() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def body() -> RequestRecord:
        async with StreamPool(f"http://127.0.0.1:{port}", 2) as pool:
            assert await pool.preopen(2, 2.0) == 0
            return await _one(pool, timeout_s=2.0)  # a held slot would make this wait out its timeout

    rec = asyncio.run(body())
    assert rec.error is not None and rec.error.startswith("connection error"), rec.error


def test_a_malformed_answer_is_that_request_s_recorded_error_never_a_good_request_or_a_crash() -> None:
    bad_meta = b"data: " + json.dumps({"text": "t", "meta_info": {
        "finish_reason": {"type": "length"}, "completion_tokens": "1", "prompt_tokens": 3}}).encode() + b"\n\n"
    answers = [
        CHUNKED_HEAD + _chunked([_event(1, 2), bad_meta]),                     # a count as a string
        CHUNKED_HEAD + _chunked([b'data: {"text": "t", "meta_info": "m"}\n\n']),  # meta_info a string
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (10 * 1024 * 1024) + b"\r\n\r\n",   # a 10 MB header
        b"HTTP/9 200 OK\r\n\r\n",                                                  # a bad status line
        b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",                         # a bad Content-Length
        CHUNKED_HEAD + b"%x\r\n" % (20 * 1024 * 1024) + b"data: " + b"x" * (17 * 1024 * 1024),  # an endless event
    ]
    pending = iter(answers)

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while (await _read_request(r)) is not None:
            w.write(next(pending))
            await w.drain()

    async def body(url: str) -> None:
        async with StreamPool(url, 1) as pool:
            recs = [await _one(pool) for _ in answers]
        assert [r.error for r in recs] == [
            "malformed answer: chunk.meta_info.completion_tokens: expected a non-negative integer, got a string '1'",
            "malformed answer: chunk.meta_info: expected an object, got a string 'm'",
            "malformed answer: response headers longer than 65536 bytes",
            "malformed answer: not an HTTP/1.x status line: b'HTTP/9 200 OK'",
            "malformed answer: Content-Length: expected one count of decimal digits, got b'12x'",
            f"malformed answer: an SSE event longer than {16 * 1024 * 1024} bytes (no blank line)",
        ]
        assert all(r.prompt_tokens in (None, 3) and r.completion_tokens in (None, 0, 1) for r in recs)

    asyncio.run(_serve(handler, body))


def test_a_trickling_or_endless_stream_ends_at_the_request_s_deadline() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(CHUNKED_HEAD + _chunked([_event(1, 1000)])[:-5])
        try:
            for k in range(2, 1000):  # one more token every 20 ms: each read is quick, the stream never ends
                w.write(b"%x\r\n" % len(_event(k, 1000)) + _event(k, 1000) + b"\r\n")
                await w.drain()
                await asyncio.sleep(0.02)
        except ConnectionError:
            pass

    async def body(url: str) -> None:
        async with StreamPool(url, 1) as pool:
            t0 = time.monotonic()
            rec = await _one(pool, 0.5)
            took_s = time.monotonic() - t0
        assert rec.error == "timeout after 0.5 s" and 0.45 < took_s < 1.2 and len(rec.chunk_tokens) > 3

    asyncio.run(_serve(handler, body))


@pytest.mark.parametrize("api", ["native", "openai"])
def test_a_count_past_int32_is_that_request_s_error_and_the_window_can_still_write_it(api: str) -> None:
    from cluster.engines.streams import OpenAIStreamParser
    from cluster.loadgen.sink import RecordSink

    huge = 3_000_000_000  # read by the fast paths (mid-stream chunks), past the int32 columns of the tables
    if api == "native":
        events = [_event(1, 4), b'data: {"text":"tt","meta_info":{"finish_reason":null,"completion_tokens":%d}}\n\n'
                  % huge, b'data: {"text":"ttt","meta_info":{"finish_reason":null,"completion_tokens":%d}}\n\n'
                  % (2 * huge), _event(4, 4)]
    else:
        events = [b'data: {"id":"c","choices":[{"index":0,"text":"t","finish_reason":null}],'
                  b'"usage":{"completion_tokens":%d}}\n\n' % k for k in (1, huge, 2 * huge)]
        events.append(b'data: {"id":"c","choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":null}\n\n')

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(CHUNKED_HEAD + _chunked(events))
        await w.drain()

    async def body(url: str) -> None:
        rec = RequestRecord(request_index=0, intended_send_ns=0, actual_send_ns=0, prompt_tokens_sent=3, max_tokens=4)
        parser = SGLangNativeParser() if api == "native" else OpenAIStreamParser()
        async with StreamPool(url, 1) as pool:
            end_ns = await stream_request(pool, "/generate", b"{}", parser, time.monotonic_ns(), 5.0, rec)
        assert rec.error == f"malformed answer: completion_tokens {2 * huge} is past 2147483647, more than a request " \
                            "can hold"
        assert rec.completion_tokens is None and sum(rec.chunk_tokens) <= 2**31 - 1
        sink = RecordSink(1)
        sink.add(rec, end_ns)  # raised OverflowError (array('i')) before the bound
        sink.flush()
        assert sink.kept[0][0].column("error").to_pylist() == [rec.error]

    asyncio.run(_serve(handler, body))
