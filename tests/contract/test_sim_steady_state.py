"""The steady-state stretch and the saturation predicate on the simulated server, whose timing is known by
construction: every decode step takes 10 ms whatever the batch (no per-request or prefill cost), so each running
request gets one token per 10 ms and a server running r requests makes about 100 r output tok/s.

Machine load tolerated: the closed-loop stretch's 320-440 tok/s and 9-12 ms TPOT bounds take up to ~2 ms a step of
lateness (20 % of a 10 ms step: 4000 / 12 = 333 tok/s); in the sweep, c2 stays unsaturated against c1 unless its
window alone is ~6 ms a step late (throughput growth under +25 %: 2000 / 16 = 125 against 100), and c4 stays
saturated against c2 unless c2's window alone is ~2.5 ms a step later than c4's (then c4 grows +25 %). The open-loop
stretch's bounds are 100-200 ms wide."""

from __future__ import annotations

import pathlib
from typing import Callable

import numpy as np
import pyarrow as pa
import pytest
from sim_process import SimHandle

from cluster.analysis.metrics import summarize_run
from cluster.analysis.steady_state import SteadyState, shortfall, steady_state
from cluster.config.workload import WorkloadSpec
from cluster.engines.sglang import SGLangEngine
from cluster.kernel.runs import LoadPoint
from cluster.loadgen.prompt_sources import build_prompt_sequence
from cluster.loadgen.runner import run_load_point
from cluster.kernel.window_job import WindowJob
from cluster.kernel.window import MeasuredWindow
from cluster.plan.saturation import SweepPoint, sweep_saturation

KNOBS = {"time_scale": 1.0, "decode_base_ms": 10.0, "decode_per_req_ms": 0.0, "prefill_per_token_ms": 0.0}
OUT_TOKENS = 20


def _window(sim: SimHandle, tmp_path: pathlib.Path, load: LoadPoint, n: int) -> MeasuredWindow:
    w = WorkloadSpec.model_validate({"name": "w", "input_tokens": 16, "output_tokens": OUT_TOKENS,
                                     "num_requests": n})
    prompts = build_prompt_sequence(w, n, seed=1, base_dir=tmp_path)
    return run_load_point(SGLangEngine(), WindowJob(sim.base, "native", OUT_TOKENS, load, int(load.value), True, 0.0,
                                                    "m", 60.0), prompts)


def _stretch(sim: SimHandle, tmp_path: pathlib.Path, load: LoadPoint,
             n: int) -> tuple[MeasuredWindow, pa.Table, SteadyState, int, int]:
    """One window, its requests, its steady stretch (asserted to have bounds) and those bounds."""
    res = _window(sim, tmp_path, load, n)
    reqs = pa.Table.from_batches([res.requests])
    ss = steady_state(reqs, load.kind, load.value, res.duration_s)
    assert ss is not None and ss.start_ns is not None and ss.end_ns is not None, ss
    return res, reqs, ss, ss.start_ns, ss.end_ns


def test_a_closed_loop_stretch_ends_where_its_drain_begins(sim_factory: Callable[..., SimHandle],
                                                           tmp_path: pathlib.Path) -> None:
    # concurrency 4, 5 requests of 20 tokens: four decode together for ~200 ms (4 in flight: the stretch, at about
    # 4 x 100 = 400 tok/s), then the fifth alone for ~200 ms more (the drain, 100 tok/s): the whole window makes
    # 100 tokens in ~0.4 s, ~250 tok/s
    res, reqs, ss, start, end = _stretch(sim_factory(["--max-running-requests", "8"], KNOBS), tmp_path,
                                         LoadPoint("concurrency", 4), 5)
    first4 = np.sort(reqs.column("last_chunk_ns").to_numpy())[:4]
    fifth_send = int(np.max(reqs.column("actual_send_ns").to_numpy()))
    # the stretch starts at the window's start and ends when the first of the four finishes (the fifth's send)
    assert start <= 5_000_000 and abs(end - int(first4[0])) <= 20_000_000, (ss, first4, fifth_send)
    assert 0.35 <= ss.share <= 0.65 and ss.requests == 4
    whole = summarize_run(reqs, pa.Table.from_batches([res.chunks]), res.duration_s)["output_tok_s"]
    assert ss.output_tps is not None and whole is not None
    assert 320 <= ss.output_tps <= 440, ss  # ~400 tok/s: four requests at one token per 10 ms each
    assert whole < 0.8 * ss.output_tps, (whole, ss)  # the drain pulls the whole-window figure down
    assert ss.tpot_ms is not None and 9.0 <= ss.tpot_ms <= 12.0
    assert shortfall(ss.share, ss.requests) is not None  # 4 requests decoded inside: too few to count


def test_an_open_loop_stretch_excludes_the_drain(sim_factory: Callable[..., SimHandle],
                                                 tmp_path: pathlib.Path) -> None:
    # 40 req/s (one send every 25 ms on average, Poisson), 60 requests of ~200 ms each: sends stop at ~1.5 s and
    # the last completes ~200 ms later; the stretch (windows of 16 / 40 = 0.4 s) ends before the last completion
    _, reqs, ss, start, end = _stretch(sim_factory(["--max-running-requests", "64"], KNOBS), tmp_path,
                                       LoadPoint("rate", 40.0), 60)
    last_send = int(np.max(reqs.column("actual_send_ns").to_numpy()))
    first_done = int(np.min(reqs.column("last_chunk_ns").to_numpy()))
    assert start >= first_done - 200_000_000 and end <= last_send + 100_000_000, (ss, last_send)
    assert ss.share < 1.0 and ss.output_tps is not None and ss.output_tps > 0


@pytest.mark.parametrize("cap", [2])
def test_a_sweep_past_the_servers_running_cap_is_marked_saturated(sim_factory: Callable[..., SimHandle],
                                                                  tmp_path: pathlib.Path, cap: int) -> None:
    # the server runs at most 2 requests at once: ~100 tok/s at c1, ~200 at c2, still ~200 at c4 and c8, where the
    # others wait their turn while the client keeps c in flight: with 16 requests a c4 request waits about one
    # request (~200 ms) for a slot, a c8 one about three (~600 ms)
    sim = sim_factory(["--max-running-requests", str(cap)], KNOBS)
    points = []
    for c in (1, 2, 4, 8):
        res = _window(sim, tmp_path, LoadPoint("concurrency", float(c)), 16)
        m = summarize_run(pa.Table.from_batches([res.requests]), pa.Table.from_batches([res.chunks]), res.duration_s)
        points.append(SweepPoint(c, m["output_tok_s"], m["ttft_ms_p50"], m["concurrency_mean"]))
    marks = sweep_saturation(points)
    assert marks[:2] == [None, None], (points, marks)
    assert marks[2] is not None and marks[2].startswith("saturated past 2"), (points, marks)
    assert marks[3] is not None and marks[3].startswith("saturated past 4"), (points, marks)
