"""Capacity at an SLO on the simulated server, whose capacity is known by construction: every decode step takes
10 ms + 40 ms per running request (no prefill cost), so at concurrency c the steps are ~10 + 40·c ms and a TPOT
SLO of 217 ms (between c = 5, ~210, and c = 6, ~250) is met up to c = 5. The search, each probe a measured
window, must answer 5 within its resolution of 1.

Machine load tolerated: measured TPOT medians sit ~8 ms under the step time (c5 ~202, c6 ~242 ms), so the c5 probe's
window may run up to ~15 ms a step (7 %) late before it misses 217 ms; c6 cannot meet it, since lateness only
lengthens steps; c4 and below keep 55 ms or more."""

from __future__ import annotations

import pathlib
from typing import Callable

import pyarrow as pa
from sim_process import SimHandle

from cluster.analysis.metrics import summarize_run
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.prompt_sources import build_prompt_sequence
from cluster.loadgen.runner import run_load_point
from cluster.kernel.window_job import WindowJob
from cluster.plan.capacity import CapacitySearch, Outcome, answer, drive
from cluster.kernel.runs import LoadPoint
from cluster.config.statistics import SLOSpec
from cluster.config.workload import WorkloadSpec

KNOBS = {"time_scale": 1.0, "decode_base_ms": 10.0, "decode_per_req_ms": 40.0, "prefill_per_token_ms": 0.0}
SLO = SLOSpec(tpot_ms=217.0)


def test_the_search_finds_the_known_capacity(sim_factory: Callable[..., SimHandle], tmp_path: pathlib.Path) -> None:
    sim = sim_factory(["--enable-metrics", "--max-running-requests", "64"], KNOBS)
    w = WorkloadSpec.model_validate({"name": "w", "input_tokens": 16, "output_tokens": 6, "num_requests": 8})
    recorded: dict[float, Outcome] = {}
    medians: dict[float, float] = {}

    def measure(load: float) -> None:
        prompts = build_prompt_sequence(w, w.num_requests, seed=int(load), base_dir=tmp_path)
        res = run_load_point(SGLangEngine(), WindowJob(sim.base, "native", 6, LoadPoint("concurrency", load), int(load),
                                                       True, 0.0, "m", 60.0), prompts)
        m = summarize_run(pa.Table.from_batches([res.requests]), pa.Table.from_batches([res.chunks]),
                          res.duration_s, SLO)
        recorded[load] = Outcome("ok", m["slo_attainment"])
        medians[load] = m["tpot_ms_p50"]

    # the median request must meet the SLO (0.5): the tail of a window, with fewer requests left, decodes faster
    search = CapacitySearch(0.5, 1, 16, 1)
    rp = drive(search, recorded.get, measure)
    got = answer(search, rp.probes)
    assert [p.load for p in rp.probes] == [1, 2, 4, 8, 6, 5], medians
    assert got.status == "found" and got.value == 5 and got.lowest_miss == 6, (got, medians)
