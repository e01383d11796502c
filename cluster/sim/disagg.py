"""A simulated prefill or decode server (`--disaggregation-mode`): SGLang 0.5.23's request fields, refusals and
per-stage series, with a bootstrap of the simulator's own (loopback HTTP, not mooncake's protocol).

The wire, per request, as SGLang's gateway (smg, PD mode) drives it: the same JSON body goes to the prefill and the
decode server, each carrying `bootstrap_host`, `bootstrap_port` (the prefill's bootstrap port) and `bootstrap_room`
(a random integer naming the request's KV). Then:
- decode: POST `/sim_bootstrap/<room>/register` to the prefill's bootstrap listener (the handshake), long-poll
  GET `/sim_bootstrap/<room>/kv` until the prefill published the room's KV, sleep the simulated transfer
  (`kv_bytes / kv_transfer_gb_s`), POST `/sim_bootstrap/<room>/received`, then decode and answer as usual;
- prefill: wait for the decode's handshake on that room, run the prefill (one token) through its scheduler, publish
  the room's KV, wait for the decode's `received`, then answer with its one token (the gateway discards that body).
A request without `bootstrap_room` gets SGLang's 400; `bootstrap_host` 2.2.2.2 (SGLang's FAKE_BOOTSTRAP_HOST, its
own warmup and health probes) skips the handshake and transfer. Deadlines: SGLang's env
SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT and SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s each by default)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import aiohttp
from aiohttp import web

from cluster.config.sim_knobs import Knobs
from cluster.errors import EngineFault
from cluster.input_files import JsonObject
from cluster.sim.pd_metrics import PdMetrics

log = logging.getLogger("sglbench.sim")

FAKE_BOOTSTRAP_HOST = "2.2.2.2"
"""SGLang 0.5.23's disaggregation/utils.py:53: a request naming it skips the bootstrap and the transfer."""
BOOTSTRAP_PATH = "/sim_bootstrap"
BOOTSTRAP_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
WAITING_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
TIMEOUT_DEFAULT_S = 300.0


class PdError(EngineFault):
    """A PD request SGLang would refuse (400) or fail (500), with its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _env_seconds(name: str) -> float:
    raw = os.environ.get(name)
    try:
        return float(raw) if raw else TIMEOUT_DEFAULT_S
    except ValueError:
        return TIMEOUT_DEFAULT_S


@dataclass
class Room:
    """One bootstrap room on the prefill's board: the decode's handshake, the KV published, the decode's receipt."""

    registered: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    received: asyncio.Event = field(default_factory=asyncio.Event)
    kv_bytes: int = 0
    failure: Optional[str] = None


