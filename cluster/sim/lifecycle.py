"""The simulated server's state, its scheduler loop and each request's lifecycle (submit, stream or wait, finish)."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import sys
import time
import uuid
from typing import Any, Optional, Sequence

from aiohttp import web

from cluster.input_files import JsonValue
from cluster.sim.device import SimDevice
from cluster.sim.disagg import pd_role
from cluster.sim.profiler import SimProfiler
from cluster.config.secrets import redact_argv
from cluster.sim.model import Scheduler, SimRequest, effective_max_running_requests
from cluster.engines.sim_launch import SpecParams
from cluster.config.sim_knobs import Knobs
from cluster.sim.wire import ChunkWriter
from cluster.sim.prometheus import StreamingCounts
from cluster.sim.pacer import Pacer

log = logging.getLogger("sglbench.sim")


def error_response(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.json_response(body, status=status)


class SimServer:
    """The scheduler loop, the fault knobs and the requests in flight, which the endpoints read and drive."""

    def __init__(self, args: dict[str, Any], spec: Optional[SpecParams], knobs: Knobs,
                 unmodelled: list[str], argv: Sequence[str]) -> None:
        self.args = args
        self.spec = spec
        self.knobs = knobs
        self.unmodelled = redact_argv(unmodelled)
        self.launch_command = shlex.join([sys.executable, "-m", "cluster.sim.server", *redact_argv(argv)])
        self.sched = Scheduler(knobs, effective_max_running_requests(args["max_running_requests"], knobs), spec)
        self.state = "starting"
        self.started_wall = time.time()
        self.startup_time_s = 0.0
        self.completed = 0
        self.last_gen_throughput = 0.0
        self._wake = asyncio.Event()
        self._loop_task: Optional[asyncio.Task[None]] = None
        self.streaming = StreamingCounts()
        self.created = int(time.time())
        self.pacer = Pacer.from_knobs(knobs.fixed_ttft_ms, knobs.fixed_itl_ms)
        # the GPUs this process holds: its share of tp when one server spans nodes (one process per node)
        local_tp = max(1, int(args.get("tp_size") or 1) // int(args.get("nnodes") or 1))
        self.device = SimDevice(knobs, local_tp)
        self.profiler = SimProfiler(local_tp)
        self.pd = pd_role(str(args["disaggregation_mode"]), str(args["disaggregation_transfer_backend"]),
                          str(args["host"]), int(args["disaggregation_bootstrap_port"]), knobs)
        """Its prefill/decode role (--disaggregation-mode), or None for a unified server."""

    # ---- scheduler loop -------------------------------------------------------------------------------------
    async def run_scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        scale = self.knobs.time_scale
        next_t = loop.time()
        mark_t, mark_tok, steps = loop.time(), 0, 0
        c = self.sched.counters
        while True:
            dt_ms = self.sched.plan_step()
            if dt_ms is None:
                self._wake.clear()
                await self._wake.wait()
                next_t = loop.time()
                continue
            batch = len(self.sched.running)
            delay_s = dt_ms / 1000.0 * scale * self.device.slowdown(batch)  # a throttled device runs slower
            now = loop.time()
            next_t = max(next_t + delay_s, now)
            self.device.begin_step(batch)
            step_start = time.time()
            await asyncio.sleep(next_t - now if next_t > now else 0)
            self.device.end_step()
            self.profiler.on_step(step_start, time.time() - step_start, batch)
            for req in self.sched.commit_step():
                if req.on_progress is not None:
                    req.on_progress()
            steps += 1
            if steps >= self.knobs.decode_log_interval:
                now = loop.time()
                tok = c.generation_tokens_total
                self.last_gen_throughput = (tok - mark_tok) / max(now - mark_t, 1e-9)
                acc = c.last_interval_accept_length
                log.info("Decode batch, #running-req: %d, #token: %d, %sgen throughput (token/s): %.2f, #queue-req: %d",
                         len(self.sched.running), self.sched.tokens_in_use(),
                         f"accept len: {acc:.2f}, " if acc is not None else "",
                         self.last_gen_throughput, len(self.sched.waiting))
                mark_t, mark_tok, steps = now, tok, 0

    def start_loop(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self.run_scheduler())

    async def stop_loop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass

    def healthy(self) -> bool:
        return self.state == "ready" and self._loop_task is not None and not self._loop_task.done()

    # ---- a request's lifecycle -----------------------------------------------------------------------------------
    def submit(self, input_ids: Optional[list[int]], text: Optional[str], max_new: int, ignore_eos: bool,
               rid: Optional[str], category: Optional[str] = None,
               setting: Optional[str] = None) -> tuple[SimRequest, asyncio.Event]:
        req = self.sched.new_request(rid or uuid.uuid4().hex, input_ids, text, max_new, ignore_eos, category,
                                     setting)
        ev = asyncio.Event()
        req.on_progress = ev.set
        self.sched.submit(req)
        if req.finished:
            ev.set()
        self._wake.set()
        return req, ev

    def on_finished(self) -> None:
        self.completed += 1
        n = self.knobs.crash_after_requests
        if n is not None and self.completed >= n:
            log.error("simulated crash after %d completed requests (knob crash_after_requests)", self.completed)
            asyncio.get_running_loop().call_later(0.05, os._exit, 1)

    async def _stream(self, request: web.Request, req: SimRequest, ev: asyncio.Event, writer: ChunkWriter,
                      interval: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        sent = 0
        try:
            for head in writer.head():
                await resp.write(head)
            while True:
                await ev.wait()
                ev.clear()
                n, fin = req.generated, req.finished
                # SGLang sends the first token at once, then whenever `interval` tokens are unsent
                if not fin and n - sent < interval and not (sent == 0 and n > 0):
                    continue
                await resp.write(writer.chunk(sent, n, fin))
                sent = n
                if fin:
                    break
            for tail in writer.tail():
                await resp.write(tail)
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.sched.abort(req)
            raise
        self.on_finished()
        return resp

    async def stream_fixed(self, request: web.Request, rid: Optional[str], ids: Optional[list[int]],
                           text: Optional[str], max_new: int, ignore_eos: bool, t_recv_ns: int) -> web.StreamResponse:
        """Fixed-latency mode: the step model is bypassed; each token is its own chunk, written when due."""
        pacer = self.pacer
        assert pacer is not None
        # let every other request that arrived in the same burst take its receipt time before this one's set-up
        # (output ids, writer): that work runs inside the TTFT, not between the client's send and the receipt
        await asyncio.sleep(0)
        req = self.sched.new_request(rid or uuid.uuid4().hex, ids, text, max_new, ignore_eos)
        writer = self.chunk_writer(req, "native")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(b"")  # puts the buffered status line and headers on the wire now
        transport = request.transport
        if transport is None or transport.is_closing():
            return resp
        # aiohttp already sets TCP_NODELAY on accepted connections; the pacer writes framed chunks itself
        chunked = resp.headers.get("Transfer-Encoding", "").lower() == "chunked"
        n = await pacer.stream(transport, chunked, writer, req, t_recv_ns, list((ids or [])[:8]))
        self.streaming.add(req, n)
        self.on_finished()
        return resp

    def chunk_writer(self, req: SimRequest, api: str, **kw: Any) -> ChunkWriter:
        return ChunkWriter(req, time.monotonic(), time.monotonic, api=api, spec=self.spec, created=int(time.time()),
                           incremental=api == "native" and bool(self.args["incremental_streaming_output"]),
                           enable_metrics=bool(self.args["enable_metrics"]),
                           epoch_offset_s=time.time() - time.monotonic(), **kw)

    async def wait_finished(self, req: SimRequest, ev: asyncio.Event, writer: Optional[ChunkWriter] = None) -> None:
        while not req.finished:
            await ev.wait()
            ev.clear()
            if writer is not None:
                writer.note_progress()

    async def respond(self, request: web.Request, req: SimRequest, ev: asyncio.Event, writer: ChunkWriter,
                      stream: bool) -> web.StreamResponse:
        """Stream the request's chunks, or wait for it to finish and answer with one JSON object."""
        if stream:
            resp = await self._stream(request, req, ev, writer, int(self.args["stream_interval"]))
            self.streaming.add(req, req.generated)
            return resp
        await self.wait_finished(req, ev, writer)
        self.on_finished()
        return web.json_response(writer.final_object())

    async def generate_one(self, ids: Optional[list[int]], text: Optional[str], max_new: int, ignore_eos: bool,
                           rid: Optional[str]) -> dict[str, JsonValue]:
        req, ev = self.submit(ids, text, max_new, ignore_eos, rid)
        writer = self.chunk_writer(req, "native")
        await self.wait_finished(req, ev, writer)
        self.on_finished()
        return writer.final_object()
