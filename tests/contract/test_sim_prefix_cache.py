"""Shared-prefix workloads against the simulated server: the prefix cache serves every group's prefix after its
first request, and the run's prefix_hit_rate says so (hand arithmetic below); /flush_cache starts a window cold."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Callable

import pyarrow as pa
import pytest
from sim_process import SimHandle

from cluster.analysis.metrics import summarize_run
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.prompt_sources import build_prompt_sequence
from cluster.loadgen.runner import flush, run_load_point
from cluster.kernel.window_job import WindowJob
from cluster.kernel.runs import LoadPoint
from cluster.config.workload import WorkloadSpec

N_REQUESTS, GROUPS, PREFIX_TOKENS, INPUT_TOKENS = 12, 3, 64, 80


def _window(sim: SimHandle, tmp: pathlib.Path) -> float:
    w = WorkloadSpec.model_validate({
        "name": "sp", "input_tokens": INPUT_TOKENS, "output_tokens": 4, "num_requests": N_REQUESTS,
        "prompts": {"source": "random_ids", "shared_prefix": {"groups": GROUPS, "tokens": PREFIX_TOKENS}}})
    prompts = build_prompt_sequence(w, N_REQUESTS, seed=3, base_dir=tmp)
    res = run_load_point(SGLangEngine(), WindowJob(sim.base, "native", 4, LoadPoint("concurrency", 1), 3, True, 0.0,
                                                   "m", 30.0), prompts)
    m = summarize_run(pa.Table.from_batches([res.requests]), pa.Table.from_batches([res.chunks]), res.duration_s)
    assert m["n_ok"] == N_REQUESTS
    rate = m["prefix_hit_rate"]
    assert rate is not None
    return rate


def test_each_group_misses_once_then_hits_its_prefix(sim_factory: Callable[..., SimHandle],
                                                     tmp_path: pathlib.Path) -> None:
    sim = sim_factory(["--enable-metrics"])
    # one request at a time: the first of each of the 3 groups misses, the other 9 find their 64-token prefix
    # (4 whole 16-token blocks) cached: 9 * 64 / (12 * 80) = 576 / 960 = 0.6
    assert _window(sim, tmp_path) == pytest.approx(0.6)
    # the same prompts again, without a flush: each one is a repeat, cached but its last token: 79 / 80
    assert _window(sim, tmp_path) == pytest.approx(79 / 80)
    assert asyncio.run(flush(SGLangEngine(), sim.base, 10.0))
    assert _window(sim, tmp_path) == pytest.approx(0.6)


def test_no_prefix_cache_no_hits(sim_factory: Callable[..., SimHandle], tmp_path: pathlib.Path) -> None:
    sim = sim_factory(["--enable-metrics"], {"radix_cache": False})
    assert _window(sim, tmp_path) == 0.0
