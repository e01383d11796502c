"""Issue 15 item 2: `results compare` names variants whose servers resolved a different running-request cap
(plan.fairness.resolved_cap_findings, which had no caller before)."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.analysis.comparison import resolved_cap_problems
from cluster.dataset.store import DatasetStore
from cluster.plan.runs import make_plan
from cluster.spec.loader import parse_spec_text

SPEC = """
version: 1
name: caps
model: {path: /m, engine: sglang}
server: {args: {max-running-requests: 64, kv-cache-dtype: bf16, attention-backend: triton}}
variants:
  - {name: base, baseline: true}
  - {name: mtp, speculative: {algorithm: NEXTN, num_steps: 2}}
workloads:
  - {name: w, input_tokens: 16, output_tokens: 4, num_requests: 2}
load: {concurrency: [32]}
"""


def test_compare_reports_a_state_slot_capped_variant(tmp_path: Path) -> None:
    spec = parse_spec_text(SPEC)
    store = DatasetStore(str(tmp_path), "caps")
    store.write_experiment_meta({"spec": spec.model_dump(mode="json")})
    caps = {"base": 64, "mtp": 15}  # NEXTN needs several Mamba state slots per request (sglang#36889)
    for p in make_plan(spec):
        resolved = {"max_running_requests": 64, "effective_max_running_requests": caps[p.variant.name]}
        store.write_run(p, {"status": "ok", "duration_s": 1.0, "resolved_args_json": json.dumps(resolved)})
    (line,) = resolved_cap_problems(str(tmp_path), "caps")
    assert line.startswith("error: mtp: resolved-max-running-requests:") and "15 here but 64" in line
