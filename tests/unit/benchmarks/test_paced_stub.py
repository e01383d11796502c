"""benchmarks/paced_stub.c through its wrapper: stream shapes, one write per event on an absolute schedule, keep-alive,
--burst, routes and stats, read with plain blocking sockets and time.monotonic_ns after every recv."""

from __future__ import annotations

import json
import math
import socket
import statistics
import struct
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Optional

import pytest

TTFT_MS, ITL_MS = 20.0, 5.0
MS = 1_000_000


@pytest.fixture
def stub(ps: ModuleType, binary: Path) -> Iterator[Any]:
    with ps.PacedStub(binary, ttft_ms=TTFT_MS, itl_ms=ITL_MS) as s:
        yield s


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    frames: list[bytes] = field(default_factory=list)  # chunk payloads, the 0-size terminator excluded
    frame_recv: list[int] = field(default_factory=list)  # which recv held each frame's last byte
    end_recv: int = -1  # which recv held the terminator's last byte
    header_recv: int = -1
    recv_ns: list[int] = field(default_factory=list)
    recv_end: list[int] = field(default_factory=list)  # buffer offset after each recv
    frame_end: list[int] = field(default_factory=list)
    header_end: int = 0
    end: int = 0

    def events(self) -> list[Any]:
        """Each frame is one SSE event: its JSON (the string "[DONE]" for the end marker)."""
        out: list[Any] = []
        for f in self.frames:
            assert f.startswith(b"data: ") and f.endswith(b"\n\n") and f.count(b"\n\n") == 1, f
            payload = f[6:-2]
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
        return out


def _recv_index(ends: list[int], offset: int) -> int:
    return next(i for i, e in enumerate(ends) if e >= offset)


def _parse(buf: bytes) -> Optional[tuple[int, dict[str, str], int, bytes, list[tuple[bytes, int]], int]]:
    """(status, headers, header end, body, [(frame, frame end)], response end), or None while incomplete."""
    he = buf.find(b"\r\n\r\n")
    if he < 0:
        return None
    lines = buf[:he].decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    pos = he + 4
    if headers.get("transfer-encoding") != "chunked":
        n = int(headers["content-length"])
        return None if len(buf) < pos + n else (status, headers, pos, buf[pos:pos + n], [], pos + n)
    frames: list[tuple[bytes, int]] = []
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(buf[pos:eol], 16)
        if len(buf) < eol + 2 + size + 2:
            return None
        assert buf[eol + 2 + size:eol + 4 + size] == b"\r\n"
        pos = eol + 4 + size
        if size == 0:
            return status, headers, he + 4, b"", frames, pos
        frames.append((buf[eol + 2:eol + 2 + size], pos))


