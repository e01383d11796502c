"""The bounded control call (engines/http_call.py) against a loopback server replaying broken answers: each
failure is the project's own error with its exit code, and each call ends by its deadline, not per read."""

from __future__ import annotations

import socket
import struct
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest

from cluster.engines.answer_fields import MalformedAnswerError
from cluster.engines.http_call import (ServerAnswerError, ServerRefusedError, ServerTimeoutError, ServerURLError,
                                       ServerUnreachableError, call, parse_server_url)
from cluster.errors import exit_code_of
from cluster.server.process import free_port, http_get_json, http_status
from tests.fuzz.replay_server import ReplayServer, Script, http, whole


@pytest.mark.parametrize("url, says", [
    ("ftp://127.0.0.1:30000", "unknown URI scheme 'ftp'"),
    ("htp://127.0.0.1:30000", "unknown URI scheme 'htp'"),
    ("127.0.0.1:30000", "no scheme in '127.0.0.1:30000'"),
    ("localhost:30000", "unknown URI scheme 'localhost'"),
    ("//127.0.0.1:30000", "no scheme"),
    ("http://:30000", "no host"),
    ("http://127.0.0.1:99999", "invalid port '99999'"),
    ("http://127.0.0.1:3o000", "invalid port '3o000'"),
    ("http://127.0.0.1:0", "invalid port 0"),
    ("http://127.0.0.1:-1", "invalid port '-1'"),
    ("http://127.0.0.1:30000/a b", "whitespace or a control character"),
    ("http://127.0.0.1:30000\x00", "whitespace or a control character"),
    ("http://127.0.0.1:30000#x", "a fragment"),
])
def test_an_unusable_url_is_exit_2_before_any_connection(url: str, says: str) -> None:
    with pytest.raises(ServerURLError, match=says) as e:
        call(url, "/health", timeout_s=1.0)
    assert exit_code_of(e.value) == 2 and e.value.field == "URL"


def test_a_good_url_keeps_its_prefix_and_default_port() -> None:
    u = parse_server_url("https://example.org/api/")
    assert (u.scheme, u.host, u.port, u.prefix) == ("https", "example.org", 443, "/api")
    assert str(parse_server_url("http://[::1]:8000")) == "http://[::1]:8000"


def test_nothing_listening_is_connection_refused_exit_4() -> None:
    port = free_port()
    with pytest.raises(ServerRefusedError, match=rf"connection refused \(nothing listening on 127.0.0.1:{port}\)") \
            as e:
        call(f"http://127.0.0.1:{port}", "/health", timeout_s=2.0)
    assert exit_code_of(e.value) == 4
    assert http_status(f"http://127.0.0.1:{port}/health") == 0


def test_a_name_that_does_not_resolve_is_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_name(*a: object, **k: object) -> list[tuple[object, ...]]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_name)  # no resolver is asked: tests stay on loopback
    with pytest.raises(ServerUnreachableError, match="name 'sglang-head' not resolved") as e:
        call("http://sglang-head:30000", "/health", timeout_s=1.0)
    assert exit_code_of(e.value) == 3


def test_a_resolver_that_hangs_ends_at_the_call_s_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(*a: object, **k: object) -> list[tuple[object, ...]]:
        time.sleep(3)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hang)
    t0 = time.monotonic()
    with pytest.raises(ServerUnreachableError, match=r"resolving 'sglang-head' did not finish within 0.3 s") as e:
        call("http://sglang-head:30000", "/health", timeout_s=0.3)
    assert time.monotonic() - t0 < 1.0 and exit_code_of(e.value) == 3


