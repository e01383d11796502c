"""The correctness gate through the driver: garbage output and a NEXTN variant whose MTP weights are missing are
marked invalid with evidence before any load runs; a harmless late divergence passes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

SPEC = """
version: 1
name: {name}
model: {{path: sim://{name}, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants:
{variants}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 16, num_requests: {num_requests}}}
load: {{concurrency: [2]}}
warmup_requests: 0
{extra}isolation: gpus
max_client_lag_ms: 1000
output: {out}
"""
"""One small simulated experiment; each test names its variants (the baseline and a garbage variant first)."""

BASE_VARIANTS = """  - {name: baseline, baseline: true}
  - {name: garbage, sim: {garbage_output: true}}"""

GATE_VARIANTS = BASE_VARIANTS + """
  - {name: no-mtp, speculative: {algorithm: NEXTN, num_steps: 2}, sim: {mtp_absent: true}}
  - {name: drifts-late, speculative: {algorithm: NEXTN, num_steps: 2}, sim: {late_divergence_after: 24}}"""


def test_gate_marks_bad_variants_invalid(ray_local: None, tmp_path: Path) -> None:
    from cluster.distributed.driver import run_experiment

    spec = parse_spec_text(SPEC.format(name="gate", variants=GATE_VARIANTS, num_requests=4, extra="",
                                       out=tmp_path / "results"))
    result = run_experiment(spec, base_dir=tmp_path)
    root = Path(result.dataset_root) / spec.name
    runs = pd.read_parquet(root / "runs").set_index("variant")
    assert runs.loc["baseline", "status"] == "ok"
    assert runs.loc["drifts-late", "status"] == "ok", runs.loc["drifts-late", "invalid_reasons"]
    assert runs.loc["garbage", "status"] == "invalid"
    assert "correctness gate failed" in runs.loc["garbage", "invalid_reasons"]
    assert runs.loc["no-mtp", "status"] == "invalid"
    assert "accept" in runs.loc["no-mtp", "invalid_reasons"].lower()
    # invalid variants spent no time on load (no request rows), except one invalid by the acceptance floor alone:
    # measured for its acceptance health (docs/acceptance-health.md), its runs still invalid
    assert runs.loc["no-mtp", "invalid_reasons"].startswith("correctness gate failed: acceptance length 1.000 <= 1.05")
    reqs = pd.read_parquet(root / "requests")
    assert set(reqs["variant"].astype(str)) == {"baseline", "drifts-late", "no-mtp"}

    gate = pd.read_parquet(root / "correctness")
    assert set(gate["variant"].astype(str)) == {"baseline", "garbage", "no-mtp", "drifts-late"}
    g = gate[gate["variant"] == "garbage"]
    assert not g["variant_passed"].any() and g["evidence"].str.len().gt(0).all()
    # each prompt alone, then all at once (concurrency 2 leaves no room for filler requests beside 3 prompts)
    assert (gate.groupby(["variant", "phase"]).size() == 3).all() and set(gate["phase"]) == {"alone", "under_load"}
    assert set(gate[gate["phase"] == "under_load"]["filler_requests"]) == {0}
    late = gate[(gate["variant"] == "drifts-late") & (gate["phase"] == "alone")].set_index("prompt_id")
    # the drift shows up as a shorter common prefix on the long answer, but stays above the threshold
    assert late.loc["reasoning", "common_prefix_tokens"] == 24
    assert late["variant_passed"].all()


def test_garbage_in_the_measured_window_makes_the_run_invalid_and_keeps_the_ids(ray_local: None,
                                                                                tmp_path: Path) -> None:
    """Issue 15 item 4 end to end: with no gate to stop it, a variant whose output is garbage runs its window, and
    the window's deterministic output sample (1 in 32, at least 4) marks the run invalid; the ids are stored."""
    import json

    from cluster.distributed.driver import run_experiment

    spec = parse_spec_text(SPEC.format(name="samples", variants=BASE_VARIANTS, num_requests=8,
                                       extra="correctness: {enabled: false}\n", out=tmp_path / "results"))
    result = run_experiment(spec, base_dir=tmp_path)
    root = Path(result.dataset_root) / "samples"
    runs = pd.read_parquet(root / "runs").set_index("variant")
    assert runs.loc["baseline", "status"] == "ok", runs.loc["baseline", "invalid_reasons"]
    assert runs.loc["garbage", "status"] == "invalid"
    assert "4 of 4 sampled outputs are garbage" in runs.loc["garbage", "invalid_reasons"]
    evidence = json.loads(runs.loc["garbage", "provenance_json"])["output_sample"]
    assert evidence["judged"] and evidence["indices"] == [0, 2, 4, 6] and len(evidence["degenerate"]) == 4
    samples = pd.read_parquet(root / "output_samples")
    by_variant = samples.groupby(samples["variant"].astype(str))
    assert by_variant.size().to_dict() == {"baseline": 4, "garbage": 4}
    assert by_variant["degenerate"].apply(lambda s: s.notna().sum()).to_dict() == {"baseline": 0, "garbage": 4}
    assert samples["output_ids"].map(len).gt(0).all()
