"""The simulator resolves and enforces SGLang 0.5.23's running-request cap as the real server does."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from cluster.engines.sglang_server_info import concurrency_cap_from_server_info
from cluster.engines.sim_launch import build_parser, resolve_args
from cluster.sim.model import effective_max_running_requests
from cluster.config.sim_knobs import Knobs
from cluster.sim.control import ControlEndpoints
from cluster.sim.lifecycle import SimServer


def server(argv: list[str], knobs: Knobs = Knobs()) -> SimServer:
    ns, unknown = build_parser().parse_known_args(["--model-path", "m", *argv])
    args, spec = resolve_args(ns, knobs)
    return SimServer(args, spec, knobs, unknown, argv)


def info(s: SimServer) -> dict[str, Any]:
    async def get() -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((await ControlEndpoints(s).server_info(None)).body)  # type: ignore[arg-type]
        return doc
    return asyncio.run(get())


NEXTN = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "2"]


def test_unset_under_speculative_decoding_is_48_at_the_top_and_in_internal_states() -> None:
    s = server(NEXTN)
    doc = info(s)
    assert doc["max_running_requests"] == 48 and s.sched.max_running == 48
    assert doc["internal_states"][0]["effective_max_running_requests_per_dp"] == 48
    cap = concurrency_cap_from_server_info(doc)
    assert cap is not None and cap.value == 48


def test_unset_without_speculation_is_none_at_the_top_and_the_kv_pool_figure_inside() -> None:
    # the real CPU capture: --max-total-tokens 8192 → max_running_requests null, effective 2048
    s = server([], Knobs(max_total_num_tokens=8192, context_length=32768))
    doc = info(s)
    assert doc["max_running_requests"] is None
    assert doc["internal_states"][0]["effective_max_running_requests_per_dp"] == 2048 == s.sched.max_running


def test_explicit_cap_wins_but_not_past_half_the_kv_pool() -> None:
    assert server(NEXTN + ["--max-running-requests", "64"]).sched.max_running == 64
    assert effective_max_running_requests(64, Knobs(max_total_num_tokens=100)) == 50
    assert effective_max_running_requests(None, Knobs(max_total_num_tokens=10**8, context_length=1024)) == 4096


def test_requests_beyond_the_cap_wait_in_the_queue() -> None:
    s = server(NEXTN)
    for i in range(64):
        s.sched.submit(s.sched.new_request(f"r{i}", [1, 2, 3], None, 8, True))
    s.sched.plan_step()
    s.sched.commit_step()
    assert (len(s.sched.running), len(s.sched.waiting)) == (48, 16)
