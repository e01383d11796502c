"""The simulator's scheduler keeps model time when its process is starved of CPU: steps a stall made late are made up
by the steps after it (cluster/sim/lifecycle.py step_due), as the modelled GPU kept stepping.

Machine load tolerated: the end-to-end check compares a 200-step (400 ms model) request with a 300 ms stall injected
at its fifth step: made up, it ends near max(model, stall + CPU time of the remaining steps), about 0.4-0.45 s;
not made up it took 0.7 s or more (every step after the stall starts from the late wake). The bound is 0.55 s: a
loaded machine's lateness is itself made up, and the remaining 195 steps may take up to 0.24 s of CPU before the
bound is crossed."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from cluster.config.sim_knobs import Knobs
from cluster.sim import lifecycle
from cluster.sim.device import SimDevice
from cluster.sim.lifecycle import CATCH_UP_MAX_S, step_due
from tests.unit.loadgen.inprocess_sim import served_sim


def test_a_late_step_is_made_up_by_the_next_ones() -> None:
    # on time: the step ends its delay after the previous step's due end
    assert step_due(10.0, 0.002, 10.0) == pytest.approx(10.002)
    # woke 20 ms late (now 10.020): due 10.002 is already past, so the step sleeps nothing, and so do the next nine
    due = 10.0
    for _ in range(10):
        due = step_due(due, 0.002, 10.020)
    assert due == pytest.approx(10.020)  # ten 2 ms steps made up the 20 ms
    assert step_due(due, 0.002, 10.020) == pytest.approx(10.022)  # then back on the model's clock


def test_a_stall_past_the_bound_is_not_made_up() -> None:
    now = 10.0 + CATCH_UP_MAX_S + 0.5
    assert step_due(10.0, 0.002, now) == pytest.approx(now + 0.002)


def test_a_request_ends_near_its_model_time_after_a_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = {"n": 0}
    real_end = SimDevice.end_step

    def end_step(self: SimDevice) -> None:
        steps["n"] += 1
        if steps["n"] == 5:
            time.sleep(0.3)  # the process loses its CPU for 300 ms, the loop included
        real_end(self)

    monkeypatch.setattr(SimDevice, "end_step", end_step)
    knobs = Knobs(time_scale=1.0, decode_base_ms=2.0, decode_per_req_ms=0.0, prefill_per_token_ms=0.0)

    async def one() -> float:
        async with served_sim(knobs) as url, aiohttp.ClientSession() as session:
            body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
            t0 = time.monotonic()
            async with session.post(url + "/generate", json=body) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()
            return time.monotonic() - t0

    elapsed_s = asyncio.run(one())
    assert steps["n"] >= 200
    assert elapsed_s < 0.55, f"{elapsed_s:.3f} s for 400 ms of model time and a 300 ms stall"
    assert lifecycle.CATCH_UP_MAX_S >= 0.3
