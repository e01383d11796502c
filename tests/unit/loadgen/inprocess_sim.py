"""The simulated server run inside the test's own event loop on a loopback port (no subprocess), for tests that
drive the load generator against it."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from aiohttp import web

from cluster.config.sim_knobs import Knobs
from cluster.engines.sim_launch import build_parser, resolve_args
from cluster.sim.server import build_app
from cluster.sim.lifecycle import SimServer


@asynccontextmanager
async def served_sim(knobs: Knobs) -> AsyncIterator[str]:
    """The base URL of a ready simulator with `knobs` (model path 'm'), stopped on exit."""
    ns, _ = build_parser().parse_known_args(["--model-path", "m"])
    args, spec = resolve_args(ns, knobs)
    sim = SimServer(args, spec, knobs, [], [])
    runner = web.AppRunner(build_app(sim), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    sim.start_loop()
    sim.state = "ready"
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await sim.stop_loop()
        await runner.cleanup()
