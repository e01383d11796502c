"""The workload audit end to end on local Ray with the simulator: every request's source row and fingerprint reach
the dataset, a good run records sent = planned, and a run whose load actor collapsed its prompts (one workload's
prompts all replaced by the first, injected in a LoadActor subclass) is listed invalid by `results show` with the
reason and left out of `compare`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from cluster.distributed.actors import LoadActorImpl
from cluster.config.loader import parse_spec_text
from cluster.config.workload import WorkloadSpec
from cluster.analysis.results import Results

pytestmark = pytest.mark.ray


class CollapsingLoad(LoadActorImpl):
    """The injected bug: the `collapsed` workload's prompts are all its first prompt (the window still sends n)."""

    def _prompts(self, workload: WorkloadSpec, n: int, seed: int) -> Any:
        prompts = super()._prompts(workload, n, seed)
        return [prompts[0]] * len(prompts) if workload.name == "collapsed" else prompts


def test_a_collapsed_run_is_invalid_in_results_show_and_left_out_of_compare(ray_local: None, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray import cloudpickle

    import cluster.distributed.handles as handles_mod
    from cluster.cli import app
    from cluster.distributed.driver import Driver

    rows = [{"category": "code" if i % 2 else "chat",
             "conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": f"answer {i}"}]}
            for i in range(16)]
    data = tmp_path / "d.json"
    data.write_text(json.dumps(rows))  # compact: every row on line 1, as in the bug
    out = tmp_path / "out"
    spec = parse_spec_text(f"""
version: 1
name: audit
model: {{path: sim://audit, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants:
  - {{name: a, baseline: true}}
workloads:
  - {{name: good, input_tokens: dataset, output_tokens: 6, num_requests: 16,
     prompts: {{source: sharegpt, path: {data}}}}}
  - {{name: collapsed, input_tokens: dataset, output_tokens: 6, num_requests: 16,
     prompts: {{source: sharegpt, path: {data}}}}}
load: {{concurrency: [2]}}
warmup_requests: 0
max_client_lag_ms: 1000
health_timeout_s: 30
output: {out}
""")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]  # by value
    monkeypatch.setattr(handles_mod, "LoadActor", ray.remote(max_restarts=0)(CollapsingLoad))
    result = Driver(spec, tmp_path, None, lambda s: None, lambda p, s: None).run()

    runs = pd.read_parquet(Path(result.dataset_root) / spec.name / "runs").set_index("workload")
    good, bad = runs.loc["good"], runs.loc["collapsed"]
    assert good["status"] == "ok", good["invalid_reasons"]
    assert (good["distinct_prompts_sent"], good["distinct_prompts_planned"]) == (16, 16)
    assert bad["status"] == "invalid"
    assert "workload not the one planned: sent 1 distinct prompts of 16" in bad["invalid_reasons"]
    assert (bad["distinct_prompts_sent"], bad["distinct_prompts_planned"]) == (1, 16)
    reqs = pd.read_parquet(Path(result.dataset_root) / spec.name / "requests")
    g = reqs[reqs["workload"] == "good"]
    assert sorted(g["source_row"]) == list(range(16)) and g["prompt_fingerprint"].nunique() == 16

    shown = CliRunner().invoke(app, ["results", "show", spec.name, "--root", str(out), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    listed = {r["workload"]: r for r in json.loads(shown.output)}
    assert listed["collapsed"]["status"] == "invalid" and "sent 1 distinct prompts" in listed["collapsed"]["reason"]
    from cluster.analysis.comparison import compare_with_ci

    df = compare_with_ci(Results.open(str(out), spec.name), n_boot=100).set_index("workload")
    assert (df.loc["collapsed", "n_runs"], df.loc["collapsed", "n_invalid"]) == (0, 1)
    assert df.loc["good", "n_runs"] == 1
