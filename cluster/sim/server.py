"""The simulated SGLang 0.5.23 server process: `python -m cluster.sim.server <SGLang argv>` (knobs: env SGLBENCH_SIM)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import sys
import time
from typing import Any, Awaitable, Callable, Optional, Sequence

from aiohttp import web

from cluster.sim import tuning as sim_tuning
from cluster.engines.server_env import SIM_ENV
from cluster.engines.sglang_flags import unrecognized
from cluster.config.secrets import redact_argv
from cluster.engines.sim_launch import LaunchError, build_parser, resolve_args
from cluster.config.sim_knobs import Knobs, KnobError
from cluster.sim.control import VERSION, ControlEndpoints, knobs_json
from cluster.sim.inference import InferenceEndpoints
from cluster.sim.lifecycle import SimServer
from cluster.sim.pacer import fine_timer_slack
from cluster.sim.ranks import RankGroup, follow, lead_ranks

READY_LINE = "The server is fired up and ready to roll!"

log = logging.getLogger("sglbench.sim")


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
    control, inference = ControlEndpoints(server), InferenceEndpoints(server)
    r = app.router
    for path in ("/health", "/health_generate"):
        r.add_get(path, control.health)
    for path in ("/model_info", "/get_model_info"):
        r.add_get(path, control.model_info)
    for path in ("/server_info", "/get_server_info"):
        r.add_get(path, control.server_info)
    r.add_get("/v1/models", control.models)
    r.add_get("/sim_pacing", control.sim_pacing)
    r.add_get("/sim_device", control.sim_device)
    for method in ("GET", "POST"):
        r.add_route(method, "/start_profile", control.start_profile)
        r.add_route(method, "/stop_profile", control.stop_profile)
    r.add_route("GET", "/flush_cache", control.flush_cache)
    r.add_route("POST", "/flush_cache", control.flush_cache)
    r.add_post("/generate", inference.generate)
    r.add_post("/v1/completions", inference.completions)
    r.add_post("/v1/chat/completions", inference.chat_completions)
    if server.args["enable_metrics"]:
        r.add_get("/metrics", control.metrics)
    return app


async def serve(server: SimServer) -> int:
    """Bind, become healthy after start_delay_s, serve until SIGTERM/SIGINT; return the exit code.

    Rank 0 of a multi-node server binds only once every rank joined, and exits 1 when one is lost; a prefill
    server also runs its bootstrap listener."""
    t0 = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    group, failed = await lead_ranks(int(server.args["nnodes"]), server.args["dist_init_addr"], stop)
    if failed is None and server.pd is not None:
        failed = await server.pd.start()
    if failed is not None or stop.is_set():
        if failed is not None:
            print(f"error: {failed}", file=sys.stderr, flush=True)
        await _close_roles(server, group)
        return 1 if failed is not None else 0
    runner = web.AppRunner(build_app(server), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    host, port = server.args["host"], int(server.args["port"])
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        print(f"error: cannot bind {host}:{port}: {e.strerror or e}", file=sys.stderr, flush=True)
        await runner.cleanup()
        await _close_roles(server, group)
        return 1
    log.info("simulated SGLang %s listening on http://%s:%d (knobs: %s)", VERSION, host, port,
             json.dumps(knobs_json(server.knobs), sort_keys=True))
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
    if group is None or group.lost is None:
        log.info("received a termination signal; shutting down")
    server.state = "shutting_down"
    await server.stop_loop()
    await runner.cleanup()
    await _close_roles(server, group)
    return 1 if group is not None and group.lost is not None else 0


async def _close_roles(server: SimServer, group: Optional[RankGroup]) -> None:
    if server.pd is not None:
        await server.pd.close()
    if group is not None:
        await group.close()


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
    if int(args["nnodes"]) > 1 and int(args["node_rank"]) > 0:
        return asyncio.run(follow(int(args["node_rank"]), int(args["nnodes"]), str(args["host"]), int(args["port"]),
                                  args["dist_init_addr"], bool(args["enable_metrics"])))  # a rank >= 1 runs no API (SGLang: a dummy health server only)
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
