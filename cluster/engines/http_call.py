"""One bounded HTTP/1.1 call to a live server (smoke, health/info/flush polling, the metrics scrape): a total
deadline per call, not per socket read, a size limit on the headers and on the body, and every failure named.

What a failure is, and who is at fault (the CLI's exit code):

- a URL that cannot be used as given (unknown scheme, no host, a port that is not 1-65535, control characters):
  ServerURLError, exit 2, raised before any connection is tried;
- the name does not resolve, or the network has no route there: ServerUnreachableError, exit 3 (the machine's
  name service or network, not the server);
- connection refused (nothing listening), the deadline passed (a server that never answers, never ends its body or
  trickles it a byte at a time), the connection reset, a TLS handshake that fails, a status line, header or chunk
  that is not HTTP/1.x, headers or body past their limit, a body cut short: ServerAnswerError and its subclasses,
  exit 4 (EngineFault: the server is at fault).

The load window's streaming client (cluster/loadgen/pool.py, framing.py) is not this: it is non-blocking, times
every read and records a failure as that request's error.
"""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit

from cluster.engines.answer_fields import MalformedAnswerError, decode_json
from cluster.errors import EngineFault, EnvironmentFault, UserError

MAX_HEADER_BYTES = 64 * 1024
"""The status line and headers of an answer past this are refused (SGLang's are a few hundred bytes)."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""An answer's body past this is refused: /metrics of a busy 8-GPU server is well under 1 MiB."""
_CHUNK_LINE_BYTES = 4096
_STATUS = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class ServerURLError(UserError):
    """A server URL that cannot be used as given (scheme, host, port, characters): exit 2, nothing contacted."""


class ServerUnreachableError(EnvironmentFault):
    """The server's name does not resolve or the network has no route to it: exit 3."""


class ServerAnswerError(EngineFault):
    """A call to a live server failed at the server's end (refused, reset, TLS, ended early): exit 4."""


class ServerRefusedError(ServerAnswerError):
    """Connection refused: nothing listens on that host and port."""


class ServerTimeoutError(ServerAnswerError):
    """The call's whole deadline passed before the answer ended."""


@dataclass(frozen=True)
class ServerURL:
    """A validated base URL: what a call connects to and the path prefix it puts before each request path."""

    scheme: str
    host: str
    port: int
    prefix: str

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.prefix}"


def parse_server_url(text: str, field: str = "URL", *, base: bool = False) -> ServerURL:
    """`text` as http(s)://host[:port][/prefix]; a ServerURLError says what is wrong with it. A `base` URL (what
    smoke and the spec give: request paths go after it) takes no query, since `?x=1` + `/health` would call
    `?x=1/health`; a whole URL (http_get_json's) keeps its query. User and password are refused in both: no call
    sends them, and dropping them silently would call the server as someone else than the URL says."""
    expected = "http://host:port or https://host:port"

    def bad(why: str) -> ServerURLError:
        return ServerURLError(f"{field}: {why}; expected {expected}", field=field, expected=expected)

    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in text):
        raise bad(f"{text!r} holds whitespace or a control character")
    try:
        u = urlsplit(text)
    except ValueError:  # urlsplit's "Invalid IPv6 URL": a bracket opened and not closed, or the reverse
        netloc = text.partition("://")[2].split("/", 1)[0]
        why = ("an IPv6 address's '[' is not closed with ']'" if "[" in netloc and "]" not in netloc
               else "the brackets of an IPv6 address do not pair up")
        raise bad(f"{why} in {text!r}") from None
    if u.scheme not in ("http", "https"):
        raise bad(f"unknown URI scheme {u.scheme!r} in {text!r}" if u.scheme else f"no scheme in {text!r}")
    if not u.hostname:
        raise bad(f"no host in {text!r}")
    try:
        port = u.port
    except ValueError:
        raise bad(f"invalid port {u.netloc.rpartition(':')[2]!r} in {text!r} (an integer 1-65535)") from None
    if port == 0:
        raise bad(f"invalid port 0 in {text!r} (an integer 1-65535)")
    if base and (u.query or u.fragment or text.endswith(("?", "#"))):
        raise bad(f"a base URL takes no query or fragment, got {text!r}")
    if u.fragment or text.endswith("#"):
        raise bad(f"a fragment in {text!r}")
    if "@" in u.netloc:
        raise bad(f"a user or password in {text!r}: sglbench sends none (its calls carry no credentials)")
    prefix = u.path.rstrip("/") + (f"?{u.query}" if u.query else "")
    return ServerURL(u.scheme, u.hostname, port or (443 if u.scheme == "https" else 80), prefix)


