"""Accuracy under load end to end on the simulator: a variant whose answers go wrong only in mixed batches answers
the eval task right alone and wrong inside its measured window; compare marks it invalid for speed claims while the
baseline, asked the same way, stays right. The eval's requests never enter the load's records.

Machine load tolerated: the verdicts are answers, not speed; what rests on wall-clock time is that at least 8 of
the 20 eval prompts run while the c8 window's load is in flight. Lateness that falls alike on the load and the eval
companion stretches both and is tolerated at any size. Not measured: a stall of the companion alone for about half
of fast-but-wrong's c8 window (8 rounds of 64 steps at ~0.5 ms, ~0.25 s) could leave fewer than 8 counted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]

SPEC = """
version: 1
name: accuracy
model: {{path: sim://accuracy, engine: sim}}
server: {{args: {{max-running-requests: 16, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.05}}
variants:
  - {{name: baseline, baseline: true}}
  - {{name: fast-but-wrong, sim: {{tuned_speed_factor: 0.7, wrong_answers_in_mixed_batch: true}}}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 64, num_requests: 64}}
load: {{concurrency: [2, 8]}}
warmup_requests: 0
correctness: {{eval: {{path: {task}, num_prompts: 20}}}}
isolation: gpus
max_client_lag_ms: 1000
output: {out}
"""


def test_a_variant_wrong_only_under_load_is_caught(ray_local: None, tmp_path: Path) -> None:
    from cluster.analysis.accuracy import VERDICT_LESS_ACCURATE, accuracy_verdicts
    from cluster.analysis.comparison import compare_with_ci
    from cluster.analysis.results import Results
    from cluster.distributed.driver import run_experiment

    spec = parse_spec_text(SPEC.format(task=REPO / "datasets" / "arithmetic-200.jsonl", out=tmp_path / "results"))
    result = run_experiment(spec, base_dir=tmp_path)
    root = Path(result.dataset_root) / spec.name
    runs = pd.read_parquet(root / "runs")
    assert set(runs["status"]) == {"ok"}, runs[["variant", "status", "invalid_reasons"]]  # the measurement is sound
    # the load's records hold the load's requests only: 64 per run, none of the eval's 20
    reqs = pd.read_parquet(root / "requests")
    assert reqs.groupby(["variant", "load_value"], observed=True).size().eq(64).all()

    rows = pd.read_parquet(root / "correctness")
    ev = rows[rows["task"] == "eval"]
    for variant in ("baseline", "fast-but-wrong"):
        alone = ev[(ev["variant"] == variant) & (ev["phase"] == "alone")]
        assert len(alone) == 20 and alone["correct"].all(), alone[["prompt_id", "expected", "got"]]
        loaded = ev[(ev["variant"] == variant) & (ev["phase"] == "under_load")]
        assert len(loaded) == 20
        # rode in the variant's heaviest run: concurrency 8, repeat 0
        carrier = runs[(runs["variant"] == variant) & (runs["load_value"] == 8.0)]["run_key"].tolist()
        assert set(loaded["run_key"]) == set(carrier)
        assert loaded["counted"].sum() >= 8, loaded[["prompt_id", "evidence"]]
    loaded = ev[(ev["phase"] == "under_load") & ev["counted"]]
    assert loaded[loaded["variant"] == "baseline"]["correct"].all()
    wrong = loaded[loaded["variant"] == "fast-but-wrong"]
    assert not wrong["correct"].any()
    first = wrong.iloc[0]
    assert int(first["got"]) != int(first["expected"]) and f"expected '{first['expected']}'" in first["evidence"]

    results = Results.open(str(root.parent), spec.name)
    verdict = accuracy_verdicts(results.table("correctness"), "baseline")["fast-but-wrong"]
    assert verdict.invalid and verdict.under_load_vs_baseline is not None
    assert verdict.under_load_vs_baseline.high < 0
    assert verdict.alone_vs_baseline is not None and verdict.alone_vs_baseline.diff == 0
    df = compare_with_ci(results, n_boot=200).set_index(["variant", "load_value"])
    for c in (2.0, 8.0):
        row = df.loc[("fast-but-wrong", c)]
        assert row["speedup_tok_s_verdict"] == VERDICT_LESS_ACCURATE, row["speedup_tok_s_verdict"]
        assert any("invalid for speed claims: accuracy under load" in w for w in row["warnings"])
        assert df.loc[("baseline", c), "accuracy_invalid"] == ""
