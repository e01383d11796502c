"""One simulated server across nodes (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`), one process per rank.

As SGLang 0.5.23 does (docs/deployments-facts.md §3): rank 0 serves the HTTP API, and only once every other rank
has joined; a rank >= 1 runs no API, only a dummy health server on its own --port (/health and /ping answer 200
with an empty body, /metrics 200; utils/common.py:3624-3684). The rendezvous is the simulator's own (a TCP line
protocol on the dist-init port, not torch.distributed/gloo): each rank >= 1 connects and sends `rank R`, and the
connection stays open. A rank whose peer's connection is lost exits non-zero at once (SGLang's rank 0 exits within
5.4 s when rank 1 is killed); a rank 0 stopping cleanly sends `shutdown` first, and its ranks exit 0."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Optional

from aiohttp import web

from cluster.engines.sim_roles import split_host_port

log = logging.getLogger("sglbench.sim")

JOIN_TIMEOUT_S = 300.0
"""How long a rank >= 1 keeps trying to reach rank 0 before it gives up (exit 1)."""
RETRY_S = 0.2
SHUTDOWN = b"shutdown\n"


class RankGroup:
    """Rank 0's side: the other ranks' connections, watched for loss."""

    def __init__(self, nnodes: int) -> None:
        self.nnodes = nnodes
        self.peers: dict[int, asyncio.StreamWriter] = {}
        self.joined = asyncio.Event()
        self.lost: Optional[str] = None
        self._stop: Optional[asyncio.Event] = None
        self._server: Optional[asyncio.AbstractServer] = None

    async def _peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await asyncio.wait_for(reader.readline(), timeout=10.0)).decode().split()
            rank = int(line[1]) if len(line) == 2 and line[0] == "rank" else -1
        except (asyncio.TimeoutError, ValueError, UnicodeDecodeError, ConnectionError):
            rank = -1
        if not 1 <= rank < self.nnodes or rank in self.peers:
            log.warning("dist-init: refused a connection that is not a missing rank (%s)", rank)
            writer.close()
            return
        self.peers[rank] = writer
        log.info("dist-init: rank %d joined (%d of %d ranks)", rank, len(self.peers) + 1, self.nnodes)
        if len(self.peers) == self.nnodes - 1:
            self.joined.set()
        try:
            await reader.read()  # nothing is sent: EOF or an error means the rank is gone
        except ConnectionError:
            pass
        if self._stop is not None and not self._stop.is_set():
            self.lost = f"rank {rank}"
            log.error("connection to node rank %d lost: the server across %d nodes cannot go on; exiting",
                      rank, self.nnodes)
            self._stop.set()

    async def lead(self, host: str, port: int, stop: asyncio.Event) -> Optional[str]:
        """Listen on the dist-init address and wait until every other rank joined (or stop); the error if not."""
        self._stop = stop
        try:
            self._server = await asyncio.start_server(self._peer, host, port)
        except OSError as e:
            return f"cannot listen on --dist-init-addr {host}:{port}: {e.strerror or e}"
        log.info("dist-init: rank 0 of %d listening on %s:%d", self.nnodes, host, port)
        waiters = [asyncio.ensure_future(self.joined.wait()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
        return None

    async def close(self) -> None:
        """Stop: tell each rank (unless one was lost), close the connections and the listener."""
        for writer in self.peers.values():
            try:
                if self.lost is None:
                    writer.write(SHUTDOWN)
                    await writer.drain()
                writer.close()
            except ConnectionError:
                pass
        if self._server is not None:
            self._server.close()


async def lead_ranks(nnodes: int, dist_init_addr: Optional[str],
                     stop: asyncio.Event) -> tuple[Optional[RankGroup], Optional[str]]:
    """Rank 0 of a multi-node server: its group once every rank joined (None for one node), or the error."""
    if nnodes <= 1:
        return None, None
    addr = split_host_port(str(dist_init_addr))
    assert addr is not None  # resolve_args refused it otherwise
    group = RankGroup(nnodes)
    return group, await group.lead(addr[0], addr[1], stop)


async def _empty(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _no_metrics(request: web.Request) -> web.Response:
    return web.Response(text="", content_type="text/plain")


def _dummy_app(enable_metrics: bool) -> web.Application:
    app = web.Application()
    for path in ("/health", "/ping"):
        app.router.add_get(path, _empty)
    if enable_metrics:
        app.router.add_get("/metrics", _no_metrics)
    return app


async def follow(rank: int, nnodes: int, host: str, port: int, dist_init_addr: Optional[str],
                 enable_metrics: bool) -> int:
    """A rank >= 1: join rank 0, serve the dummy health server, exit when rank 0 stops (0) or is lost (1)."""
    import signal

    addr = split_host_port(str(dist_init_addr))
    assert addr is not None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        try:
            reader, writer = await asyncio.open_connection(*addr)
            break
        except OSError as e:
            if stop.is_set():
                return 0
            if time.monotonic() > deadline:
                print(f"error: rank {rank} could not reach rank 0 at {addr[0]}:{addr[1]} within {JOIN_TIMEOUT_S:.0f} "
                      f"s: {e.strerror or e}", file=sys.stderr, flush=True)
                return 1
            await asyncio.sleep(RETRY_S)
    writer.write(f"rank {rank}\n".encode())
    await writer.drain()
    runner = web.AppRunner(_dummy_app(enable_metrics), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as e:
        print(f"error: cannot bind {host}:{port}: {e.strerror or e}", file=sys.stderr, flush=True)
        await runner.cleanup()
        return 1
    log.info("Dummy health check server started in background thread at %s:%d (node rank %d of %d, simulated)",
             host, port, rank, nnodes)
    leader = asyncio.ensure_future(reader.readline())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([leader, stopped], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if not stop.is_set():
        try:
            line = leader.result()
        except ConnectionError:
            line = b""
        if line != SHUTDOWN:
            log.error("connection to node rank 0 lost: exiting")
            code = 1
    for task in (leader, stopped):
        task.cancel()
    writer.close()
    await runner.cleanup()
    return code