@dataclass(frozen=True)
class HttpReply:
    status: int
    headers: tuple[tuple[str, str], ...]
    """(lower-cased name, value) in the order sent."""
    body: bytes
    what: str
    """`METHOD url` of the call, for messages about this answer."""

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; a MalformedAnswerError (exit 4) when it is not."""
        return decode_json(self.body, f"{self.what}: the answer's body")


class _Reader:
    """Reads one socket under the call's deadline: each recv waits at most what is left of it."""

    def __init__(self, sock: socket.socket, deadline_s: float, timeout_s: float, what: str) -> None:
        self.sock, self.deadline_s, self.timeout_s, self.what = sock, deadline_s, timeout_s, what
        self.buf = bytearray()
        self.eof = False
        self.received = 0
        """Bytes read so far, whether or not still buffered."""

    def fill(self) -> None:
        left = self.deadline_s - time.monotonic()
        if left <= 0:
            raise _timeout(self.what, self.timeout_s)
        self.sock.settimeout(left)
        data = self.sock.recv(65536)
        if not data:
            self.eof = True
        self.received += len(data)
        self.buf += data

    def line(self, limit: int, what: str, too_long: str = "") -> bytes:
        """Up to the next CRLF (taken off the buffer), at most `limit` bytes before it."""
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return out
            if len(self.buf) > limit:
                raise MalformedAnswerError(f"{self.what}: {too_long or f'{what} longer than {limit} bytes'}")
            if self.eof:
                raise MalformedAnswerError(f"{self.what}: the answer ended inside {what} (truncated)")
            self.fill()

    def take(self, n: int, what: str) -> bytes:
        while len(self.buf) < n:
            if self.eof:
                raise MalformedAnswerError(f"{self.what}: {what} truncated: expected {n} bytes, got "
                                           f"{len(self.buf)}")
            self.fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


def _timeout(what: str, timeout_s: float) -> ServerTimeoutError:
    return ServerTimeoutError(f"{what}: timed out after {timeout_s:g} s (the call's whole deadline; the server "
                              "did not finish its answer)")


_TLS_RECORD = re.compile(rb"[\x14-\x17]\x03[\x00-\x04]")
"""A TLS record's first bytes (content type, version 3.x): a TLS server answering a plain-HTTP request."""


def may_start_status_line(head: bytes) -> bool:
    """Whether the first bytes of an answer can still begin an `HTTP/1.0` or `HTTP/1.1` status line (the control
    calls here and the load client's framing refuse an answer as soon as they cannot)."""
    n = min(len(head), 8)
    return head[:n] in (b"HTTP/1.1"[:n], b"HTTP/1.0"[:n])


def _not_http(r: _Reader) -> None:
    """Refuse an answer as soon as its first bytes cannot start 'HTTP/' (an HTTP/0.9 body, an HTTP/2 frame, a TLS
    alert): it is not HTTP/1.x whether or not a CRLF ever follows, so it is not 'truncated'."""
    while len(r.buf) < 8 and not r.eof and b"\r\n" not in r.buf:
        r.fill()
    start = bytes(r.buf[:80]).split(b"\r\n", 1)[0]
    if r.buf and not may_start_status_line(bytes(r.buf[:8])):
        hint = "; that is a TLS record: if the server speaks TLS, use https://" if _TLS_RECORD.match(start) else ""
        raise MalformedAnswerError(f"{r.what}: expected an HTTP/1.x status line, got {start!r}{hint}")


def _head(r: _Reader, max_header_bytes: int) -> tuple[int, list[tuple[str, str]]]:
    left = max_header_bytes
    too_long = f"the answer's headers are longer than {max_header_bytes} bytes"
    _not_http(r)
    line = r.line(left, "the status line", too_long)
    m = _STATUS.fullmatch(line)
    if m is None:
        raise MalformedAnswerError(f"{r.what}: expected an HTTP/1.x status line, got {line[:80]!r}")
    headers: list[tuple[str, str]] = []
    while True:
        left -= len(line) + 2
        if left < 0:
            raise MalformedAnswerError(f"{r.what}: {too_long}")
        line = r.line(left, "the headers", too_long)
        if not line:
            return int(m.group(1)), headers
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise MalformedAnswerError(f"{r.what}: expected a header line 'Name: value', got {line[:80]!r}")
        headers.append((name.decode("ascii").lower(), value.strip().decode("latin-1")))


