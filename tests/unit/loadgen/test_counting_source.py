"""A prompt source defined in one test-side module (counting_source.py) is declared in an experiment, plans with its
own run keys, builds its prompts, runs through the load generator against the in-process simulator and is audited
and named as itself, without another file naming it."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Iterator

import pyarrow as pa
import pytest

from cluster.analysis.workload_audit import audit_workload
from cluster.config.loader import parse_spec_text
from cluster.config.sim_knobs import Knobs
from cluster.engines.registry import get_engine
from cluster.errors import UserError
from cluster.loadgen.prompt_sources import (build_prompt_sequence, build_session_plan, register_source,
                                            unregister_source, workload_selection)
from cluster.kernel.window_job import WindowJob
from cluster.loadgen.runner import run_window
from cluster.plan.inputs import check_prompts
from cluster.plan.runs import expand_variants, make_plan
from tests.unit.loadgen.inprocess_sim import served_sim

SPEC = """
version: 1
name: counting
model: {path: sim://m, engine: sim}
variants: [{name: base}]
workloads: [{name: w, input_tokens: 6, output_tokens: 3, num_requests: 10, prompts: {source: counting, %s}}]
load: {concurrency: [2]}
"""


@pytest.fixture(autouse=True)
def counting() -> Iterator[None]:
    # imported here, not at collection, so no other test sees the source; registered again after an earlier teardown
    from tests.unit.loadgen.counting_source import Counting

    register_source(Counting)
    yield
    unregister_source(Counting)


def test_a_registered_source_is_declared_validated_and_keyed_by_its_options() -> None:
    run = make_plan(parse_spec_text(SPEC % "start: 500"))[0]
    prompts = run.workload.prompts
    assert type(prompts).__name__ == "CountingPrompts" and getattr(prompts, "start") == 500
    assert run.workload.identity()["prompts"] == {"source": "counting", "start": 500}
    assert make_plan(parse_spec_text(SPEC % "start: 600"))[0].run_key != run.run_key
    with pytest.raises(UserError, match=r"workloads\.0\.prompts\.start"):
        parse_spec_text(SPEC % "start: 5")
    with pytest.raises(UserError, match=r"workloads\.0\.prompts\.stride"):
        parse_spec_text(SPEC % "start: 500, stride: 2")


def test_preflight_asks_a_registered_source_for_its_own_check(tmp_path: pathlib.Path) -> None:
    spec = parse_spec_text(SPEC % "start: 500")
    assert check_prompts(spec, expand_variants(spec), {}, tmp_path) == []  # it has no file: nothing to refuse


def test_a_registered_source_runs_against_the_simulator_and_is_audited_as_itself() -> None:
    run = make_plan(parse_spec_text(SPEC % "start: 500"))[0]
    w, here = run.workload, pathlib.Path(".")
    prompts = build_prompt_sequence(w, w.num_requests, run.seed, here)
    assert [p.input_ids for p in prompts][:2] == [tuple(range(500, 506)), tuple(range(501, 507))]
    assert build_session_plan(w, w.num_requests, run.seed, here) is None

    async def window() -> pa.Table:
        async with served_sim(Knobs(time_scale=0.001)) as url:
            job = WindowJob(url, w.api, 3, run.load, run.seed, True, 0.0, "m", 30.0, scrape_metrics=False)
            res = await run_window(get_engine("sim"), job, prompts)
        return pa.Table.from_batches([res.requests])

    requests = asyncio.run(window())
    assert requests.column("error").null_count == requests.num_rows == 10
    assert requests.column("prompt_tokens").to_pylist() == [6] * 10
    selection = workload_selection(w, w.num_requests, run.seed, here)
    assert selection.source == "counting"
    audit = audit_workload(requests, selection)
    assert audit.reasons == () and audit.distinct_sent == 10
