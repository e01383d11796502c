"""Through the driver on the simulator: a NEXTN variant left at SGLang's speculative cap (48) and offered 64
concurrent requests is invalid with the cap and where it was read; a baseline with an explicit cap of 64 is ok."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

SPEC = """
version: 1
name: caps
model: {{path: sim://caps, engine: sim}}
server: {{args: {{kv-cache-dtype: bf16, attention-backend: flashinfer, enable-metrics: true}}}}
sim: {{time_scale: 0.02}}
variants:
  - {{name: baseline, baseline: true, args: {{max-running-requests: 64}}}}
  - {{name: nextn, speculative: {{algorithm: NEXTN, num_steps: 1}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 32, num_requests: 64}}
load: {{concurrency: [64]}}
warmup_requests: 0
isolation: gpus
max_client_lag_ms: 1000
output: {out}
"""


def test_offered_concurrency_above_the_resolved_cap_is_invalid(ray_local: None, tmp_path: Path) -> None:
    from cluster.distributed.driver import run_experiment

    spec = parse_spec_text(SPEC.format(out=tmp_path / "results"))
    result = run_experiment(spec, base_dir=tmp_path)
    runs = pd.read_parquet(Path(result.dataset_root) / spec.name / "runs").set_index("variant")
    assert runs.loc["baseline", "status"] == "ok", runs.loc["baseline", "invalid_reasons"]
    assert runs.loc["nextn", "status"] == "invalid"
    assert ("offered concurrency 64 > server cap 48 "
            "(server_info.internal_states[0].effective_max_running_requests_per_dp)") in runs.loc["nextn",
                                                                                                "invalid_reasons"]
    base_ev = json.loads(runs.loc["baseline", "provenance_json"])["concurrency"]
    nextn_ev = json.loads(runs.loc["nextn", "provenance_json"])["concurrency"]
    assert (base_ev["offered"], base_ev["cap"], base_ev["cap_declared"]) == (64, 64, 64)
    assert (nextn_ev["offered"], nextn_ev["cap"], nextn_ev["cap_declared"]) == (64, 48, 48)
    # the resolved caps are stored with the resolved args, where fairness compares them
    resolved = {n: json.loads(runs.loc[n, "resolved_args_json"]) for n in ("baseline", "nextn")}
    assert (resolved["baseline"]["effective_max_running_requests"],
            resolved["nextn"]["effective_max_running_requests"]) == (64, 48)
