"""The accuracy task's file (rows, file:line:field errors) and its sender: alone, and beside a measured window
against the in-process simulator whose knob makes answers wrong only in a mixed batch."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pyarrow as pa
import pytest

from cluster.analysis.accuracy import answer_correct
from cluster.config.eval import EvalSpec
from cluster.config.sim_knobs import Knobs
from cluster.engines.base import Prompt
from cluster.engines.registry import get_engine
from cluster.kernel.gate import PHASE_ALONE, PHASE_UNDER_LOAD
from cluster.kernel.runs import LoadPoint
from cluster.loadgen.eval import EvalFileError, ask_alone, during_window, read_eval_items
from cluster.kernel.eval_task import EvalAnswer, EvalItem
from cluster.loadgen.runner import run_window
from cluster.kernel.window_job import WindowJob
from tests.unit.loadgen.inprocess_sim import served_sim

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_the_shipped_task_reads_and_num_prompts_takes_the_first_rows() -> None:
    items = read_eval_items(EvalSpec(path="datasets/arithmetic-200.jsonl"), REPO)
    assert len(items) == 200 and items[0].item_id == "row0" and items[0].line == 1
    first = json.loads((REPO / "datasets/arithmetic-200.jsonl").read_text().splitlines()[0])
    assert (items[0].prompt, items[0].expected) == (first["prompt"], str(first["answer"]))
    assert read_eval_items(EvalSpec(path="datasets/arithmetic-200.jsonl", num_prompts=5), REPO) == items[:5]


@pytest.mark.parametrize(("text", "spec", "where", "field", "says"), [
    ('{"prompt": "q", "answer": 1}\n{"prompt": "q2"}\n', {}, ":2", "correctness.eval.answer_field",
     "field 'answer': expected a non-empty string or an integer, got no such field"),
    ('{"prompt": "q", "answer": true}\n', {}, ":1", "correctness.eval.answer_field", "got True"),
    ('{"q": "x", "a": 1}\n', {"prompt_field": "q", "answer_field": "a"}, None, None, None),
    ('{"prompt": "", "answer": 1}\n', {}, ":1", "correctness.eval.prompt_field", "expected non-empty text"),
    ('{"prompt": "q", "answer": 1}\n\n[1]\n', {}, ":3", "correctness.eval.path", "expected a JSON object"),
    ('{"prompt": "q", "answer": 1}\n{"prompt": \n', {}, ":2", None, "invalid JSON"),
    ('{"prompt": "q", "answer": 1}\n', {"num_prompts": 2}, "", "correctness.eval.num_prompts",
     "num_prompts is 2 but the file holds 1 row"),
])
def test_a_bad_row_names_file_line_and_field(tmp_path: pathlib.Path, text: str, spec: dict[str, object],
                                             where: str | None, field: str | None, says: str | None) -> None:
    f = tmp_path / "task.jsonl"
    f.write_text(text)
    model = EvalSpec.model_validate({"path": "task.jsonl", **spec})
    if where is None:
        assert read_eval_items(model, tmp_path)[0].expected == "1"
        return
    with pytest.raises(EvalFileError) as info:
        read_eval_items(model, tmp_path)
    assert str(info.value).startswith(f"{f}{where}") and says is not None and says in str(info.value)
    if field is not None:
        assert info.value.field == field
    assert info.value.file is not None and info.value.file.startswith(str(f))


def test_a_missing_file_is_named(tmp_path: pathlib.Path) -> None:
    with pytest.raises(EvalFileError, match="no.jsonl"):
        read_eval_items(EvalSpec(path="no.jsonl"), tmp_path)


ENGINE = get_engine("sim")


async def _with_sim(knobs: Knobs, body):  # type: ignore[no-untyped-def]
    async with served_sim(knobs) as url:
        return await body(url)


ITEMS = read_eval_items(EvalSpec(path="datasets/arithmetic-200.jsonl", num_prompts=8), REPO)


def _run(knobs: Knobs) -> tuple[tuple[EvalAnswer, ...], tuple[EvalAnswer, ...], pa.RecordBatch]:
    async def body(url: str) -> tuple[tuple[EvalAnswer, ...], tuple[EvalAnswer, ...], pa.RecordBatch]:
        alone = await ask_alone(ENGINE, url, "m", ITEMS, 16, 10.0)
        prompts = [Prompt(input_ids=tuple(range(1, 17))) for _ in range(48)]
        res = await run_window(ENGINE, WindowJob(url, "native", 64, LoadPoint("concurrency", 8), 7, True, 0.0, "m",
                                                 10.0, scrape_metrics=False), prompts, alongside=during_window(ENGINE,
                                                 url, "m", ITEMS, 16, 10.0))
        return alone, res.eval_answers, res.requests
    out: tuple[tuple[EvalAnswer, ...], tuple[EvalAnswer, ...], pa.RecordBatch] = asyncio.run(_with_sim(knobs, body))
    return out


def _score(items: tuple[EvalItem, ...], answers: tuple[EvalAnswer, ...]) -> int:
    return sum(answer_correct(i.expected, a.text) for i, a in zip(items, answers))


def test_wrong_only_in_a_mixed_batch_is_right_alone_and_wrong_beside_the_load() -> None:
    alone, loaded, requests = _run(Knobs(time_scale=0.02, wrong_answers_in_mixed_batch=True))
    assert [a.phase for a in alone] == [PHASE_ALONE] * 8 and _score(ITEMS, alone) == 8
    assert [a.phase for a in loaded] == [PHASE_UNDER_LOAD] * 8
    counted = [a for a in loaded if a.during_load]
    assert len(counted) == 8, [a.error for a in loaded]
    assert _score(ITEMS, loaded) == 0
    assert all(a.sent_ns is not None and a.answered_ns is not None and a.sent_ns < a.answered_ns for a in loaded)
    # the load's records hold the load's 48 requests only: the eval answers are not among them
    assert requests.num_rows == 48 and set(requests.column("max_tokens").to_pylist()) == {64}


def test_without_the_knob_answers_stay_right_under_load() -> None:
    alone, loaded, _ = _run(Knobs(time_scale=0.02))
    assert _score(ITEMS, alone) == 8 and _score(ITEMS, loaded) == 8


def test_items_left_when_the_load_ends_are_not_sent() -> None:
    async def body(url: str) -> tuple[EvalAnswer, ...]:
        done = asyncio.Event()
        done.set()  # the load is already over
        return await during_window(ENGINE, url, "m", ITEMS, 16, 10.0)(0, done)
    answers = asyncio.run(_with_sim(Knobs(time_scale=0.0), body))
    assert [a.error for a in answers] == ["not sent: the window's load ended first"] * 8
    assert all(a.during_load is False and a.text is None for a in answers)


def test_the_eval_rides_in_the_heaviest_point_of_the_first_workload_repeat_0() -> None:
    from cluster.config.loader import parse_spec_text
    from cluster.loadgen.eval import carries_eval, heaviest
    from cluster.plan.runs import load_points, make_plan

    spec = parse_spec_text("""
version: 1
name: e
model: {path: sim://m, engine: sim}
variants: [{name: a, baseline: true}, {name: b}]
workloads: [{name: w1, input_tokens: 8, output_tokens: 8, num_requests: 8},
            {name: w2, input_tokens: 8, output_tokens: 8, num_requests: 8}]
load: {concurrency: [8, 2], request_rate: [50]}
repeats: 2
""")
    point = heaviest(load_points(spec))
    assert point is not None and (point.kind, point.value) == ("concurrency", 8.0)  # closed loop before any rate
    carriers = [p for p in make_plan(spec) if carries_eval(p, "w1", point)]
    assert sorted((p.variant.name, p.workload.name, p.load.value, p.repeat) for p in carriers) == \
        [("a", "w1", 8.0, 0), ("b", "w1", 8.0, 0)]
    rates = [p for p in load_points(spec) if p.kind == "rate"]
    assert heaviest(rates) == rates[0] and heaviest([]) is None
