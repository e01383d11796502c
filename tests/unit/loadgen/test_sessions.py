"""Multi-turn sessions: each later turn's prompt from the one before and its answer, seeded think times, the
dispatcher's order and timing (with a fake sender, no server), conversation follow-up turns, and the spec's refusals."""

from __future__ import annotations

import asyncio
import json
import pathlib
import time
from typing import Any, Optional

import numpy as np
import pytest

from cluster.kernel.records import RequestRecord
from cluster.engines.base import ChatTurn, Prompt
from cluster.loadgen.conversations import load_conversations, select_rows
from cluster.loadgen.prompt_sources import build_prompts, build_session_plan
from cluster.kernel.window_job import WindowJob
from cluster.loadgen.sessions import (Answer, SessionPlan, SessionTurnError, dispatch_sessions, next_turn,
                                      session_plan, think_times_ns)
from cluster.loadgen.sink import RecordSink
from cluster.kernel.runs import LoadPoint
from cluster.config.fields import FieldProblem
from cluster.config.workload import SessionSpec, WorkloadSpec


def _wl(**kw: Any) -> WorkloadSpec:
    base: dict[str, Any] = {"name": "w", "input_tokens": 32, "output_tokens": 16, "num_requests": 6,
                            "sessions": {"turns": 3}}
    base.update(kw)
    return WorkloadSpec.model_validate(base)


# --- next_turn -------------------------------------------------------------------------------------------------

def test_token_id_turn_appends_the_answer_ids_then_the_new_ids() -> None:
    p = next_turn(Prompt(input_ids=(1, 2, 3), category="c"), Answer("xy", (7, 8)), Prompt(input_ids=(4, 5), max_tokens=9))
    assert p.input_ids == (1, 2, 3, 7, 8, 4, 5) and p.text is None
    assert p.category == "c" and p.max_tokens == 9  # the session's category, the new turn's own budget


def test_token_id_turn_without_answer_ids_is_refused() -> None:
    with pytest.raises(SessionTurnError, match="carried no output ids"):
        next_turn(Prompt(input_ids=(1,)), Answer("text only", None), Prompt(input_ids=(2,)))


def test_chat_turns_gain_the_answer_as_an_assistant_turn() -> None:
    first = Prompt(text="q1", messages=(ChatTurn("system", "be brief"), ChatTurn("user", "q1")))
    user = Prompt(text="q2", messages=(ChatTurn("user", "q2"),))
    p = next_turn(first, Answer("a1", None), user)
    assert p.messages == (ChatTurn("system", "be brief"), ChatTurn("user", "q1"), ChatTurn("assistant", "a1"),
                          ChatTurn("user", "q2"))
    assert p.text == "q1\n\na1\n\nq2" and p.input_ids is None  # no renderer: the blank-line join of the first turn

    def render(turns: tuple[ChatTurn, ...]) -> tuple[str, Optional[tuple[int, ...]]]:
        text = "|".join(f"{t.role}:{t.content}" for t in turns)
        return text, tuple(range(len(turns)))

    r = next_turn(first, Answer("a1", (99,)), user, render)
    assert r.text == "system:be brief|user:q1|assistant:a1|user:q2" and r.input_ids == (0, 1, 2, 3)


# --- think times -----------------------------------------------------------------------------------------------

def test_think_times_fixed_and_seeded_exponential() -> None:
    fixed = think_times_ns(SessionSpec(turns=3, think_time_s=0.25), 4, seed=1)
    assert fixed.shape == (4, 2) and (fixed == 250_000_000).all()
    spec = SessionSpec(turns=5, think_time_s=2.0, think_time="exponential")
    a, b = think_times_ns(spec, 2000, seed=7), think_times_ns(spec, 2000, seed=7)
    assert (a == b).all() and not (a == think_times_ns(spec, 2000, seed=8)).all()
    # 8000 exponential draws of mean 2 s: the sample mean is within 4 standard errors (2/sqrt(8000) = 0.022 s)
    assert abs(a.mean() / 1e9 - 2.0) < 4 * 2.0 / np.sqrt(a.size)


def test_plan_groups_requests_into_sessions() -> None:
    plan = session_plan(SessionSpec(turns=3), 7, seed=0)
    assert plan.n_sessions(7) == 3 and plan.think_ns.shape == (3, 2)
    assert list(plan.requests_of(0, 7)) == [0, 1, 2] and list(plan.requests_of(2, 7)) == [6]  # warmup: a short last


