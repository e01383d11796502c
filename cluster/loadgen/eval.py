"""The accuracy task's sender: its rows read from a JSONL file, each prompt asked greedily alone, and again during a
measured window beside the load (its answers never enter the window's records). No judging here
(cluster/analysis/accuracy.py scores the answers)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Awaitable, Callable, Optional, Sequence

import aiohttp

from cluster.config.eval import EvalSpec
from cluster.errors import PromptSourceError
from cluster.kernel.eval_task import EvalAnswer, EvalItem
from cluster.kernel.gate import PHASE_ALONE, PHASE_UNDER_LOAD
from cluster.kernel.runs import LoadPoint, RunPlan
from cluster.loadgen.gate import GateTarget, ask_greedy
from cluster.loadgen.source_files import jsonl_records, read_source_text, row_error, shown

EVAL_CONCURRENCY = 4
"""Eval prompts in flight at once during a window: a few beside the load, so each joins a batch the load fills
while the window's own concurrency stays what was offered (give or take these few)."""

FIELD = "correctness.eval"


class EvalFileError(PromptSourceError):
    """The accuracy task's file cannot give its prompts and answers."""


def read_eval_items(spec: EvalSpec, base_dir: Path) -> tuple[EvalItem, ...]:
    """The first num_prompts rows of the task's JSONL file (all rows by default), each with a non-empty text prompt
    and an answer that is a string or an integer; every failure an EvalFileError naming the file, line and field."""
    p = Path(spec.path)
    path = p if p.is_absolute() else base_dir / p
    want = f"one JSON object per line with {spec.prompt_field!r} (text) and {spec.answer_field!r} (a string or " \
           "an integer)"
    raw = read_source_text(path, EvalFileError, "the accuracy task's file", f"{FIELD}.path")
    records = jsonl_records(path, raw, EvalFileError, want)
    if not records:
        raise EvalFileError(f"{path}: the accuracy task's file holds no rows: every variant would be judged on no "
                            "answers", file=str(path), field=f"{FIELD}.path", expected=want)
    if spec.num_prompts is not None and spec.num_prompts > len(records):
        raise EvalFileError(f"{path}: {FIELD}.num_prompts is {spec.num_prompts} but the file holds {len(records)} "
                            f"row{'' if len(records) == 1 else 's'}", file=str(path), field=f"{FIELD}.num_prompts",
                            expected=f"at most {len(records)}")
    items: list[EvalItem] = []
    seen: dict[str, tuple[int, str]] = {}
    for rec in records[:spec.num_prompts]:
        v = rec.value
        if not isinstance(v, dict):
            raise row_error(EvalFileError, path, rec.line, rec.row, f"expected a JSON object, got {shown(v)}",
                            f"{FIELD}.path", want)
        prompt, answer = v.get(spec.prompt_field), v.get(spec.answer_field)
        if not isinstance(prompt, str) or not prompt.strip():
            got = "no such field" if spec.prompt_field not in v else shown(prompt)
            raise row_error(EvalFileError, path, rec.line, rec.row, f"field {spec.prompt_field!r}: expected "
                            f"non-empty text, got {got}", f"{FIELD}.prompt_field", want)
        if isinstance(answer, bool) or not isinstance(answer, (str, int)) or (isinstance(answer, str)
                                                                              and not answer.strip()):
            got = "no such field" if spec.answer_field not in v else shown(answer)
            raise row_error(EvalFileError, path, rec.line, rec.row, f"field {spec.answer_field!r}: expected a "
                            f"non-empty string or an integer, got {got}", f"{FIELD}.answer_field", want)
        first = seen.setdefault(prompt, (rec.line, str(answer).strip()))
        if first[1] != str(answer).strip():
            raise row_error(EvalFileError, path, rec.line, rec.row, f"the same {spec.prompt_field!r} as line "
                            f"{first[0]} with another {spec.answer_field!r} ({shown(answer)} vs {first[1]!r}): one "
                            "question has one exact answer", f"{FIELD}.path", want)
        items.append(EvalItem(f"row{rec.row}", rec.line, prompt, str(answer).strip()))
    return tuple(items)


async def _answer(session: aiohttp.ClientSession, engine: GateTarget, base_url: str, model_name: str, item: EvalItem,
                  phase: str, max_tokens: int, timeout_s: float) -> EvalAnswer:
    out = await ask_greedy(session, engine, base_url, item.prompt, max_tokens, model_name, timeout_s)
    tokens = out.completion_tokens if out.completion_tokens is not None else (
        len(out.token_ids) if out.token_ids is not None else None)
    return EvalAnswer(item.item_id, phase, None if out.error else out.text, out.error, tokens)


async def ask_alone(engine: GateTarget, base_url: str, model_name: str, items: Sequence[EvalItem], max_tokens: int,
                    timeout_s: float) -> tuple[EvalAnswer, ...]:
    """Every item asked by itself, one after the other (the server's batch holds it alone)."""
    out = []
    async with aiohttp.ClientSession(headers=engine.headers) as session:
        for item in items:
            out.append(await _answer(session, engine, base_url.rstrip("/"), model_name, item, PHASE_ALONE,
                                     max_tokens, timeout_s))
    return tuple(out)


WindowCompanion = Callable[[int, asyncio.Event], Awaitable[tuple[EvalAnswer, ...]]]
"""What the window runner starts beside its load (loadgen/runner.py `alongside`): given the window's start
(monotonic ns) and an event set when the load's last request has finished, it returns its answers."""


def during_window(engine: GateTarget, base_url: str, model_name: str, items: Sequence[EvalItem], max_tokens: int,
                  timeout_s: float, concurrency: int = EVAL_CONCURRENCY) -> WindowCompanion:
    """The items sent during a window, `concurrency` at a time from its start; none is sent after the load has
    ended (those are answers with the error 'not sent'), and one answered after it is marked during_load=False."""
    async def run(t0_ns: int, load_done: asyncio.Event) -> tuple[EvalAnswer, ...]:
        queue = list(items)
        answers: dict[str, EvalAnswer] = {}
        async with aiohttp.ClientSession(headers=engine.headers) as session:
            async def worker() -> None:
                while queue and not load_done.is_set():
                    item = queue.pop(0)
                    sent = time.monotonic_ns() - t0_ns
                    a = await _answer(session, engine, base_url.rstrip("/"), model_name, item, PHASE_UNDER_LOAD,
                                      max_tokens, timeout_s)
                    done = time.monotonic_ns() - t0_ns
                    answers[item.item_id] = EvalAnswer(a.item_id, a.phase, a.text, a.error, a.output_tokens,
                                                       not load_done.is_set(), sent, done)
            await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
        for item in queue:
            answers[item.item_id] = EvalAnswer(item.item_id, PHASE_UNDER_LOAD, None,
                                               "not sent: the window's load ended first", None, False)
        return tuple(answers[i.item_id] for i in items)
    return run


def heaviest(points: Sequence[LoadPoint]) -> Optional[LoadPoint]:
    """The load point the eval rides in: the highest closed-loop concurrency, else the highest rate (None: none)."""
    closed = [p for p in points if p.shape.closed]
    pool = closed or list(points)
    return max(pool, key=lambda p: p.value) if pool else None


def carries_eval(run: RunPlan, first_workload: str, point: Optional[LoadPoint]) -> bool:
    """Whether `run` is the one of its variant whose window the eval is sent in: the heaviest point of the first
    workload, repeat 0 (a capacity-search probe only when it lands on that point)."""
    return point is not None and run.repeat == 0 and run.workload.name == first_workload \
        and (run.load.kind, run.load.value) == (point.kind, point.value)
