"""Multi-turn sessions against the simulated server: each later turn sends the history with the answer the server
gave, and the prefix cache serves it (hand arithmetic below); think times hold between a turn's end and the next."""

from __future__ import annotations

import pathlib
from typing import Callable

from sim_process import SimHandle

from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.prompt_sources import build_prompt_sequence, build_session_plan
from cluster.loadgen.runner import run_load_point
from cluster.kernel.window_job import WindowJob
from cluster.kernel.runs import LoadPoint
from cluster.config.workload import WorkloadSpec

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
    res = run_load_point(SGLangEngine(), WindowJob(sim.base, "native", OUTPUT, LoadPoint("concurrency", 2), 5, True,
                                                   0.0, "m", 30.0), prompts, sessions=plan)
    t = res.requests.to_pydict()
    assert all(e is None for e in t["error"]), t["error"]
    assert t["turn"] == [1, 2, 3] * SESSIONS and t["session_index"] == [s for s in range(SESSIONS) for _ in "abc"]
    # the server's own prompt count: turn 1 = 32; turn 2 = 32 + 16 (answer) + 32 = 80; turn 3 = 80 + 16 + 32 = 128
    assert t["prompt_tokens"] == [32, 80, 128] * SESSIONS
    # a finished request leaves its prompt and its answer but the last token in the cache (as SGLang's radix cache
    # does), which the sim matches by whole 16-token blocks: turn 2 finds turn 1's 32 + 15 = 47 tokens as 2 blocks
    # (32), turn 3 finds turn 2's 80 + 15 = 95 as 5 blocks (80); turn 1 of each session is new ids: nothing cached
    assert t["cached_tokens"] == [0, 32, 80] * SESSIONS
    for i in range(n):
        if t["turn"][i] > 1:
            # sent the think time after the previous turn's last chunk, never earlier
            gap_s = (t["intended_send_ns"][i] - t["last_chunk_ns"][i - 1]) / 1e9
            assert THINK_S <= gap_s < THINK_S + 0.05
            assert t["actual_send_ns"][i] >= t["intended_send_ns"][i]


def test_chat_sessions_send_the_answers_as_assistant_turns(sim_factory: Callable[..., SimHandle],
                                                          tmp_path: pathlib.Path) -> None:
    import json

    sim = sim_factory(["--enable-metrics"])
    data = tmp_path / "d.jsonl"
    turns = [{"from": r, "value": v} for r, v in
             [("human", "one two three"), ("gpt", "x"), ("human", "four five"), ("gpt", "y"), ("human", "six")]]
    data.write_text(json.dumps({"conversations": turns}) + "\n")
    w = WorkloadSpec.model_validate({
        "name": "c", "input_tokens": "dataset", "output_tokens": 4, "num_requests": 6, "api": "chat",
        "prompts": {"source": "sharegpt", "path": str(data)}, "sessions": {"turns": 3}})
    prompts = build_prompt_sequence(w, 6, seed=1, base_dir=tmp_path)
    res = run_load_point(SGLangEngine(), WindowJob(sim.base, "chat", 4, LoadPoint("concurrency", 1), 1, True, 0.0, "m",
                                                   30.0), prompts, sessions=build_session_plan(w, 6, 1, tmp_path))
    t = res.requests.to_pydict()
    assert all(e is None for e in t["error"]), t["error"]
    assert t["turn"] == [1, 2, 3, 1, 2, 3]
    # every later turn's prompt holds the one before, the answer and the new user turn: it grows turn by turn
    p = t["prompt_tokens"]
    assert all(p[i] < p[i + 1] for i in (0, 1, 3, 4)) and p[:3] == p[3:], p
