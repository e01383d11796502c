"""The load generator paces with uvloop in CI as on a node (a base dependency, never "when importable"), and every
window says which loop timed it."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

from cluster.loadgen.runner import _run, event_loop_name

REPO = Path(__file__).resolve().parents[3]


def test_uvloop_is_a_base_dependency_and_the_window_loop() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("uvloop>=") for d in deps), deps  # not an extra: CI measures with what a node runs

    async def name() -> str:
        return event_loop_name(asyncio.get_running_loop())

    got = _run(name)
    assert got.startswith("uvloop 0."), got


def test_a_plain_asyncio_loop_is_named_as_such() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert event_loop_name(loop).startswith("asyncio (Python 3.")
    finally:
        loop.close()


def test_a_paced_send_is_never_before_its_intended_time_on_uvloop() -> None:
    # uvloop's timers run on libuv's millisecond clock and fire up to ~1 ms before the asked time; a wait that skips
    # its sub-ms spin (a late loop, or a session's think time) returned early before the fix (negative lateness)
    import time

    from cluster.loadgen.pacing import SPIN_NS, pace

    async def waits() -> list[int]:
        out = []
        for i in range(40):
            target = time.monotonic_ns() + 2_300_000 + 37_000 * i  # off the millisecond grid
            out.append(await pace(target, SPIN_NS))
        return out

    lateness = _run(waits)
    assert min(lateness) >= 0, sorted(lateness)[:5]
