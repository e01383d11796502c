"""Acceptance under attention DP: on a simulated server whose two DP ranks accept differently (knob
dp_accept_probs), the run's acceptance length is the one computed from each request's own counters
(completion_tokens, spec_verify_ct in meta_info), pooled over both ranks, never rank 0's internal_states figure
(SGLang issue #34743: bench_serving reads internal_states[0])."""

from __future__ import annotations

import json
import pathlib
from typing import Callable

import pytest
from sim_process import SimHandle

from cluster.analysis.metrics import summarize_run
from cluster.config.workload import WorkloadSpec
from cluster.engines.sglang import SGLangEngine
from cluster.engines.sglang_server_info import server_info_summary
from cluster.kernel.runs import LoadPoint
from cluster.loadgen.prompt_sources import build_prompt_sequence
from cluster.loadgen.runner import run_load_point
from cluster.kernel.window_job import WindowJob

OUT_TOKENS = 32
N_REQUESTS = 20
SPEC_ARGV = ["--max-running-requests", "8", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def test_run_acceptance_is_per_request_not_rank_zeros(sim_factory: Callable[..., SimHandle],
                                                      tmp_path: pathlib.Path) -> None:
    sim = sim_factory(SPEC_ARGV, {"time_scale": 0.0, "dp_accept_probs": [[0.95, 0.9, 0.9], [0.2, 0.1, 0.1]]})
    assert sim.post("/flush_cache")[0] == 200
    w = WorkloadSpec.model_validate({"name": "w", "input_tokens": 16, "output_tokens": OUT_TOKENS,
                                     "num_requests": N_REQUESTS})
    prompts = build_prompt_sequence(w, N_REQUESTS, seed=1, base_dir=tmp_path)
    res = run_load_point(SGLangEngine(), WindowJob(sim.base, "native", OUT_TOKENS, LoadPoint("concurrency", 4), 4, True,
                                                   0.0, "m", 60.0), prompts)
    run = summarize_run(res.requests, res.chunks, res.duration_s, None)
    assert run["n_ok"] == N_REQUESTS

    info = json.loads(sim.get("/server_info")[1])
    states = info["internal_states"]
    assert info["dp_size"] == 2 and [s["dp_rank"] for s in states] == [0, 1]
    assert sum(s["effective_max_running_requests_per_dp"] for s in states) == 8
    rank0, rank1 = (s["avg_spec_accept_length"] for s in states)
    assert rank0 > rank1 + 1.5, (rank0, rank1)  # the knob took: the ranks accept differently
    # requests are dealt to the ranks in turn, 10 each, every one 32 tokens: each rank's verify steps carried
    # 10·31 tokens after the prefill token, so the pooled figure is 2·310 / (310/rank0 + 310/rank1)
    pooled = 2 / (1 / rank0 + 1 / rank1)
    assert run["accept_length"] == pytest.approx(pooled, rel=1e-9)
    assert abs(run["accept_length"] - rank0) > 1.0, "the run's acceptance is not rank 0's"
    # and the recorded /server_info summary does not pass rank 0's figure off as the server's
    assert server_info_summary(info)["avg_spec_accept_length"] is None
    one_rank = dict(info, internal_states=states[:1])
    assert server_info_summary(one_rank)["avg_spec_accept_length"] == rank0


def test_one_rank_by_default(sim_factory: Callable[..., SimHandle]) -> None:
    info = json.loads(sim_factory(SPEC_ARGV, {"time_scale": 0.0}).get("/server_info")[1])
    assert len(info["internal_states"]) == 1 and "dp_size" not in info
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 8