@pytest.mark.parametrize("script", [
    Script((b"HTTP/1.1 200 OK\r\n",), then="hang"),                                          # silent after a line
    Script((http(b"200 OK", b"")[:-2],), gap_s=0.05, then="trickle"),                        # headers never end
    Script((b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",), then="hang"),  # body never ends
    Script((b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",), gap_s=0.05, then="trickle"),  # a byte at a time
], ids=["silent", "trickled-headers", "never-ending-chunks", "trickled-body"])
def test_every_call_ends_by_its_deadline_whatever_the_server_does(script: Script) -> None:
    with ReplayServer(lambda m, p: script) as srv:
        t0 = time.monotonic()
        with pytest.raises(ServerTimeoutError, match=r"timed out after 0.6 s \(the call's whole deadline") as e:
            call(srv.url, "/health", timeout_s=0.6)
        assert time.monotonic() - t0 < 1.5  # a per-read timeout of 0.6 s would wait forever on a trickle
        t0 = time.monotonic()
        assert http_status(srv.url + "/health", timeout_s=0.6) == 0  # the health poll's view: not healthy
        assert time.monotonic() - t0 < 1.5
    assert exit_code_of(e.value) == 4


@pytest.mark.parametrize("answer, says", [
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 10_000_000 + b"\r\n\r\n", "headers are longer than 65536 bytes"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20_000 + b"\r\n", "headers are longer than 65536 bytes"),
    (b"ICY 200 OK\r\n\r\n", "expected an HTTP/1.x status line, got b'ICY 200 OK'"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "expected an HTTP/1.x status line"),
    (b"HTTP/1.1 OK\r\n\r\n", "expected an HTTP/1.x status line"),
    (b"garbage", "expected an HTTP/1.x status line, got b'garbage'"),
    (b'{"a": 1}', "expected an HTTP/1.x status line, got b'{\"a\": 1}'"),  # F18: HTTP/0.9, no status line
    (b"\x00\x00\x12\x04\x00\x00\x00\x00\x00", r"expected an HTTP/1.x status line, got b'\\x00\\x00\\x12"),  # HTTP/2
    (b"\x15\x03\x03\x00\x02\x02\x46", "that is a TLS record: if the server speaks TLS, use https://"),  # TLS alert
    (b"HTTP/1", "the answer ended inside the status line"),
    (b"", "the answer ended inside the status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "expected a header line 'Name: value'"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10, "truncated: expected 100 bytes, got 10"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "expected one Content-Length of decimal digits"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", "expected one Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "is larger than 67108864 bytes"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "expected a chunk size in hex digits"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", "expected CRLF after a chunk"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "a chunk truncated"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "expected Transfer-Encoding chunked"),
], ids=["10MB-header", "many-headers", "icy", "status-2000", "no-code", "garbage", "http09", "http2-frame",
        "tls-alert", "cut-prefix", "empty", "no-colon",
        "truncated-length", "negative-length", "two-lengths", "huge-length", "bad-chunk-size", "chunk-no-crlf",
        "truncated-chunk", "gzip"])
def test_a_malformed_answer_is_exit_4_and_says_what_was_expected(answer: bytes, says: str) -> None:
    with ReplayServer(lambda m, p: whole(answer)) as srv:
        with pytest.raises(MalformedAnswerError, match=says.replace("(", r"\(").replace(")", r"\)")) as e:
            call(srv.url, "/health", timeout_s=5.0)
        assert str(e.value).startswith(f"GET {srv.url}/health: ")
    assert exit_code_of(e.value) == 4


def test_a_body_past_the_limit_is_refused_however_it_is_framed() -> None:
    body = b"x" * 5000
    for framing in (http(b"200 OK", body), http(b"200 OK", body + b"\n\n", chunked=True),
                    b"HTTP/1.1 200 OK\r\n\r\n" + body):
        with ReplayServer(lambda m, p: whole(framing)) as srv:
            with pytest.raises(MalformedAnswerError, match="larger than 4096 bytes"):
                call(srv.url, "/x", timeout_s=5.0, max_body_bytes=4096)
            assert call(srv.url, "/x", timeout_s=5.0).body.startswith(body)


def test_good_answers_in_every_framing_and_json_that_is_not() -> None:
    doc = b'{"version": "0.5.23"}'
    for framing in (http(b"200 OK", doc), http(b"200 OK", doc, chunked=True), b"HTTP/1.0 200 OK\r\n\r\n" + doc,
                    b"HTTP/1.1 100 Continue\r\n\r\n" + http(b"200 OK", doc)):
        with ReplayServer(lambda m, p: Script(tuple(framing[i:i + 3] for i in range(0, len(framing), 3)))) as srv:
            assert http_get_json(srv.url + "/server_info") == {"version": "0.5.23"}
    for body, says in ((b"[" * 100_000, "nested at most 64 levels"), (b"{\"a\": 1", "expected JSON"),
                       (b"\xff\xfe", "expected UTF-8 JSON"), (b"1" * 5000, "expected JSON")):
        with ReplayServer(lambda m, p: whole(http(b"200 OK", body))) as srv:
            with pytest.raises(MalformedAnswerError, match=says):
                http_get_json(srv.url + "/server_info")
    with ReplayServer(lambda m, p: whole(http(b"404 Not Found", b"{}"))) as srv:
        with pytest.raises(Exception, match="expected status 200 with JSON, got 404") as e:
            http_get_json(srv.url + "/server_info")
        assert exit_code_of(e.value) == 4


@contextmanager
def _one_connection(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback port whose one connection `handle` answers (raw socket: what no HTTP server would send)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            handle(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        t.join(5)
        srv.close()


def test_https_to_a_plain_http_server_is_a_tls_error_exit_4() -> None:
    with _one_connection(lambda c: c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")) as port:
        with pytest.raises(ServerAnswerError, match=r"TLS handshake with 127.0.0.1:\d+ failed") as e:
            call(f"https://127.0.0.1:{port}", "/health", timeout_s=2.0)
        assert exit_code_of(e.value) == 4


def test_a_connection_reset_before_any_answer_over_http_suggests_https() -> None:
    """F18: a TLS server sent a plain-HTTP request resets it; that was 'the connection failed mid-call'."""
    def reset(conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST

    with _one_connection(reset) as port:
        with pytest.raises(ServerAnswerError, match=rf"the server at 127.0.0.1:{port} did not answer HTTP .*"
                                                    "if it speaks TLS, use https://") as e:
            call(f"http://127.0.0.1:{port}", "/health", timeout_s=2.0)
        assert exit_code_of(e.value) == 4


@pytest.mark.parametrize("url, says", [
    ("http://127.0.0.1:1?x=1", "a base URL takes no query or fragment"),
    ("http://127.0.0.1:1/api?", "a base URL takes no query or fragment"),
    ("http://127.0.0.1:1#frag", "a base URL takes no query or fragment"),
    ("http://user:pass@127.0.0.1:1", "a user or password in"),
])
def test_a_base_url_with_a_query_fragment_or_credentials_is_refused(url: str, says: str) -> None:
    """F19: 'http://h:1?x=1' was called as 'GET http://h:1?x=1/health'; user:pass@ was dropped silently."""
    with pytest.raises(ServerURLError, match=says) as e:
        parse_server_url(url, base=True)
    assert exit_code_of(e.value) == 2
    assert parse_server_url("http://127.0.0.1:1/v1/models?x=1").prefix == "/v1/models?x=1"  # a whole URL keeps it


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "1e9"])
def test_smoke_timeout_outside_its_range_says_a_finite_number_of_seconds(value: str) -> None:
    """F21: --timeout nan was 'Input should be less than or equal to 86400' (nan is past no bound)."""
    from typer.testing import CliRunner

    from cluster.cli import app

    res = CliRunner().invoke(app, ["smoke", "http://127.0.0.1:1", "--timeout", value])
    assert res.exit_code == 2, res.output
    assert "--timeout: expected a finite number of seconds from 0.001 to 86400" in res.output, res.output
