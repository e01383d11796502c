"""Simulated SGLang 0.5.23 server: SGLang's argv and HTTP wire format over the step model in `sim_model.py`.

Run as `python -m cluster.sim.server <SGLang server argv>`; knobs come as JSON in env SGLBENCH_SIM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shlex
import signal
import sys
import time
import uuid
from dataclasses import asdict
from typing import Any, Awaitable, Callable, Optional, Sequence

from aiohttp import web

from cluster.engines.base import CATEGORY_HEADER
from cluster.sim import tuning as sim_tuning
from cluster.sim.device import SimDevice
from cluster.sim.profiler import SimProfiler
from cluster.engines.sglang_flags import unrecognized
from cluster.input_files import JsonValue
from cluster.config.secrets import redact_argv
from cluster.sim.model import Scheduler, SimRequest, effective_max_running_requests
from cluster.engines.sim_launch import LaunchError, SpecParams, build_parser, resolve_args
from cluster.config.sim_knobs import Knobs, KnobError
from cluster.sim.wire import ChunkWriter
from cluster.sim.prometheus import StreamingCounts, metrics_text
from cluster.sim.pacer import Pacer, fine_timer_slack
from cluster.version import SGLANG_RELEASE

VERSION = SGLANG_RELEASE
SIM_ENV = "SGLBENCH_SIM"
READY_LINE = "The server is fired up and ready to roll!"
NATIVE_MAX_NEW_TOKENS_DEFAULT = 128
COMPLETIONS_MAX_TOKENS_DEFAULT = 16

log = logging.getLogger("sglbench.sim")


def _err(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.json_response(body, status=status)


class SimServer:
    """HTTP handlers, the scheduler loop and the fault knobs."""

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
        self._streaming = StreamingCounts()
        self._created = int(time.time())
        self.pacer = Pacer.from_knobs(knobs.fixed_ttft_ms, knobs.fixed_itl_ms)
        self.device = SimDevice(knobs, int(args.get("tp_size") or 1))
        self.profiler = SimProfiler(int(args.get("tp_size") or 1))

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

    def _healthy(self) -> bool:
        return self.state == "ready" and self._loop_task is not None and not self._loop_task.done()

    # ---- request plumbing -----------------------------------------------------------------------------------
    def _submit(self, input_ids: Optional[list[int]], text: Optional[str], max_new: int, ignore_eos: bool,
                rid: Optional[str], category: Optional[str] = None) -> tuple[SimRequest, asyncio.Event]:
        req = self.sched.new_request(rid or uuid.uuid4().hex, input_ids, text, max_new, ignore_eos, category)
        ev = asyncio.Event()
        req.on_progress = ev.set
        self.sched.submit(req)
        if req.finished:
            ev.set()
        self._wake.set()
        return req, ev

    def _on_finished(self) -> None:
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
        self._on_finished()
        return resp

    async def _stream_fixed(self, request: web.Request, body: dict[str, Any], ids: Optional[list[int]],
                            text: Optional[str], max_new: int, ignore_eos: bool, t_recv_ns: int) -> web.StreamResponse:
        """Fixed-latency mode: the step model is bypassed; each token is its own chunk, written when due."""
        pacer = self.pacer
        assert pacer is not None
        # let every other request that arrived in the same burst take its receipt time before this one's set-up
        # (output ids, writer): that work runs inside the TTFT, not between the client's send and the receipt
        await asyncio.sleep(0)
        req = self.sched.new_request(body.get("rid") or uuid.uuid4().hex, ids, text, max_new, ignore_eos)
        writer = self._writer(req, "native")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(b"")  # puts the buffered status line and headers on the wire now
        transport = request.transport
        if transport is None or transport.is_closing():
            return resp
        # aiohttp already sets TCP_NODELAY on accepted connections; the pacer writes framed chunks itself
        chunked = resp.headers.get("Transfer-Encoding", "").lower() == "chunked"
        n = await pacer.stream(transport, chunked, writer, req, t_recv_ns, list((ids or [])[:8]))
        self._streaming.add(req, n)
        self._on_finished()
        return resp

    async def sim_pacing(self, request: web.Request) -> web.Response:
        """The fixed-latency pacer's own write lateness since start or the last /flush_cache (sim only).

        With `?requests=1`, also each finished stream's rid, first prompt ids, receipt and write times (monotonic
        ns, the same clock as any client on this machine)."""
        if self.pacer is None:
            return web.json_response({"writes": 0, "fixed": False})
        out = self.pacer.stats()
        if request.query.get("requests") in ("1", "true"):
            out["requests"] = self.pacer.request_log()
        return web.json_response(out)

    def _writer(self, req: SimRequest, api: str, **kw: Any) -> ChunkWriter:
        return ChunkWriter(req, time.monotonic(), time.monotonic, api=api, spec=self.spec, created=int(time.time()),
                           incremental=api == "native" and bool(self.args["incremental_streaming_output"]),
                           enable_metrics=bool(self.args["enable_metrics"]),
                           epoch_offset_s=time.time() - time.monotonic(), **kw)

    async def _wait(self, req: SimRequest, ev: asyncio.Event, writer: Optional[ChunkWriter] = None) -> None:
        while not req.finished:
            await ev.wait()
            ev.clear()
            if writer is not None:
                writer.note_progress()

    # ---- endpoints ------------------------------------------------------------------------------------------
    async def sim_device(self, request: web.Request) -> web.Response:
        """The simulated device's readings (sim only: what NVML would report for each of the server's GPUs)."""
        return web.json_response({"source": "sim", "gpus": [asdict(r) for r in self.device.read()]})

    async def start_profile(self, request: web.Request) -> web.Response:
        """SGLang 0.5.23's /start_profile (body: io_struct.ProfileReq fields; an empty body starts with defaults)."""
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return _err(400, "start_profile body must be JSON")
        err = self.profiler.start(body if isinstance(body, dict) else {})
        if err:  # SGLang raises RuntimeError(message) in the handler: a 500
            return web.Response(status=500, text=err)
        return web.Response(text="Start profiling.\n")

    async def stop_profile(self, request: web.Request) -> web.Response:
        err = self.profiler.stop()
        if err:  # SGLang 0.5.23 raises RuntimeError(message): its body is only "Internal Server Error" (measured)
            log.error("stop_profile: %s", err)
            return web.Response(status=500, text="Internal Server Error")
        return web.Response(text="Stop profiling. This will take some time.\n")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self._healthy() else 503)

    async def model_info(self, request: web.Request) -> web.Response:
        a = self.args
        return web.json_response({
            "model_path": a["model_path"], "served_model_name": a["served_model_name"],
            "tokenizer_path": a["tokenizer_path"], "is_generation": True, "preferred_sampling_params": None,
            "weight_version": "default", "load_format": "auto", "reasoning_parser": None, "tool_call_parser": None,
            "disaggregation_mode": "null", "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": "sim", "architectures": ["SimulatedForCausalLM"],
        })

    def internal_state(self) -> dict[str, JsonValue]:
        st: dict[str, JsonValue] = dict(self.args)
        st.update(world_size=self.args["tp_size"], effective_max_running_requests_per_dp=self.sched.max_running,
                  last_gen_throughput=self.last_gen_throughput,
                  memory_usage={"weight": 0.0, "kvcache": 0.0, "graph": 0.0, "token_capacity": self.knobs.max_total_num_tokens})
        acc = self.sched.avg_spec_accept_length()
        if acc is not None:
            st["avg_spec_accept_length"] = acc
        return st

    async def server_info(self, request: web.Request) -> web.Response:
        info = dict(self.args)
        info.update(launch_command=self.launch_command, max_total_num_tokens=self.knobs.max_total_num_tokens,
                    max_req_input_len=self.knobs.context_length - 1, kv_events=None,
                    startup_time=self.startup_time_s, version=VERSION, frontend="python",
                    unmodelled_args=self.unmodelled, sim=True, sim_knobs=_knobs_json(self.knobs),
                    internal_states=[self.internal_state()])
        return web.json_response(info)

    async def models(self, request: web.Request) -> web.Response:
        name = self.args["served_model_name"]
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": self._created, "owned_by": "sglang", "root": name,
            "max_model_len": self.knobs.context_length}]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        try:
            timeout_s = float(request.query.get("timeout", "0"))
        except ValueError:
            return web.Response(status=400, text="timeout must be a number of seconds")
        deadline = time.monotonic() + timeout_s
        while self.sched.busy and time.monotonic() < deadline:
            await asyncio.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        if self.sched.busy:
            log.warning("Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d",
                        len(self.sched.waiting), len(self.sched.running))
            return web.Response(status=400, text="Flush cache failed.\n")  # SGLang 0.5.23's body (recorded)
        self.sched.flush()
        if self.pacer is not None:
            self.pacer.reset()
        log.info("Cache flushed successfully.")
        return web.Response(status=200, text="Cache flushed.\nPlease check backend logs for more details. (When there "
                                             "are running or waiting requests, the operation will not be performed.)\n")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics_text(), content_type="text/plain")

    def metrics_text(self) -> str:
        return metrics_text(self.sched, self.spec, str(self.args["served_model_name"]), self.last_gen_throughput,
                            self._streaming, self.knobs.max_total_num_tokens)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        t_recv_ns = time.monotonic_ns()
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
            sp = body.get("sampling_params") or {}
            max_new = int(sp.get("max_new_tokens", NATIVE_MAX_NEW_TOKENS_DEFAULT))
            ignore_eos = bool(sp.get("ignore_eos", False))
            text, ids = body.get("text"), body.get("input_ids")
            if text is None and ids is None:
                raise ValueError("either text or input_ids should be provided")
        except (ValueError, TypeError) as e:
            return _err(400, str(e))
        stream = bool(body.get("stream", False))
        if max_new < 0:
            # SGLang's SamplingParams.verify raises a ValueError: a 400 body, or an error event on a stream
            return await self._request_error(request, f"max_new_tokens must be at least 0, got {max_new}.", stream)
        batch = isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list))
        if batch:
            if stream:
                return _err(400, "the simulated engine streams only single prompts")
            prompts: list[tuple[Optional[list[int]], Optional[str]]] = (
                [(None, t) for t in text] if isinstance(text, list) else [(list(i), None) for i in ids or []])
            return web.json_response([await self._generate_one(p_ids, p_text, max_new, ignore_eos, None)
                                      for p_ids, p_text in prompts])
        if stream and self.pacer is not None:
            return await self._stream_fixed(request, body, list(ids) if ids is not None else None, text, max_new,
                                            ignore_eos, t_recv_ns)
        req, ev = self._submit(list(ids) if ids is not None else None, text, max_new, ignore_eos, body.get("rid"),
                               request.headers.get(CATEGORY_HEADER))
        return await self._respond(request, req, ev, self._writer(req, "native"), stream)

    async def _request_error(self, request: web.Request, message: str, stream: bool) -> web.StreamResponse:
        """A ValueError inside SGLang's /generate: 400 {"error": {"message"}}; when streaming, 200 with one error
        event (message, type, code, retryable) and [DONE] (http_server.serve_generate_request)."""
        if not stream:
            return web.json_response({"error": {"message": message}}, status=400)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        err = {"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}}
        await resp.write(b"data: " + json.dumps(err, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    async def _respond(self, request: web.Request, req: SimRequest, ev: asyncio.Event, writer: ChunkWriter,
                       stream: bool) -> web.StreamResponse:
        """Stream the request's chunks, or wait for it to finish and answer with one JSON object."""
        if stream:
            resp = await self._stream(request, req, ev, writer, int(self.args["stream_interval"]))
            self._streaming.add(req, req.generated)
            return resp
        await self._wait(req, ev, writer)
        self._on_finished()
        return web.json_response(writer.final_object())

    async def _generate_one(self, ids: Optional[list[int]], text: Optional[str], max_new: int, ignore_eos: bool,
                            rid: Optional[str]) -> dict[str, Any]:
        req, ev = self._submit(ids, text, max_new, ignore_eos, rid)
        writer = self._writer(req, "native")
        await self._wait(req, ev, writer)
        self._on_finished()
        return writer.final_object()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def _openai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
            ids: Optional[list[int]] = None
            text: Optional[str] = None
            if chat:
                msgs = body.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    raise ValueError("messages must be a non-empty list")
                text = "\n".join(_content_text(m.get("content")) for m in msgs if isinstance(m, dict))
                default_max = NATIVE_MAX_NEW_TOKENS_DEFAULT
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, str):
                    text = prompt
                elif isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
                    ids = prompt
                else:
                    raise ValueError("prompt must be a string or a list of token ids")
                default_max = COMPLETIONS_MAX_TOKENS_DEFAULT
            max_new = body.get("max_completion_tokens") or body.get("max_tokens") or default_max
            max_new = int(max_new)
        except (ValueError, TypeError, AttributeError) as e:
            return _err(400, str(e))
        req, ev = self._submit(ids, text, max_new, bool(body.get("ignore_eos", False)), body.get("rid"),
                               request.headers.get(CATEGORY_HEADER))
        opts = body.get("stream_options") or {}
        writer = self._writer(
            req, "chat" if chat else "completions", model=str(body.get("model") or self.args["served_model_name"]),
            include_usage=bool(opts.get("include_usage")), continuous_usage=bool(opts.get("continuous_usage_stats")),
            spec_details=bool(body.get("return_spec_tokens_details")))
        return await self._respond(request, req, ev, writer, bool(body.get("stream")))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _knobs_json(knobs: Knobs) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(knobs).items()}


AUTH_EXEMPT_PREFIXES = ("/health", "/ready", "/metrics")
"""Paths SGLang 0.5.23 serves without the API key (sglang/srt/utils/auth.py decide_request_auth: k8s probes and
Prometheus scraping); every other path needs `Authorization: Bearer <api-key>` when --api-key is set."""


def api_key_middleware(api_key: str) -> Any:
    """SGLang's --api-key check: 401 {"error": "Unauthorized"} without the right bearer token (OPTIONS allowed)."""

    @web.middleware
    async def check(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.method == "OPTIONS" or request.path.startswith(AUTH_EXEMPT_PREFIXES):
            return await handler(request)
        scheme, _, token = (request.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.encode(), api_key.encode()):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


def build_app(server: SimServer) -> web.Application:
    key = server.args.get("api_key")
    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[api_key_middleware(key)] if key else [])
    r = app.router
    for path in ("/health", "/health_generate"):
        r.add_get(path, server.health)
    for path in ("/model_info", "/get_model_info"):
        r.add_get(path, server.model_info)
    for path in ("/server_info", "/get_server_info"):
        r.add_get(path, server.server_info)
    r.add_get("/v1/models", server.models)
    r.add_get("/sim_pacing", server.sim_pacing)
    r.add_get("/sim_device", server.sim_device)
    for method in ("GET", "POST"):
        r.add_route(method, "/start_profile", server.start_profile)
        r.add_route(method, "/stop_profile", server.stop_profile)
    r.add_route("GET", "/flush_cache", server.flush_cache)
    r.add_route("POST", "/flush_cache", server.flush_cache)
    r.add_post("/generate", server.generate)
    r.add_post("/v1/completions", server.completions)
    r.add_post("/v1/chat/completions", server.chat_completions)
    if server.args["enable_metrics"]:
        r.add_get("/metrics", server.metrics)
    return app


async def serve(server: SimServer) -> int:
    """Bind, become healthy after start_delay_s, serve until SIGTERM/SIGINT; return the exit code."""
    t0 = time.monotonic()
    runner = web.AppRunner(build_app(server), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    host, port = server.args["host"], int(server.args["port"])
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        print(f"error: cannot bind {host}:{port}: {e.strerror or e}", file=sys.stderr, flush=True)
        await runner.cleanup()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("simulated SGLang %s listening on http://%s:%d (knobs: %s)", VERSION, host, port,
             json.dumps(_knobs_json(server.knobs), sort_keys=True))
    server.start_loop()
    if server.knobs.start_delay_s > 0:
        try:
            await asyncio.wait_for(stop.wait(), timeout=server.knobs.start_delay_s)
        except asyncio.TimeoutError:
            pass
    if not stop.is_set():
        server.state = "ready"
        server.startup_time_s = time.monotonic() - t0
        log.info(READY_LINE)
    await stop.wait()
    log.info("received a termination signal; shutting down")
    server.state = "shutting_down"
    await server.stop_loop()
    await runner.cleanup()
    return 0


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m cluster.sim.server") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="[%(asctime)s] %(message)s")
    ns, unknown = build_parser(prog).parse_known_args(argv)
    refused = unrecognized(unknown)
    if refused:  # what SGLang 0.5.23's own parser says (and its exit code) for a flag it does not have
        print(f"error: unrecognized arguments: {' '.join(refused)}", file=sys.stderr, flush=True)
        return 2
    try:
        raw = json.loads(os.environ.get(SIM_ENV) or "{}")
        knobs = Knobs.from_mapping(raw if isinstance(raw, dict) else {})  # the spec's own knob model
        tuning_knobs = knobs
    except ValueError as e:
        msg = str(e) if isinstance(e, KnobError) else f"{SIM_ENV}: not valid JSON ({e})"
        print(f"error: {msg}", file=sys.stderr, flush=True)
        return 2
    if knobs.fail_start:
        reason = knobs.fail_start if isinstance(knobs.fail_start, str) else "simulated startup failure"
        print(f"error: {reason} (knob fail_start)", file=sys.stderr, flush=True)
        return 1
    try:
        args, spec = resolve_args(ns, knobs)
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    # GEMM tuning contract: a tuned speed factor only with a valid artifact; some back ends give garbage
    eff = sim_tuning.startup_effect(args, os.environ, tuning_knobs, knobs.time_scale, log.info)
    knobs = knobs.model_copy(update={"tuned_speed_factor": knobs.tuned_speed_factor * eff.speed_factor,
                                     "garbage_output": knobs.garbage_output or eff.garbage})
    if unknown:
        log.info("accepted but not modelled: %s", " ".join(redact_argv(unknown)))
    # as SGLang 0.5.23 does (entrypoints/engine.py: server_args={resolved dict}, api_key included): the actor
    # scrubs the log file of declared secrets once the server stopped
    log.info("server_args=%s", args)
    if knobs.fixed_ttft_ms is not None or knobs.fixed_itl_ms is not None:
        fine_timer_slack()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def _run() -> int:
        return await serve(SimServer(args, spec, knobs, unknown, argv))

    return asyncio.run(_run())


if __name__ == "__main__":
    sys.exit(main())
