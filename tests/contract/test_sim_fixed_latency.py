"""The simulator's fixed-latency mode: one token per chunk at a fixed pace, its own pacing stats, knob validation.

Machine load tolerated: the median chunk gap must stay within 7.0-9.5 ms of the 8 ms pace, so the median write may be
up to 1.5 ms late; the first chunk is never early, whatever the load (lateness only delays it)."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
import pytest

from cluster.engines.base import Prompt
from cluster.engines.sglang import SGLangEngine
from cluster.config.sim_knobs import Knobs, KnobError
from cluster.sim.pacer import Pacer
from cluster.loadgen.runner import run_load_point
from cluster.kernel.window_job import WindowJob
from cluster.kernel.runs import LoadPoint

from sim_process import SimHandle


def test_fixed_mode_streams_one_token_per_chunk_on_its_schedule(sim_factory: Callable[..., SimHandle]) -> None:
    h = sim_factory(knobs={"fixed_ttft_ms": 30.0, "fixed_itl_ms": 8.0})
    n_tokens, n_req = 12, 6
    prompts = [Prompt(input_ids=(100 + i, 101, 102)) for i in range(n_req)]
    res = run_load_point(SGLangEngine(), WindowJob(h.base, "native", n_tokens, LoadPoint("concurrency", 3.0), 0, True,
                                                   0.0, "m", 30.0, scrape_metrics=False), prompts)
    req = res.requests.to_pylist()
    assert all(r["error"] is None and r["num_chunks"] == n_tokens for r in req)
    assert all(r["completion_tokens"] == n_tokens and r["finish_reason"] == "length" for r in req)
    assert set(res.chunks.column("tokens").to_pylist()) == {1}
    ttft_ms = np.array([r["first_chunk_ns"] - r["actual_send_ns"] for r in req]) / 1e6
    assert ttft_ms.min() >= 30.0  # never early: the first chunk is due 30 ms after receipt
    t = res.chunks.column("arrival_ns").to_numpy().reshape(n_req, n_tokens)
    gaps_ms = np.diff(t, axis=1) / 1e6
    # the gaps are paced at 8 ms (loose bounds: a shared CI machine may delay single writes)
    assert 7.0 < float(np.median(gaps_ms)) < 9.5
    status, body = h.get("/sim_pacing")
    stats = json.loads(body)
    assert status == 200 and stats["writes"] == n_req * n_tokens
    assert stats["late_p50_us"] >= 0 and stats["itl_ms"] == 8.0 and stats["ttft_ms"] == 30.0
    assert stats["write_call_p50_us"] > 0 and "requests" not in stats
    # the per-request write log: receipt and write times on the monotonic clock this client shares
    log = json.loads(h.get("/sim_pacing?requests=1")[1])["requests"]
    assert sorted(tuple(e["head"]) for e in log) == [(100 + i, 101, 102) for i in range(n_req)]
    send_ns = {r["request_index"]: r["actual_send_ns"] for r in req}
    for e in log:
        w = np.array(e["writes_ns"])
        assert len(w) == n_tokens and w[0] - e["recv_ns"] >= 30_000_000
        assert 7.0 < float(np.median(np.diff(w))) / 1e6 < 9.5
        i = e["head"][0] - 100
        first = next(r["first_chunk_ns"] for r in req if r["request_index"] == i)
        # the client saw the first chunk after the simulator wrote it: same clock, offsets cancel
        assert first - send_ns[i] >= w[0] - e["recv_ns"] - 1_000_000
    assert h.post("/flush_cache")[0] == 200
    assert json.loads(h.get("/sim_pacing")[1]) == {"writes": 0}


def test_fixed_knobs_validate_and_default_to_each_other() -> None:
    k = Knobs.from_mapping({"fixed_itl_ms": 10})
    assert k.fixed_itl_ms == 10.0 and k.fixed_ttft_ms is None
    p = Pacer.from_knobs(k.fixed_ttft_ms, k.fixed_itl_ms)
    assert p is not None and p.ttft_ns == p.itl_ns == 10_000_000
    assert p.due_ns(1_000, 3) == 1_000 + 10_000_000 + 2 * 10_000_000
    assert Pacer.from_knobs(None, None) is None
    with pytest.raises(KnobError, match="fixed_ttft_ms"):
        Knobs.from_mapping({"fixed_ttft_ms": -1})
    bad: Any = "fast"
    with pytest.raises(KnobError, match="fixed_itl_ms"):
        Knobs.from_mapping({"fixed_itl_ms": bad})