class Reader:
    """Responses off one blocking socket, each recv timestamped; bytes past one response stay for the next."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def response(self) -> Response:
        buf = self.buf
        times: list[int] = [time.monotonic_ns()] if buf else []
        ends: list[int] = [len(buf)] if buf else []
        while (parsed := _parse(buf)) is None:
            chunk = self.sock.recv(1 << 20)
            t = time.monotonic_ns()
            assert chunk, f"connection closed mid-response after {buf!r}"
            buf += chunk
            times.append(t)
            ends.append(len(buf))
        status, headers, hend, body, frames, rend = parsed
        self.buf = buf[rend:]
        return Response(status, headers, body, [f for f, _ in frames], [_recv_index(ends, e) for _, e in frames],
                        _recv_index(ends, rend), _recv_index(ends, hend), times, ends, [e for _, e in frames],
                        hend, rend)


def request_bytes(method: str, path: str, body: Optional[dict[str, Any]] = None, close: bool = False) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
           f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    return head.encode() + data


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def stream(port: int, path: str, body: dict[str, Any]) -> tuple[int, Response]:
    with connect(port) as s:
        t_send = time.monotonic_ns()
        s.sendall(request_bytes("POST", path, body))
        r = Reader(s)
        resp = r.response()
        assert not r.buf, "bytes past the end of the response"
        return t_send, resp


def check_pacing(t_send: int, r: Response, n_events: int) -> list[float]:
    """One write per event: every recv ends on a frame boundary, each event arrives no earlier than its absolute due
    time (the first >= 19 ms after the send), the headers and each event in a recv of their own, and the last event,
    [DONE] and the terminator in one recv (one write). The gaps between events, in ms."""
    boundaries = {r.header_end, *r.frame_end, r.end}
    assert all(e in boundaries for e in r.recv_end), "a recv ended inside a frame: an event was split over writes"
    arrivals = [r.recv_ns[i] for i in r.frame_recv[:n_events]]
    assert arrivals[0] - t_send >= 19 * MS, (arrivals[0] - t_send) / MS
    for k, t in enumerate(arrivals):  # due = R + ttft + k*itl with R after the send: no event can come earlier
        assert t - t_send >= (TTFT_MS + k * ITL_MS - 1.0) * MS, (k, (t - t_send) / MS)
    # a blocking reader gets the headers (written at once) and then each event in a recv of its own, unless it was
    # itself descheduled for longer than the gap (two cores beside a CI job): allow that twice per stream
    items = [r.header_recv, *r.frame_recv[:n_events]]
    assert items == sorted(items) and len(items) - len(set(items)) <= 2, items
    last = r.frame_recv[n_events - 1]
    assert all(i == last for i in r.frame_recv[n_events - 1:]) and r.end_recv == last, \
        "the last event, [DONE] and the terminator go in one write"
    return [(b - a) / MS for a, b in zip(arrivals, arrivals[1:])]


def test_native_chat_and_completions_streams(stub: Any) -> None:
    t_send, r = stream(stub.port, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 8,
                                                                                   "ignore_eos": True},
                                                "stream": True})
    assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
    assert r.headers["transfer-encoding"] == "chunked"
    ev = r.events()
    assert len(ev) == 9 and ev[-1] == "[DONE]"
    for k, e in enumerate(ev[:-1], start=1):
        assert e["text"] == " tok" * k
        assert e["output_ids"] == list(range(1001, 1001 + k))
        meta = e["meta_info"]
        assert meta["id"].startswith("r") and meta["id"] == ev[0]["meta_info"]["id"]
        assert (meta["prompt_tokens"], meta["completion_tokens"], meta["cached_tokens"]) == (128, k, 0)
        assert meta["finish_reason"] == ({"type": "length", "length": 8} if k == 8 else None)
    gaps = check_pacing(t_send, r, 8)

    t_send, r = stream(stub.port, "/v1/chat/completions", {
        "model": "stub", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    ev = r.events()
    assert len(ev) == 6 and ev[-1] == "[DONE]"
    for k, e in enumerate(ev[:4], start=1):
        assert e["object"] == "chat.completion.chunk" and e["id"].startswith("chatcmpl-") and e["model"] == "stub"
        choice = e["choices"][0]
        want_delta = {"role": "assistant", "content": " tok"} if k == 1 else {"content": " tok"}
        assert choice["delta"] == want_delta and choice["index"] == 0
        assert choice["finish_reason"] == ("length" if k == 4 else None)
        assert e["usage"] == {"prompt_tokens": 128, "completion_tokens": k, "total_tokens": 128 + k}
    assert ev[4]["choices"] == [] and ev[4]["id"] == ev[0]["id"]
    assert ev[4]["usage"] == {"prompt_tokens": 128, "completion_tokens": 4, "total_tokens": 132}
    gaps += check_pacing(t_send, r, 4)

    t_send, r = stream(stub.port, "/v1/completions", {"model": "stub", "prompt": "hi", "max_tokens": 5,
                                                      "stream": True})
    ev = r.events()
    assert len(ev) == 6 and ev[-1] == "[DONE]"
    for k, e in enumerate(ev[:5], start=1):
        assert e["object"] == "text_completion" and e["id"].startswith("cmpl-") and "usage" not in e
        assert e["choices"] == [{"index": 0, "text": " tok", "logprobs": None,
                                 "finish_reason": "length" if k == 5 else None}]
    gaps += check_pacing(t_send, r, 5)
    assert 3.0 <= statistics.median(gaps) <= 8.0, gaps  # ITL 5 ms

    st = stub.stats()
    assert st["writes"] == st["events"] == 8 + 4 + 5 and st["requests"] == 3 and st["blocked_writes"] == 0
    assert st["late_p99_us"] >= st["late_p50_us"] >= 0 and st["late_max_us"] >= st["late_p999_us"]
    assert set(st) >= {"late_p999_us", "late_over_1ms", "cpu_s", "uptime_s"}
    final = stub.stop()
    assert final["writes"] == 17 and final["requests"] == 3 and final["uptime_s"] > 0
    assert stub.stop() == final and stub.proc.returncode == 0


def test_keep_alive_and_pipelining(stub: Any) -> None:
    with connect(stub.port) as s:
        rd = Reader(s)
        s.sendall(request_bytes("POST", "/generate", {"sampling_params": {"max_new_tokens": 3}}))
        a = rd.response()
        s.sendall(request_bytes("POST", "/v1/chat/completions", {"max_completion_tokens": 2}))
        b = rd.response()
        # pipelined: a stream, then a plain GET queued behind it on the same connection
        s.sendall(request_bytes("POST", "/v1/completions", {"max_tokens": 2}) + request_bytes("GET", "/health"))
        c = rd.response()
        d = rd.response()
        s.sendall(request_bytes("GET", "/v1/models", close=True))
        e = rd.response()
        assert s.recv(1) == b""  # Connection: close is honoured
    assert [x["meta_info"]["completion_tokens"] for x in a.events()[:-1]] == [1, 2, 3]
    assert len(b.events()) == 3 and b.events()[1]["choices"][0]["finish_reason"] == "length"
    assert len(c.events()) == 3 and (d.status, d.body) == (200, b"{}")
    assert json.loads(e.body)["data"][0]["id"] == "stub"
    st = stub.stats()
    assert st["requests"] == 3 and st["writes"] == 3 + 2 + 2


def test_burst_sends_whole_responses_at_ttft(ps: ModuleType, binary: Path) -> None:
    with ps.PacedStub(binary, ttft_ms=TTFT_MS, itl_ms=ITL_MS, burst=True) as s:
        t_send, r = stream(s.port, "/generate", {"sampling_params": {"max_new_tokens": 8}})
        ev = r.events()
        assert len(ev) == 9 and ev[-1] == "[DONE]" and ev[7]["meta_info"]["finish_reason"]["length"] == 8
        assert [e["output_ids"][-1] for e in ev[:-1]] == list(range(1001, 1009))
        assert r.recv_ns[r.frame_recv[0]] - t_send >= 19 * MS
        _, r = stream(s.port, "/v1/completions", {"max_tokens": 3, "stream_options": {"include_usage": True}})
        assert len(r.events()) == 5 and r.events()[3]["usage"]["completion_tokens"] == 3
        # a response of ~4.6 n^2 bytes to a reader with a tiny receive buffer that waits: more than the kernel's
        # send buffer takes (tcp_wmem's max, 4 MB by default), so the one write would block and its rest goes out
        # on EPOLLOUT
        try:
            wmem_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
        except (OSError, IndexError, ValueError):
            wmem_max = 4 << 20
        n = max(1200, math.ceil(math.sqrt(1.5 * wmem_max / 4.5)))
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", s.port))
            sock.sendall(request_bytes("POST", "/generate", {"sampling_params": {"max_new_tokens": n}}))
            time.sleep(0.1)
            big = bytearray()
            while not big.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
                chunk = sock.recv(1 << 20)
                assert chunk
                big += chunk
        parsed = _parse(bytes(big))
        assert parsed is not None and parsed[5] == len(big) and len(parsed[4]) == n + 1
        last = json.loads(parsed[4][n - 1][0][6:-2])
        assert last["output_ids"] == list(range(1001, 1001 + n)) and last["meta_info"]["finish_reason"]["length"] == n
        st = s.stop()
    assert st["writes"] == 3 and st["events"] == 11 + n and st["requests"] == 3 and st["blocked_writes"] == 1


def test_routes_stats_reset_and_defaults(ps: ModuleType, binary: Path) -> None:
    with ps.PacedStub(binary, ttft_ms=0.0, itl_ms=0.0, chunks=3) as s:
        def get(path: str, method: str = "GET") -> tuple[int, bytes]:
            req = urllib.request.Request(s.base_url + path, data=b"" if method == "POST" else None, method=method)
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as err:
                return err.code, err.read()

        assert get("/health") == (200, b"{}") and get("/health_generate") == (200, b"{}")
        for p in ("/get_model_info", "/model_info"):
            assert json.loads(get(p)[1]) == {"model_path": "stub", "is_generation": True}
        for p in ("/get_server_info", "/server_info"):
            assert json.loads(get(p)[1])["version"] == "0.5.23"
        assert get("/flush_cache", "POST")[0] == 200
        assert get("/nope")[0] == 404 and get("/generate")[0] == 404
        _, r = stream(s.port, "/generate", {"text": "no max_new_tokens here"})
        assert len(r.events()) == 4  # --chunks 3, then [DONE]
        assert s.stats()["writes"] == 3
        s.reset_stats()
        st = s.stats()
        assert st["writes"] == 0 and st["requests"] == 0 and st["late_p99_us"] == 0


def test_client_gone_mid_stream(stub: Any) -> None:
    with connect(stub.port) as s:
        s.sendall(request_bytes("POST", "/generate", {"sampling_params": {"max_new_tokens": 100000}}))
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.recv(65536)  # the first event
    with connect(stub.port) as s:  # and a reset instead of a close
        s.sendall(request_bytes("POST", "/v1/completions", {"max_tokens": 100000}))
        s.recv(4096)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.05)
    st = stub.stats()
    assert st["open_connections"] == 1  # the stats request's own
    assert stub.stop()["requests"] == 2 and stub.proc.returncode == 0