def _body(r: _Reader, headers: list[tuple[str, str]], max_body_bytes: int) -> bytes:
    codings = [v.lower() for k, v in headers if k == "transfer-encoding"]
    lengths = {v for k, v in headers if k == "content-length"}
    if codings:
        if codings[-1].rsplit(",", 1)[-1].strip() != "chunked":
            raise MalformedAnswerError(f"{r.what}: expected Transfer-Encoding chunked, got {codings[-1]!r}")
        return _chunked(r, max_body_bytes)
    if lengths:
        value = lengths.pop()
        if lengths or not value.isdigit() or not value.isascii() or len(value) > 18:
            raise MalformedAnswerError(f"{r.what}: expected one Content-Length of decimal digits, got "
                                       f"{sorted(lengths | {value})!r}")
        if int(value) > max_body_bytes:
            raise MalformedAnswerError(f"{r.what}: the answer's body ({value} bytes) is larger than "
                                       f"{max_body_bytes} bytes")
        return r.take(int(value), "the answer's body")
    while not r.eof:  # delimited by the connection's close
        if len(r.buf) > max_body_bytes:
            raise MalformedAnswerError(f"{r.what}: the answer's body is larger than {max_body_bytes} bytes")
        r.fill()
    return bytes(r.buf)


def _chunked(r: _Reader, max_body_bytes: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = r.line(_CHUNK_LINE_BYTES, "a chunk's size line")
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 15 or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
            raise MalformedAnswerError(f"{r.what}: expected a chunk size in hex digits, got {line[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            while r.line(_CHUNK_LINE_BYTES, "the trailer"):
                pass
            return b"".join(parts)
        total += size
        if total > max_body_bytes:
            raise MalformedAnswerError(f"{r.what}: the answer's body is larger than {max_body_bytes} bytes")
        parts.append(r.take(size, "a chunk"))
        if r.take(2, "a chunk's CRLF") != b"\r\n":
            raise MalformedAnswerError(f"{r.what}: expected CRLF after a chunk's {size} bytes")


_DECODERS = {"gzip": 31, "x-gzip": 31, "deflate": 15}
"""Content codings a control call decodes (zlib window bits: gzip framing, zlib framing)."""


def _decoded(body: bytes, headers: list[tuple[str, str]], what: str, max_body_bytes: int) -> bytes:
    """The body with its Content-Encoding undone (the codings in reverse order), within `max_body_bytes` once
    decoded; a coding this does not decode is refused by name (the answer_invariants' content_encoding_known).
    Every call asks for identity: a server may still send gzip, which is a nuisance, not a wrong answer."""
    codings = [c.strip().lower() for k, v in headers if k == "content-encoding" for c in v.split(",") if c.strip()]
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding not in _DECODERS:
            raise MalformedAnswerError(f"{what}: the answer's body is in Content-Encoding {coding!r}, which sglbench "
                                       f"does not decode (it asked for identity; gzip and deflate are decoded)")
        d = zlib.decompressobj(_DECODERS[coding])
        try:
            try:
                out = d.decompress(body, max_body_bytes + 1)
            except zlib.error:
                if coding != "deflate":
                    raise
                d = zlib.decompressobj(-15)  # raw deflate without zlib's header, as some servers send it
                out = d.decompress(body, max_body_bytes + 1)
        except zlib.error as e:
            raise MalformedAnswerError(f"{what}: the answer's body is not valid {coding} ({e})") from None
        if len(out) > max_body_bytes:
            raise MalformedAnswerError(f"{what}: the answer's body is larger than {max_body_bytes} bytes once "
                                       f"{coding}-decoded")
        if not d.eof:
            raise MalformedAnswerError(f"{what}: the answer's {coding} body is truncated")
        body = out
    return body


def resolve_within(host: str, port: int, deadline_s: float) -> Optional[list[tuple[Any, ...]]]:
    """`host`'s TCP addresses, or None when the lookup did not finish by `deadline_s` (time.monotonic()); the lookup's
    own OSError (gaierror) is raised. getaddrinfo takes no timeout: it runs on a daemon thread, abandoned at the
    deadline."""
    got: list[Any] = []

    def lookup() -> None:
        try:
            got.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as e:  # gaierror, or the resolver's own failure
            got.append(e)

    worker = threading.Thread(target=lookup, name="resolve", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline_s - time.monotonic()))
    if not got:
        return None
    if isinstance(got[0], OSError):
        raise got[0]
    infos: list[tuple[Any, ...]] = got[0]
    return infos


def _resolve(url: ServerURL, deadline_s: float, timeout_s: float, what: str) -> list[tuple[Any, ...]]:
    """The host's addresses, the lookup bounded by the call's deadline."""
    try:
        infos = resolve_within(url.host, url.port, deadline_s)
    except OSError as e:
        raise ServerUnreachableError(f"{what}: name {url.host!r} not resolved ({e.strerror or e})") from None
    if infos is None:
        raise ServerUnreachableError(f"{what}: resolving {url.host!r} did not finish within {timeout_s:g} s "
                                     "(the call's whole deadline)")
    return infos


def _connect(url: ServerURL, deadline_s: float, timeout_s: float, what: str) -> socket.socket:
    last: Optional[OSError] = None
    for family, kind, proto, _, addr in _resolve(url, deadline_s, timeout_s, what):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(max(0.001, deadline_s - time.monotonic()))
            sock.connect(addr)
            break
        except OSError as e:
            sock.close()
            last = e
    else:
        if isinstance(last, ConnectionRefusedError):
            raise ServerRefusedError(f"{what}: connection refused (nothing listening on {url.netloc})")
        if isinstance(last, TimeoutError) or time.monotonic() >= deadline_s:
            raise _timeout(what, timeout_s)
        # ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL: no route from this machine
        raise ServerUnreachableError(f"{what}: cannot connect to {url.netloc} "
                                     f"({last.strerror or last if last else 'no address'})")
    if url.scheme != "https":
        return sock
    try:
        sock.settimeout(max(0.001, deadline_s - time.monotonic()))
        return ssl.create_default_context().wrap_socket(sock, server_hostname=url.host)
    except TimeoutError:
        sock.close()
        raise _timeout(what, timeout_s) from None
    except (ssl.SSLError, OSError) as e:
        sock.close()
        raise ServerAnswerError(f"{what}: TLS handshake with {url.netloc} failed ({e})") from None


def call(url: ServerURL | str, path: str, *, method: str = "GET", body: Optional[bytes] = None,
         headers: Mapping[str, str] = {}, timeout_s: float = 30.0, max_header_bytes: int = MAX_HEADER_BYTES,
         max_body_bytes: int = MAX_BODY_BYTES) -> HttpReply:
    """One request on its own connection; the whole answer (any status) read within `timeout_s` and the limits."""
    base = url if isinstance(url, ServerURL) else parse_server_url(url)
    what = f"{method} {base}{path}"
    deadline_s = time.monotonic() + timeout_s
    lines = [f"{method} {base.prefix + path or '/'} HTTP/1.1", f"Host: {base.netloc}", "Connection: close",
             "Accept-Encoding: identity", *(f"{k}: {v}" for k, v in headers.items())]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    if any(c in line for line in lines for c in "\r\n\0"):
        raise ServerURLError(f"{what}: a path or header holds a line break or NUL", field="URL")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
    sock = _connect(base, deadline_s, timeout_s, what)
    r = _Reader(sock, deadline_s, timeout_s, what)
    try:
        sock.settimeout(max(0.001, deadline_s - time.monotonic()))
        sock.sendall(request)
        status, head = _head(r, max_header_bytes)
        while 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            status, head = _head(r, max_header_bytes)
        body = b"" if status in (204, 304) else _decoded(_body(r, head, max_body_bytes), head, what, max_body_bytes)
        return HttpReply(status, tuple(head), body, what)
    except TimeoutError:
        raise _timeout(what, timeout_s) from None
    except ssl.SSLError as e:
        raise ServerAnswerError(f"{what}: TLS error mid-answer ({e})") from None
    except OSError as e:  # reset, broken pipe
        if base.scheme == "http" and not r.buf and not r.received:  # a TLS server resets a plain-HTTP request
            raise ServerAnswerError(f"{what}: the server at {base.netloc} did not answer HTTP (the connection "
                                    f"failed before any answer: {e.strerror or e}); if it speaks TLS, use "
                                    "https://") from None
        raise ServerAnswerError(f"{what}: the connection failed mid-call ({e.strerror or e})") from None
    finally:
        sock.close()


__all__ = ["MAX_BODY_BYTES", "MAX_HEADER_BYTES", "HttpReply", "ServerAnswerError", "ServerRefusedError",
           "ServerTimeoutError", "ServerURL", "ServerURLError", "ServerUnreachableError", "call",
           "may_start_status_line", "parse_server_url"]
