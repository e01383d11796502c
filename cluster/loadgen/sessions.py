"""Multi-turn sessions: which requests form a session, each later turn's prompt from the one before and its answer,
and the seeded think times between turns.

Request i of a session workload is turn i % turns of session i // turns. Its prompt in the prompt list is the first
turn's whole prompt (k = 0) or only the new user part of a later turn (k > 0: fresh ids, or a dataset row's next
user turn); the runner builds the prompt it sends with `next_turn` once the previous answer is in, as a chat client
does: the history, the answer the server gave, then the new user turn. A later turn is sent `think_time_s` after
the answer before it ended, so its intended send time is that moment and client lag is measured against it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Optional

import numpy as np

from cluster.kernel.records import RequestRecord
from cluster.engines.base import ChatTurn, Prompt
from cluster.errors import EngineFault
from cluster.loadgen.pacing import SPIN_NS, closed_loop, pace, shard_concurrency
from cluster.loadgen.sink import RecordSink
from cluster.kernel.window_job import WindowJob
from cluster.config.workload import SessionSpec

THINK_STREAM = 0x7417
"""Seed stream of the think times: apart from the prompts' and the arrivals' draws."""

Render = Callable[[tuple[ChatTurn, ...]], tuple[str, Optional[tuple[int, ...]]]]
"""A conversation's turns → (the text sent, its token ids or None): the model's chat template and tokenizer, or
the turns joined and tokenized, as the first turn was (cluster/loadgen/conversations.py `session_renderer`)."""


class SessionTurnError(EngineFault):
    """A later turn that cannot be built from the answer before it: the engine's stream lacked what the session
    needs (its output ids). Recorded as that request's error, never raised past the window."""


@dataclass(frozen=True)
class Answer:
    """What the server answered a turn: its text and, where the stream carries them, its token ids."""

    text: str
    ids: Optional[tuple[int, ...]]


