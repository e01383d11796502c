"""Multi-turn sessions against the simulated server: each later turn sends the history with the answer the server
gave, and the prefix cache serves it (hand arithmetic below); think times hold between a turn's end and the next."""

from __future__ import annotations

import pathlib
from typing import Callable

from sim_process import SimHandle

from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.datasets import build_prompt_sequence, build_session_plan
from cluster.loadgen.runner import run_load_point
from cluster.plan.runs import LoadPoint
from cluster.spec.models import WorkloadSpec

INPUT, OUTPUT, TURNS, SESSIONS, THINK_S = 32, 16, 3, 4, 0.05


def test_later_turns_carry_the_answers_and_find_them_cached(sim_factory: Callable[..., SimHandle],
                                                          tmp_path: pathlib.Path) -> None:
    sim = sim_factory(["--enable-metrics"])
    w = WorkloadSpec.model_validate({
        "name": "chat", "input_tokens": INPUT, "output_tokens": OUTPUT, "num_requests": TURNS * SESSIONS,
        "sessions": {"turns": TURNS, "think_time_s": THINK_S}})
    n = w.num_requests
    prompts = build_prompt_sequence(w, n, seed=5, base_dir=tmp_path)
    plan = build_session_plan(w, n, 5, tmp_path)
    res = run_load_point(SGLangEngine(), sim.base, "native", prompts, OUTPUT, LoadPoint("concurrency", 2), 5, True,
                         0.0, "m", 30.0, sessions=plan)
    t = res.requests.to_pydict()
    assert all(e is None for e in t["error"]), t["error"]
    assert t["turn"] == [1, 2, 3] * SESSIONS and t["session_index"] == [s for s in range(SESSIONS) for _ in "abc"]
    # the server's own prompt count: turn 1 = 32; turn 2 = 32 + 16 (answer) + 32 = 80; turn 3 = 80 + 16 + 32 = 128
    assert t["prompt_tokens"] == [32, 80, 128] * SESSIONS
    # the sim caches whole 16-token blocks of prompt + answer when a request finishes (SGLang's radix cache keeps
    # both): turn 2 finds turn 1's 32 + 16 = 48 tokens (3 blocks), turn 3 finds turn 2's 80 + 16 = 96 (6 blocks);
    # turn 1 of each session is new random ids: nothing cached
    assert t["cached_tokens"] == [0, 48, 96] * SESSIONS
    for i in range(n):
        if t["turn"][i] > 1:
            # sent the think time after the previous turn's last chunk, never earlier
            gap_s = (t["intended_send_ns"][i] - t["last_chunk_ns"][i - 1]) / 1e9
            assert THINK_S <= gap_s < THINK_S + 0.05
            assert t["actual_send_ns"][i] >= t["intended_send_ns"][i]
