"""A load shape defined in one test-side module (burst_shape.py) plans, runs through the load generator against the
in-process simulator and is labelled everywhere, without another file naming it."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Iterator

import pytest

from cluster.analysis.comparison import point_label, short_point_label
from cluster.analysis.run_row import offered_concurrency
from cluster.analysis.steady_state import steady_state
from cluster.config.loader import parse_spec_text
from cluster.config.sim_knobs import Knobs
from cluster.errors import UserError
from cluster.engines.registry import get_engine
from cluster.loadgen.prompt_sources import build_prompts
from cluster.kernel.window_job import WindowJob
from cluster.loadgen.runner import run_window
from cluster.kernel.load_shapes import register_load_shape, unregister_load_shape
from cluster.plan.runs import make_plan
from tests.unit.loadgen.inprocess_sim import served_sim

SPEC = """
version: 1
name: bursts
model: {path: sim://m, engine: sim}
variants: [{name: base}]
workloads: [{name: w, input_tokens: 8, output_tokens: 3, num_requests: 12}]
load: {concurrency: [2], %s}
"""


@pytest.fixture(autouse=True)
def burst() -> Iterator[None]:
    # imported here, not at collection, so no other test sees the shape; registered again after an earlier teardown
    from tests.unit.kernel.burst_shape import Burst

    register_load_shape(Burst)
    yield
    unregister_load_shape(Burst.kind)


def test_a_registered_shape_plans_its_points_with_their_own_label_and_run_key() -> None:
    runs = make_plan(parse_spec_text(SPEC % "shapes: [{shape: burst, rates: [40, 80], size: 4}]"))
    assert [r.load.label for r in runs] == ["c2", "b40 size 4", "b80 size 4"]
    assert runs[1].load.identity() == {"kind": "burst", "value": 40.0, "max_concurrency": None,
                                       "params": (("size", 4.0),)}
    spec = parse_spec_text(SPEC % "shapes: [{shape: burst, rates: [40, 80], size: 4}]")
    assert type(spec).model_validate(spec.model_dump(mode="json")) == spec  # experiment.json keeps its options
    other = make_plan(parse_spec_text(SPEC % "shapes: [{shape: burst, rates: [40, 80], size: 2}]"))
    assert other[0].run_key == runs[0].run_key and other[1].run_key != runs[1].run_key
    with pytest.raises(UserError, match=r"load\.shapes\.0\.size"):
        parse_spec_text(SPEC % "shapes: [{shape: burst, rates: [40], size: 0}]")
    with pytest.raises(UserError, match=r"load\.shapes\.0\.shape: .*unknown load shape 'bursty'.*burst"):
        parse_spec_text(SPEC % "shapes: [{shape: bursty, rates: [40], size: 2}]")


def test_a_registered_shape_runs_its_schedule_against_the_simulator_and_is_labelled() -> None:
    spec = parse_spec_text(SPEC % "max_concurrency: 8, shapes: [{shape: burst, rates: [200], size: 4}]")
    run = make_plan(spec)[1]
    prompts = build_prompts(run.workload, run.workload.num_requests, run.seed, pathlib.Path("."))

    async def window() -> object:
        async with served_sim(Knobs(time_scale=0.01)) as url:
            job = WindowJob(url, "native", 3, run.load, run.seed, True, 0.0, "m", 30.0)
            return await run_window(get_engine("sim"), job, prompts)

    res = asyncio.run(window())
    req = res.requests.to_pydict()  # type: ignore[attr-defined]
    assert req["error"] == [None] * 12
    gap_ns = round(4 / 200 * 1e9)  # bursts of 4 at a mean 200 req/s
    assert req["intended_send_ns"] == [(i // 4) * gap_ns for i in range(12)]
    assert point_label(run.load.kind, run.load.value) == "burst rate 200 req/s"
    assert short_point_label(run.load.kind, run.load.value) == "b200"
    assert offered_concurrency(run, 12) == 8  # an open shape offers its max_concurrency
    ss = steady_state(res.requests, run.load.kind, run.load.value, res.duration_s)  # type: ignore[attr-defined]
    assert ss is not None and "req/s" in ss.rule  # judged by the open-loop rule
