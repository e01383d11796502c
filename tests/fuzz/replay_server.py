"""A loopback asyncio server on its own thread that answers each request with scripted bytes: whole, split, trickled
a byte at a time, or never ended. For the live-server boundary's tests and fuzz target; it listens on 127.0.0.1
only and `close()` (or the context manager) stops it and every connection it holds."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Script:
    """What one answer writes: `pieces` one after another, `gap_s` apart, then `then`."""

    pieces: tuple[bytes, ...]
    gap_s: float = 0.0
    then: str = "close"
    """close: end the connection; hang: keep it open, silent; trickle: one more byte every gap_s, forever."""


def whole(data: bytes) -> Script:
    return Script((data,))


Answer = Callable[[str, str], Script]
"""(method, path) → the script of that request's answer."""


class ReplayServer:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[str, str]] = []
        self._loop = asyncio.new_event_loop()
        self._server: Optional[asyncio.base_events.Server] = None
        self._tasks: set[asyncio.Task[None]] = set()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="replay-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        assert self._server is not None
        self.port: int = int(self._server.sockets[0].getsockname()[1])
        self.url: str = f"http://127.0.0.1:{self.port}"

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = (lines[0].split(" ") + ["", ""])[:2]
                length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                               if k.strip().lower() == "content-length"), 0)
                await reader.readexactly(length)
                self.requests.append((method, path))
                script = self.answer(method, path)
                for i, piece in enumerate(script.pieces):
                    if i and script.gap_s:
                        await asyncio.sleep(script.gap_s)
                    writer.write(piece)
                    await writer.drain()
                if script.then == "hang":
                    await asyncio.sleep(3600)
                elif script.then == "trickle":
                    while True:
                        await asyncio.sleep(script.gap_s)
                        writer.write(b"x")
                        await writer.drain()
                else:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()
            self._tasks.discard(task)

    def close(self) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.sleep(0)

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> "ReplayServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def http(status: bytes, body: bytes, *, chunked: bool = False, ctype: bytes = b"application/json",
         extra: bytes = b"") -> bytes:
    """One HTTP/1.1 response's bytes: Content-Length framing, or one chunk per SSE event with `chunked`."""
    head = b"HTTP/1.1 " + status + b"\r\nConnection: close\r\nContent-Type: " + ctype + b"\r\n" + extra
    if not chunked:
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    return head + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n" % len(e) + e + b"\r\n" for e in events) + b"0\r\n\r\n"
