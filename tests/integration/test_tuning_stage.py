"""Tuning stage on local Ray (8 logical GPUs, simulated engine): split across GPUs, hashed artifacts, reuse."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cluster.plan.runs import expand_variants
from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

SPEC = """
version: 1
name: tune-it
model: {path: /models/sim-qwen35, engine: sim, tp: 8}
sim: {time_scale: 0.0, autotune_time_s: 0.0}
variants:
  - {name: base, baseline: true, args: {disable-flashinfer-autotune: true, moe-runner-backend: flashinfer_cutlass}}
  - name: moe
    args: {moe-runner-backend: triton}
    tuning: {kind: triton_moe, options: {batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128], max_configs: 40}}
  - name: at
    args: {moe-runner-backend: flashinfer_cutlass}
    tuning: {kind: flashinfer_autotune, options: {warmup_requests: 1}}
workloads: [{name: w, input_tokens: 16, output_tokens: 4, num_requests: 2}]
load: {concurrency: [1]}
health_timeout_s: 60
"""


def test_triton_moe_split_then_reused(ray_local: None, tmp_path: Path) -> None:
    from cluster.distributed.tuning_stage import STAGE_STATS, run_tuning_stage

    spec = parse_spec_text(SPEC)
    vs = [v for v in expand_variants(spec) if v.name == "moe"]
    t0 = time.monotonic()
    arts = run_tuning_stage(spec, vs, str(tmp_path), log=lambda s: None)
    first_s = time.monotonic() - t0
    art = arts["moe"]
    assert not art.reused
    gpus = {g for w in art.details["workers"] for g in w["gpu_ids"]}
    assert len(gpus) >= 2 and len(art.details["workers"]) == 8
    rel = "configs/triton_3_4_0/E=512,N=128,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
    assert art.files == (rel,)
    assert (Path(art.path) / rel).is_file() and Path(art.path).parent.parent == tmp_path / "_artifacts"
    tasks = STAGE_STATS["triton_tasks"]
    t1 = time.monotonic()
    again = run_tuning_stage(spec, vs, str(tmp_path), log=lambda s: None)["moe"]
    second_s = time.monotonic() - t1
    assert again.reused and again.hash == art.hash
    assert STAGE_STATS["triton_tasks"] == tasks  # nothing re-tuned
    assert second_s < first_s


def test_flashinfer_autotune_archived_then_reused(ray_local: None, tmp_path: Path) -> None:
    from cluster.distributed.tuning_stage import STAGE_STATS, run_tuning_stage

    spec = parse_spec_text(SPEC)
    vs = [v for v in expand_variants(spec) if v.name == "at"]
    art = run_tuning_stage(spec, vs, str(tmp_path), log=lambda s: None)["at"]
    assert sorted(Path(f).name for f in art.files) == [f"rank_tp{r}_pp0_dp0.json" for r in range(8)]
    launches = STAGE_STATS["autotune_launches"]
    again = run_tuning_stage(spec, vs, str(tmp_path), log=lambda s: None)["at"]
    assert again.reused and again.hash == art.hash and STAGE_STATS["autotune_launches"] == launches
