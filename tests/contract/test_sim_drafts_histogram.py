"""End to end on the live simulator: its per-position accept draws travel as SGLang's spec_correct_drafts_histogram
over the wire (native and OpenAI streams), the load client records them per request, and acceptance_by_position
measures rates whose 95 % intervals hold the simulator's known per-category probabilities."""

from __future__ import annotations

import pathlib
from typing import Callable

import pandas as pd
import pyarrow as pa
import pytest
from sim_process import SimHandle

from cluster.analysis.acceptance_positions import ALL_CATEGORIES, acceptance_by_position
from cluster.config.workload import WorkloadSpec
from cluster.engines.sglang import SGLangEngine
from cluster.kernel.runs import LoadPoint
from cluster.loadgen.prompt_sources import build_prompt_sequence
from cluster.loadgen.runner import run_load_point
from cluster.kernel.window_job import WindowJob

SPEC = ["--max-running-requests", "16", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
PROBS = {"code": (0.95, 0.85, 0.6), "chat": (0.7, 0.5, 0.3)}


@pytest.mark.parametrize("api", ["native", "completions"])
def test_the_simulators_known_rates_land_in_the_measured_intervals(sim_factory: Callable[..., SimHandle],
                                                                  tmp_path: pathlib.Path, api: str) -> None:
    sim = sim_factory(SPEC, {"seed": 3, "accept_probs": list(PROBS["chat"]),
                             "category_accept_probs": {"code": list(PROBS["code"])}})
    rows = tmp_path / "p.jsonl"
    rows.write_text("".join(f'{{"conversations": [{{"from": "human", "value": "q{i} {c} " }}], "category": "{c}"}}\n'
                            for i in range(40) for c in ("code", "chat")))
    w = WorkloadSpec.model_validate({"name": "w", "input_tokens": "dataset", "output_tokens": 96, "num_requests": 80,
                                     "api": api, "ignore_eos": True,
                                     "prompts": {"source": "sharegpt", "path": str(rows)}})
    prompts = build_prompt_sequence(w, 80, seed=2, base_dir=tmp_path)
    res = run_load_point(SGLangEngine(), WindowJob(sim.base, api, 96, LoadPoint("concurrency", 16), 2, True, 0.0, "m",
                                                   60.0, scrape_metrics=False), prompts)
    t = res.requests
    assert all(e is None for e in t.column("error").to_pylist())
    hists = t.column("spec_correct_drafts_histogram").to_pylist()
    assert all(h is not None and sum(h) == v for h, v in zip(hists, t.column("spec_verify_ct").to_pylist()))
    n = t.num_rows
    table = pa.Table.from_batches([t]).append_column("run_key", pa.array(["r"] * n)).append_column(
        "workload", pa.array(["w"] * n)).append_column("variant", pa.array(["nextn-3"] * n))
    groups = {g.category: g for g in acceptance_by_position(
        table, pd.DataFrame({"run_key": ["r"], "status": ["ok"], "spec_num_steps": [3]}))}
    assert set(groups) == {ALL_CATEGORIES, "code", "chat"} and groups["code"].requests == 40
    for cat, probs in PROBS.items():
        for p, prob in zip(groups[cat].positions, probs):
            assert p.conditional.low is not None and p.conditional.high is not None
            assert p.conditional.low <= prob <= p.conditional.high, (cat, p.position, p.conditional, prob)