# --- the dispatcher, with a fake sender ------------------------------------------------------------------------

class FakeSender:
    """Stands in for the runner's `one`: answers each request after `service_ns`, with ids [100 + i]; the
    requests in `fail` get no answer (a failed request)."""

    def __init__(self, sink: RecordSink, t0_ns: int, service_ns: int = 2_000_000, fail: frozenset[int] = frozenset()):
        self.sink, self.t0_ns, self.service_ns, self.fail = sink, t0_ns, service_ns, fail
        self.sent: dict[int, Prompt] = {}
        self.record: dict[int, RequestRecord] = {}
        self.end: dict[int, int] = {}

    async def __call__(self, i: int, intended_ns: int, p: Optional[Prompt], answer: bool,
                       where: tuple[Optional[int], Optional[int]]) -> tuple[int, Optional[Answer]]:
        assert p is not None
        actual = time.monotonic_ns() - self.t0_ns
        self.sent[i] = p
        rec = RequestRecord(request_index=i, intended_send_ns=intended_ns, actual_send_ns=actual,
                            prompt_tokens_sent=len(p.input_ids or ()), max_tokens=4, session_index=where[0],
                            turn=where[1])
        await asyncio.sleep(self.service_ns / 1e9)
        end = time.monotonic_ns() - self.t0_ns
        if i in self.fail:
            rec.error = "HTTP 500"
        else:
            rec.chunk_arrival_ns, rec.chunk_tokens = [end], [1]
        self.record[i], self.end[i] = rec, end
        self.sink.add(rec, end)
        return end, (Answer(f"a{i}", (100 + i,)) if answer and rec.ok else None)


def _run(plan: SessionPlan, prompts: list[Prompt], load: LoadPoint, fail: frozenset[int] = frozenset(),
         shard: tuple[int, int] = (0, 1)) -> tuple[FakeSender, RecordSink]:
    sink = RecordSink(len(prompts), 1_000_000)

    async def go() -> FakeSender:
        t0 = time.monotonic_ns()
        one = FakeSender(sink, t0, fail=fail)
        job = WindowJob("http://unused", "native", 4, load, 3, True, 0.0, "m", 30.0, shard_index=shard[0],
                        num_shards=shard[1])
        await dispatch_sessions(one, job, prompts.__getitem__, plan, len(prompts), t0, sink)
        sink.flush()
        return one

    return asyncio.run(go()), sink


def _id_prompts(n: int) -> list[Prompt]:
    return [Prompt(input_ids=(i,)) for i in range(n)]


def test_closed_loop_sends_each_session_in_order_with_its_think_time() -> None:
    think_ns = 20_000_000
    plan = SessionPlan(3, np.full((4, 2), think_ns, dtype=np.int64))
    one, sink = _run(plan, _id_prompts(12), LoadPoint("concurrency", 2.0))
    assert sink.rows == 12 and sorted(one.sent) == list(range(12))
    # session 1 (requests 3, 4, 5): turn 2 sends turn 1's prompt, its answer id 103 and its own id 4
    assert one.sent[4].input_ids == (3, 103, 4) and one.sent[5].input_ids == (3, 103, 4, 104, 5)
    for s in range(4):
        for k in (1, 2):
            i = 3 * s + k
            rec = one.record[i]
            assert (rec.session_index, rec.turn) == (s, k + 1)
            # intended send = the turn before's end + the think time; the send is not earlier than intended
            assert rec.intended_send_ns == one.end[i - 1] + think_ns
            assert rec.actual_send_ns >= rec.intended_send_ns
    # two workers, four sessions: a worker's second session starts only once its first has ended
    firsts = sorted(one.record[3 * s].actual_send_ns for s in range(4))
    assert firsts[2] >= min(one.end[3 * s + 2] for s in range(4))


def test_a_failed_turn_ends_its_session_and_every_later_turn_is_recorded_unsent() -> None:
    plan = SessionPlan(3, np.zeros((2, 2), dtype=np.int64))
    one, sink = _run(plan, _id_prompts(6), LoadPoint("concurrency", 1.0), fail=frozenset({3}))
    assert sink.rows == 6  # one record per request, sent or not
    assert 4 not in one.sent and 5 not in one.sent
    batch, _ = sink.kept_batches()
    errors = dict(zip(batch.column("request_index").to_pylist(), batch.column("error").to_pylist()))
    assert errors[3] == "HTTP 500"
    assert errors[4] == errors[5] == "not sent: turn 1 of its session failed"
    assert batch.column("turn").to_pylist()[batch.column("request_index").to_pylist().index(5)] == 3