class PdRole:
    """One simulated PD server's role: its bootstrap listener (prefill), its client (decode) and its series."""

    def __init__(self, mode: str, backend: str, host: str, bootstrap_port: int, knobs: Knobs) -> None:
        self.mode = mode
        self.backend = backend
        self.host = host
        self.bootstrap_port = bootstrap_port
        self.knobs = knobs
        self.metrics = PdMetrics(mode)
        self.rooms: dict[int, Room] = {}
        self.bootstrap_timeout_s = _env_seconds(BOOTSTRAP_TIMEOUT_ENV)
        self.waiting_timeout_s = _env_seconds(WAITING_TIMEOUT_ENV)
        self._runner: Optional[web.AppRunner] = None
        self._client: Optional[aiohttp.ClientSession] = None

    @property
    def prefill(self) -> bool:
        return self.mode == "prefill"

    # ---- the process: the prefill's bootstrap listener -------------------------------------------------------------
    async def start(self) -> Optional[str]:
        """Prefill: bind the bootstrap listener (the error when it cannot); decode: nothing to start."""
        if not self.prefill:
            return None
        app = web.Application()
        app.router.add_get("/health", _ok)
        app.router.add_post(BOOTSTRAP_PATH + "/{room}/register", self._register)
        app.router.add_get(BOOTSTRAP_PATH + "/{room}/kv", self._kv)
        app.router.add_post(BOOTSTRAP_PATH + "/{room}/received", self._received)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self.host, self.bootstrap_port).start()
        except OSError as e:
            return f"cannot bind the bootstrap port {self.host}:{self.bootstrap_port}: {e.strerror or e}"
        log.info("simulated PD bootstrap listener (the simulator's own protocol, not %s's) on %s:%d",
                 self.backend, self.host, self.bootstrap_port)
        return None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _room(self, request: web.Request) -> tuple[int, Room]:
        try:
            room_id = int(request.match_info["room"])
        except ValueError:
            raise web.HTTPBadRequest(text="room must be an integer") from None
        return room_id, self.rooms.setdefault(room_id, Room())

    async def _register(self, request: web.Request) -> web.Response:
        _, room = self._room(request)
        room.registered.set()
        return await _ok()

    async def _kv(self, request: web.Request) -> web.Response:
        """Long poll: 200 {"kv_bytes"} once the room's KV is published, 409 when its prefill failed, 504 past the
        waiting deadline."""
        room_id, room = self._room(request)
        try:
            await asyncio.wait_for(room.ready.wait(), timeout=self.waiting_timeout_s)
        except asyncio.TimeoutError:
            self.rooms.pop(room_id, None)
            return web.json_response({"error": f"Request {room_id} timed out after {self.waiting_timeout_s:.1f}s "
                                               "waiting for the prefill's KV"}, status=504)
        if room.failure is not None:
            return web.json_response({"error": room.failure}, status=409)
        return web.json_response({"kv_bytes": room.kv_bytes})

    async def _received(self, request: web.Request) -> web.Response:
        _, room = self._room(request)
        room.received.set()
        return await _ok()

    # ---- one request ---------------------------------------------------------------------------------------------
    def ticket(self, body: JsonObject, rid: str) -> "Ticket":
        """The request's bootstrap fields read as SGLang reads them; PdError(400) without a room (managers/
        scheduler.py:3048-3065, its wording), or, as the simulator's own rule, without the prefill's address."""
        room, host, port = body.get("bootstrap_room"), body.get("bootstrap_host"), body.get("bootstrap_port")
        fake = host == FAKE_BOOTSTRAP_HOST or (host is None and self.backend == "fake")
        if room is None and not (self.backend == "fake" and not self.prefill):
            raise PdError(400, "Invalid request: Disaggregated request received without bootstrap room id. "
                               f"req.rid={rid!r}")
        if room is not None and (not isinstance(room, int) or isinstance(room, bool)):
            raise PdError(400, f"bootstrap_room must be an integer, got {room!r}")
        if not fake and not self.prefill and (not isinstance(host, str) or not isinstance(port, int)):
            raise PdError(400, "the simulated decode server needs bootstrap_host and bootstrap_port (the prefill's "
                               f"bootstrap listener) with bootstrap_room, got {host!r}:{port!r}")
        return Ticket(self, room if isinstance(room, int) else 0, str(host or ""),
                      port if isinstance(port, int) else 0, fake)

    def client(self) -> aiohttp.ClientSession:
        if self._client is None:  # no connection cap: each request in flight holds one long poll
            self._client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._client


