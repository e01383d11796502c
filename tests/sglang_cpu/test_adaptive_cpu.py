"""SGLang's adaptive speculation as an sglbench variant on real SGLang 0.5.23 on the CPU: launched from a written
adaptive config, accepted by SGLang's own launch pipeline at preflight, and shown on by its resolved /server_info
(the run would be invalid otherwise). CPU numbers with stand-in kernels, never GPU numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpu_pipeline import HEALTH_TIMEOUT_S, load, run, spec_text, table

from cluster.engines.sglang_adaptive import buckets_from_schedule, config_json

pytestmark = pytest.mark.ray

SCHEDULE = [(1, 2), (4, 1)]
"""(concurrency, depth): the shape of a measured `results recommend` schedule, written by the same writer
`--write-adaptive` uses."""


def test_the_adaptive_variant_runs_with_adaptive_on(ray_local: None, sglang_cpu_python: Path, mimo_models: Path,
                                                    tmp_path: Path) -> None:
    cfg = tmp_path / "adaptive.json"
    cfg.write_text(config_json(buckets_from_schedule(SCHEDULE)))
    variants = f"  - {{name: adaptive, speculative: {{algorithm: NEXTN, num_steps: 2, adaptive: {{file: {cfg}}}}}}}"
    text = spec_text("cpu-adaptive", mimo_models / "mix", sglang_cpu_python, tmp_path / "out", variants,
                     concurrency="[1, 4]", num_requests=8, output_tokens=16)
    # one server start: give it the time a loaded shared machine needs (it took over 240 s once here)
    spec = load(text.replace(f"health_timeout_s: {HEALTH_TIMEOUT_S}", "health_timeout_s: 900"))
    log: list[str] = []
    result = run(spec, tmp_path, log=log)
    runs = table(result, spec, "runs").sort_values("load_value")
    print("\n".join(log[-10:]))
    assert list(runs["status"]) == ["ok", "ok"], list(runs["invalid_reasons"]) + list(runs["failure_reason"])
    argv = json.loads(runs["launch_argv_json"].iloc[0])
    assert argv[argv.index("--speculative-adaptive-config") + 1] == str(cfg) and "--speculative-adaptive" in argv
    resolved = json.loads(runs["resolved_args_json"].iloc[0])
    print("resolved /server_info:", {k: resolved.get(k) for k in (
        "speculative_adaptive", "speculative_adaptive_config", "speculative_algorithm", "speculative_num_steps",
        "speculative_eagle_topk", "speculative_num_draft_tokens")})
    assert resolved["speculative_adaptive"] is True and resolved["speculative_adaptive_config"] == str(cfg)
    assert resolved["speculative_algorithm"] == "EAGLE"  # NEXTN resolved to EAGLE, the algorithm adaptive supports
    requests = table(result, spec, "requests")
    assert int(requests["spec_verify_ct"].sum()) > 0
    for _, r in runs.iterrows():
        m = json.loads(r["metrics_json"])
        print(f"c{r['load_value']:g}: accept length {m.get('accept_length')}, output tok/s {m.get('output_tok_s')}")