def test_open_loop_starts_sessions_at_rate_over_turns_and_shards_split_whole_sessions() -> None:
    plan = SessionPlan(2, np.zeros((6, 1), dtype=np.int64))
    prompts = _id_prompts(12)
    seen: list[set[int]] = []
    for shard in range(2):
        one, sink = _run(plan, prompts, LoadPoint("rate", 400.0), shard=(shard, 2))
        seen.append(set(one.sent))
        assert {one.record[i].session_index for i in one.sent} == set(range(shard, 6, 2))
    assert seen[0] | seen[1] == set(range(12)) and not seen[0] & seen[1]
    with pytest.raises(ValueError, match="trace arrivals"):
        _run(plan, prompts, LoadPoint("rate", 10.0, trace=True))


# --- prompts of a session workload -----------------------------------------------------------------------------

def test_random_id_sessions_carry_the_shared_prefix_on_first_turns_only(tmp_path: pathlib.Path) -> None:
    w = _wl(prompts={"source": "random_ids", "shared_prefix": {"groups": 2, "tokens": 16}})
    ps = build_prompts(w, 6, seed=1, base_dir=tmp_path)
    assert [len(p.input_ids or ()) for p in ps] == [32, 16, 16, 32, 16, 16]  # later turns: own ids only
    assert build_session_plan(w, 6, 1, tmp_path) is not None
    assert build_session_plan(_wl(sessions=None), 6, 1, tmp_path) is None


def _sg(*texts: str) -> dict[str, Any]:
    roles = ["human", "gpt"] * len(texts)
    return {"conversations": [{"from": r, "value": t} for r, t in zip(roles, texts)]}


def test_conversation_sessions_take_the_rows_later_user_turns(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [_sg("q1", "a1", "q2", "a2", "q3"), _sg("only", "one")]) + "\n")
    w = _wl(input_tokens="dataset", num_requests=3, prompts={"source": "sharegpt", "path": str(f)})
    rows = load_conversations(f, w.prompts)  # type: ignore[arg-type]
    assert rows[0].followups == ("q2", "q3") and rows[1].followups == ()
    sel = select_rows(f, rows, w, None)
    assert len(sel.rows) == 1 and sel.filtered == {"fewer than 3 user turns (sessions.turns)": 1}
    ps = build_prompts(w, 3, seed=0, base_dir=tmp_path)
    assert [p.text for p in ps] == ["q1", "q2", "q3"]
    assert ps[1].messages == (ChatTurn("user", "q2"),)


@pytest.mark.parametrize("kw, field, fragment", [
    ({"prompts": {"source": "jsonl", "path": "p.jsonl"}}, "sessions", "sessions need prompt source"),
    ({"api": "completions"}, "api", "only the native /generate stream returns"),
    ({"num_requests": 7}, "num_requests", "must be a multiple of sessions.turns 3"),
    ({"input_tokens": "dataset", "output_tokens": "dataset", "prompts": {"source": "sharegpt", "path": "d.json"}},
     "output_tokens", "not 'dataset'"),
])
def test_spec_refuses_sessions_it_cannot_send(kw: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(Exception) as ei:
        _wl(**kw)
    assert fragment in str(ei.value)
    cause: Any = ei.value
    problems = [e.get("ctx", {}).get("error") for e in cause.errors()] if hasattr(cause, "errors") else []
    assert any(isinstance(p, FieldProblem) and p.loc[0] == field for p in problems), problems


def test_the_longest_prompt_is_a_sessions_last_turn() -> None:
    # 3 turns of 32 input tokens and 2 answers of 16 before the last turn: 3 * 32 + 2 * 16 = 128
    assert _wl().prompt_tokens_max() == 128
    assert _wl(sessions=None).prompt_tokens_max() == 32
    assert "sessions" not in _wl(sessions=None).identity()
    assert _wl().identity()["sessions"] == {"turns": 3, "think_time_s": 0.0, "think_time": "fixed"}