@dataclass
class Ticket:
    """One PD request's passage through its role: the stage times it records and the waits it does."""

    role: PdRole
    room: int
    host: str
    port: int
    fake: bool
    t0: float = field(default_factory=time.perf_counter)
    t_mark: float = 0.0
    first_token_s: Optional[float] = None

    def _stage(self, name: str, until: float) -> None:
        self.role.metrics.stage(name, until - self.t_mark)
        self.t_mark = until

    async def before_submit(self) -> None:
        """Decode: handshake, wait for the KV and transfer it; prefill: wait for the decode's handshake."""
        self.t_mark = self.t0
        if self.role.prefill:
            await self._prefill_bootstrap()
        else:
            await self._decode_transfer()

    async def _prefill_bootstrap(self) -> None:
        if not self.fake:
            room = self.role.rooms.setdefault(self.room, Room())
            try:
                await asyncio.wait_for(room.registered.wait(), timeout=self.role.bootstrap_timeout_s)
            except asyncio.TimeoutError:
                self.role.rooms.pop(self.room, None)
                raise PdError(500, f"Prefill transfer failed for request bootstrap_room={self.room} with exception "
                                   f"Request {self.room} timed out after {self.role.bootstrap_timeout_s:.1f}s in "
                                   "KVPoll.Bootstrapping (no decode server registered the room)") from None
            self.role.metrics.bootstrap_ms.observe((time.perf_counter() - self.t0) * 1000.0)
        self._stage("prefill_bootstrap", time.perf_counter())

    async def _decode_transfer(self) -> None:
        if self.fake:
            self._stage("decode_bootstrap", time.perf_counter())
            self._stage("decode_transferred", time.perf_counter())
            return
        where = f"{self.host}:{self.port}"
        url = f"http://{where}{BOOTSTRAP_PATH}/{self.room}"
        client = self.role.client()
        try:
            async with client.post(url + "/register", timeout=aiohttp.ClientTimeout(
                    total=self.role.bootstrap_timeout_s)) as r:
                r.raise_for_status()
            self.role.metrics.bootstrap_ms.observe((time.perf_counter() - self.t0) * 1000.0)
            self._stage("decode_bootstrap", time.perf_counter())
            async with client.get(url + "/kv", timeout=aiohttp.ClientTimeout(
                    total=self.role.waiting_timeout_s + 5.0)) as r:
                doc = await r.json()
                if r.status != 200:
                    raise PdError(500, f"KV transfer failed for bootstrap_room={self.room} from the prefill at "
                                       f"{where}: {doc.get('error')}")
            seconds = int(doc["kv_bytes"]) / (self.role.knobs.kv_transfer_gb_s * 1e9)
            await asyncio.sleep(seconds * self.role.knobs.time_scale)
            async with client.post(url + "/received") as r:
                r.raise_for_status()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise PdError(500, f"KV transfer failed for bootstrap_room={self.room}: the prefill's bootstrap "
                               f"listener at {where} is gone or unreachable ({type(e).__name__}: {e})") from None
        self._stage("decode_transferred", time.perf_counter())

    def watch(self, on_progress: Optional[Callable[[], None]], generated: Callable[[], int]) -> Callable[[], None]:
        """A progress callback that also records when the request's first token came out of the scheduler."""
        def progress() -> None:
            if self.first_token_s is None and generated() > 0:
                self.first_token_s = time.perf_counter()
                self._stage("prefill_forward" if self.role.prefill else "decode_waiting", self.first_token_s)
            if on_progress is not None:
                on_progress()
        return progress

    async def hand_off(self, prompt_tokens: int) -> None:
        """Prefill, after its forward: publish the room's KV and wait until the decode received it."""
        if self.fake:
            self._stage("prefill_transfer_kv_cache", time.perf_counter())
            return
        role = self.role
        room = role.rooms.setdefault(self.room, Room())
        room.kv_bytes = prompt_tokens * role.knobs.kv_bytes_per_token
        room.ready.set()
        t_send = time.perf_counter()
        try:
            await asyncio.wait_for(room.received.wait(), timeout=role.waiting_timeout_s)
        except asyncio.TimeoutError:
            raise PdError(500, f"Prefill transfer failed for request bootstrap_room={self.room} with exception "
                               f"Request {self.room} timed out after {role.waiting_timeout_s:.1f}s waiting for the "
                               "decode server to receive the KV") from None
        finally:
            role.rooms.pop(self.room, None)
        now = time.perf_counter()
        role.metrics.transfer_latency_ms.observe((now - t_send) * 1000.0)
        self._stage("prefill_transfer_kv_cache", now)


def pd_role(mode: str, backend: str, host: str, bootstrap_port: int, knobs: Knobs) -> Optional[PdRole]:
    """The server's PD role (None for a unified server, mode "null")."""
    return None if mode == "null" else PdRole(mode, backend, host, bootstrap_port, knobs)


async def _ok(request: Optional[web.Request] = None) -> web.Response:
    return web.Response(status=200)