def session_count(n_requests: int, turns: int) -> int:
    """Sessions of a window of n requests (the last one shorter when n is no multiple of turns: warmup)."""
    return -(-n_requests // turns)


@dataclass(frozen=True)
class SessionPlan:
    """How the runner sends a window's sessions."""

    turns: int
    think_ns: np.ndarray
    """(sessions, turns − 1) pauses in ns: [s, k] is the pause after session s's turn k + 1 ended."""
    render: Optional[Render] = None

    def n_sessions(self, n_requests: int) -> int:
        return session_count(n_requests, self.turns)

    def requests_of(self, session: int, n_requests: int) -> range:
        return range(session * self.turns, min((session + 1) * self.turns, n_requests))


def think_times_ns(spec: SessionSpec, n_sessions: int, seed: int) -> np.ndarray:
    """The seeded pauses of every session's turns, (n_sessions, turns − 1) int64 ns."""
    shape = (n_sessions, spec.turns - 1)
    if spec.think_time == "fixed" or spec.think_time_s == 0:
        return np.full(shape, round(spec.think_time_s * 1e9), dtype=np.int64)
    rng = np.random.default_rng([seed, THINK_STREAM])
    return np.round(rng.exponential(spec.think_time_s * 1e9, size=shape)).astype(np.int64)


def session_plan(spec: SessionSpec, n_requests: int, seed: int, render: Optional[Render] = None) -> SessionPlan:
    return SessionPlan(spec.turns, think_times_ns(spec, session_count(n_requests, spec.turns), seed), render)


def _join(*parts: Optional[str]) -> str:
    # the blank-line join of a conversation row's turns without a chat template (ConversationRow.text)
    return "\n\n".join(p for p in parts if p)


def next_turn(previous: Prompt, answer: Answer, user: Prompt, render: Optional[Render] = None) -> Prompt:
    """The prompt of a later turn: `previous` (the prompt the turn before sent), its `answer`, then `user` (the new
    turn's own part). Chat turns gain the answer as an assistant turn; with `render` the text and ids are those of
    the whole conversation rendered again; token-id prompts (random ids) append the answer's ids and the new ids;
    text prompts append the texts, blank-line separated. The new turn keeps its own output budget and its own
    source_row (a conversation's later turn: the session's row; random ids: the new part's draw)."""
    messages: Optional[tuple[ChatTurn, ...]] = None
    if previous.messages is not None and user.messages is not None:
        messages = previous.messages + (ChatTurn("assistant", answer.text),) + user.messages
    ids: Optional[tuple[int, ...]]
    if messages is not None and render is not None:
        text, ids = render(messages)
    elif previous.text is None:
        if previous.input_ids is None or user.input_ids is None:
            raise SessionTurnError("a token-id session turn needs token ids in both turns")
        if answer.ids is None:
            raise SessionTurnError("not sent: the previous turn's stream carried no output ids, so its answer "
                                   "cannot be appended (token-id sessions need the native /generate stream)")
        text, ids = None, previous.input_ids + answer.ids + user.input_ids
    else:
        text, ids = _join(previous.text, answer.text, user.text), None
    return Prompt(input_ids=ids, text=text, messages=messages, category=previous.category,
                  max_tokens=user.max_tokens, chat_template_kwargs=previous.chat_template_kwargs,
                  source_row=user.source_row)


SendOne = Callable[[int, int, Optional[Prompt], bool, tuple[Optional[int], Optional[int]]],
                   Awaitable[tuple[int, Optional[Answer]]]]
"""The runner's `one`: (request, intended send, prompt, keep its answer, (session, turn)) → (its end, its answer)."""


async def dispatch_sessions(one: SendOne, job: WindowJob, prompt_for: Callable[[int], Prompt], plan: SessionPlan,
                            n_total: int, t0_ns: int, sink: RecordSink) -> None:
    """This shard of `job`'s sessions (s % num_shards == shard_index): closed loop, `concurrency` sessions at a time,
    each worker starting its next session when the last turn of its session ended; open loop, sessions starting on
    a seeded schedule at request_rate / turns per second (max_concurrency caps the turns in flight). A session's
    later turn is sent its think time after the turn before ended, which is its intended send."""
    max_tokens, load, seed = job.max_tokens, job.load, job.seed
    num_shards, shard_index = job.num_shards, job.shard_index
    clock = time.monotonic_ns
    n_sessions = plan.n_sessions(n_total)
    mine = range(shard_index, n_sessions, num_shards)
    cap: Optional[asyncio.Semaphore] = None

    def unsent(i: int, s: int, k: int, why: str) -> None:
        # every request keeps its record: the turns a session could not send count as its failures
        now_ns = clock() - t0_ns
        p = prompt_for(i)
        sink.add(RequestRecord(request_index=i, intended_send_ns=now_ns, actual_send_ns=now_ns, prompt_tokens_sent=0,
                               max_tokens=p.max_tokens or max_tokens, error=why, category=p.category,
                               session_index=s, turn=k + 1), now_ns)

    async def run_session(s: int, intended_ns: int) -> None:
        reqs = plan.requests_of(s, n_total)
        prompt = prompt_for(reqs[0])
        answer: Optional[Answer] = None
        end_ns = 0
        for k, i in enumerate(reqs):
            if k:
                assert answer is not None
                intended_ns = end_ns + int(plan.think_ns[s, k - 1])
                await pace(t0_ns + intended_ns, SPIN_NS)  # a think time needs no sub-ms spin
                try:
                    prompt = next_turn(prompt, answer, prompt_for(i), plan.render)
                except SessionTurnError as e:
                    for j, later in enumerate(reqs[k:], start=k):
                        unsent(later, s, j, str(e))
                    return
            last = k == len(reqs) - 1
            if cap is not None:
                await cap.acquire()  # a turn held back by the cap keeps its intended time: the wait is lag
            try:
                end_ns, answer = await one(i, intended_ns, prompt, not last, (s, k + 1))
            finally:
                if cap is not None:
                    cap.release()
            if answer is None and not last:
                for j, later in enumerate(reqs[k + 1:], start=k + 1):
                    unsent(later, s, j, f"not sent: turn {k + 1} of its session failed")
                return

    sched = load.shape.session_schedule(load, n_sessions, plan.turns, seed)
    if sched.concurrency is not None:
        await closed_loop(mine, sched.concurrency, shard_index, num_shards, t0_ns, run_session)
        return
    assert sched.offsets_ns is not None
    offsets = sched.offsets_ns[shard_index::num_shards]
    if sched.max_concurrency:
        cap = asyncio.Semaphore(max(1, shard_concurrency(int(sched.max_concurrency), shard_index, num_shards)))
    tasks: set[asyncio.Task[None]] = set()
    late_ns = 0
    for s, off in zip(mine, offsets.tolist()):
        late_ns = await pace(t0_ns + off, late_ns)
        task = asyncio.create_task(run_session(s, off))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    while tasks:
        await asyncio.gather(*list(tasks))
