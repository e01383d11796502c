"""A run offered more concurrency than the server ran is invalid: the resolved cap, and the scraped gauges."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_run_row import SEGMENT, SERVER, _window  # noqa: E402

from cluster.analysis.run_row import build_run_row, offered_concurrency  # noqa: E402
from cluster.kernel.run_facts import ServerFacts
from cluster.kernel.window import MeasuredWindow  # noqa: E402
from cluster.loadgen.server_metrics import SERVER_METRICS_BATCH_SCHEMA  # noqa: E402
from cluster.plan.runs import make_plan
from cluster.kernel.runs import LoadPoint, RunPlan
from cluster.config.loader import parse_spec_text  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data" / "sglang_0.5.23_cpu"

SPEC = """
version: 1
name: caps
model: {{path: /m, engine: sglang}}
variants:
  - {{name: base, baseline: true}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: 1}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 4, num_requests: 64}}
load: {load}
"""


def plan(load: str = "{concurrency: [64]}", variant: str = "nextn") -> tuple[RunPlan, Any]:
    spec = parse_spec_text(SPEC.format(load=load))
    return next(p for p in make_plan(spec) if p.variant.name == variant), spec


def server(tag: Optional[str]) -> ServerFacts:
    infos = {"server_info": json.loads((DATA / f"server_info_{tag}.json").read_text())} if tag else {}
    return ServerFacts(**{**SERVER.__dict__, "infos": infos})


def window(n: int, scraped: Optional[list[tuple[float, float, float]]] = None) -> MeasuredWindow:
    """n ok requests; scraped = (t_s, running, queued) samples of SGLang's gauges."""
    w = _window(n, 0)
    sm = None
    if scraped is not None:
        rows = [(int(t * 1e9), name, "model_name=tiny", val) for t, r, q in scraped
                for name, val in (("sglang:num_running_reqs", r), ("sglang:num_queue_reqs", q))]
        sm = pa.RecordBatch.from_pydict({"t_ns": [r[0] for r in rows], "metric": [r[1] for r in rows],
                                         "labels": [r[2] for r in rows], "value": [r[3] for r in rows]},
                                        schema=SERVER_METRICS_BATCH_SCHEMA)
    return MeasuredWindow(**{**w.__dict__, "server_metrics": sm})


def test_offered_concurrency_of_closed_and_open_loops() -> None:
    p, _ = plan()
    assert offered_concurrency(p, 64) == 64 and offered_concurrency(p, 10) == 10
    rate = RunPlan(**{**p.__dict__, "load": LoadPoint("rate", 5.0, 80)})
    assert offered_concurrency(rate, 100) == 80
    assert offered_concurrency(RunPlan(**{**p.__dict__, "load": LoadPoint("rate", 5.0)}), 100) is None


def test_nextn_offered_64_on_the_real_48_cap_is_invalid_with_the_cap_and_its_source() -> None:
    p, spec = plan()
    row = build_run_row(p, window(64), server("echo_nextn1"), SEGMENT, spec, [], None)
    assert row.status == "invalid"
    assert ("offered concurrency 64 > server cap 48 "
            "(server_info.internal_states[0].effective_max_running_requests_per_dp)") in row.invalid_reasons
    ev = json.loads(row.provenance_json)["concurrency"]
    assert (ev["offered"], ev["cap"], ev["cap_declared"]) == (64, 48, 48)


def test_open_loop_max_concurrency_is_checked_too() -> None:
    p, spec = plan("{request_rate: [4], max_concurrency: 64}")
    row = build_run_row(p, window(64), server("rand_nextn3"), SEGMENT, spec, [], None)
    assert row.status == "invalid" and "offered concurrency 64 > server cap 48" in row.invalid_reasons


@pytest.mark.parametrize("tag,load", [("echo_baseline", "{concurrency: [64]}"), ("echo_nextn1", "{concurrency: [32]}"),
                                      (None, "{concurrency: [64]}")])
def test_within_the_cap_or_without_a_figure_is_ok(tag: Optional[str], load: str) -> None:
    p, spec = plan(load)
    row = build_run_row(p, window(64), server(tag), SEGMENT, spec, [], None)
    assert row.status == "ok", row.invalid_reasons


def test_scraped_gauges_flag_a_server_that_queued_below_the_offered_concurrency() -> None:
    p, spec = plan()
    # no cap figure in server_info, but running never reached 64 while requests queued
    capped = window(64, [(-0.5, 0, 0), (0.5, 48, 16), (1.0, 48, 16), (1.5, 48, 0), (9.0, 64, 0)])
    row = build_run_row(p, capped, server(None), SEGMENT, spec, [], None)
    assert row.status == "invalid"
    assert ("scraped sglang:num_running_reqs peaked at 48 < offered concurrency 64 while sglang:num_queue_reqs "
            "reached 16 (non-empty on 67% of the scrapes)") in row.invalid_reasons
    full = window(64, [(0.5, 60, 4), (1.5, 64, 0)])
    assert build_run_row(p, full, server(None), SEGMENT, spec, [], None).status == "ok"
    idle_queue = window(64, [(0.5, 40, 0), (1.5, 40, 0)])
    assert build_run_row(p, idle_queue, server(None), SEGMENT, spec, [], None).status == "ok"
    # a queue seen only while requests were being admitted (stale gauges between SGLang's stats logs) is normal
    admission = window(64, [(0.1, 16, 16), (0.6, 40, 0), (1.1, 40, 0), (1.6, 40, 0)])
    assert build_run_row(p, admission, server(None), SEGMENT, spec, [], None).status == "ok"
    single = window(64, [(0.5, 16, 16)])
    assert build_run_row(p, single, server(None), SEGMENT, spec, [], None).status == "ok"
