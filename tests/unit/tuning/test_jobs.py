"""The tuning stage's decision (cluster/tuning/jobs.py): per tuned variant its job or refusal, from each engine's
answers (cluster/engines/tuning_surfaces.py), without Ray and without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.config.loader import parse_spec_text
from cluster.engines.registry import get_tuning_surface
from cluster.engines.tuning_contract import TuningError
from cluster.engines.tuning_surfaces import GpuTuningSurface, SimTuningSurface
from cluster.errors import UserError
from cluster.plan.runs import expand_variants
from cluster.tuning.jobs import AutotuneJob, MoeSearchJob, RefusedJob, decide_tuning
from cluster.version import SGLANG_RELEASE

SPEC = """
version: 1
name: t
model: {{path: {path}, engine: {engine}, tp: 8}}
sim: {{moe_num_experts: 64, moe_intermediate_size: 512, gpu_name: SIM GPU, triton_version: 3.9.0}}
variants:
  - {{name: base, baseline: true}}
  - {{name: at, tuning: {{kind: flashinfer_autotune, options: {{extend: true, warmup_requests: 3}}}}}}
  - name: moe
    tuning: {{kind: triton_moe, options: {{batch_sizes: [1, 2, 4], ep: 2{options}}}}}
workloads: [{{name: w, input_tokens: 8, output_tokens: 4, num_requests: 2}}]
load: {{concurrency: [1]}}
"""


def decide(engine: str, path: str = "/m", options: str = ""):  # type: ignore[no-untyped-def]
    spec = parse_spec_text(SPEC.format(engine=engine, path=path, options=options))
    return decide_tuning(expand_variants(spec), get_tuning_surface, spec.cluster.gpus_per_node)


def test_sim_jobs_take_gpu_model_and_device_from_the_knobs() -> None:
    at, moe = decide("sim").jobs  # the untuned baseline makes no job
    assert isinstance(at, AutotuneJob) and (at.variant.name, at.extend, at.warmup_requests) == ("at", True, 3)
    assert at.declared_facts is not None and at.declared_facts.gpu_name == "SIM GPU"
    assert (at.declared_facts.gpu_count, at.declared_facts.sglang_version) == (8, SGLANG_RELEASE)
    assert isinstance(moe, MoeSearchJob)
    # E = 64 experts / ep 2 = 32; N = 512 / (tp 8 / ep 2) = 128
    assert (moe.shape.num_experts, moe.shape.shard_n, moe.batch_sizes) == (32, 128, (1, 2, 4))
    assert (moe.device.mode, moe.device.device_name, moe.device.triton_version) == ("sim", "SIM GPU", "3.9.0")
    assert moe.worker_batches(8, 2) == [[1, 4], [2]]  # 3 batch sizes over the cluster's 2 GPUs, round robin
    assert moe.key(at.declared_facts)["extra"]["E"] == 32


def test_a_real_engine_probes_its_gpu_and_reads_its_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {
        "num_experts": 128, "moe_intermediate_size": 768, "hidden_size": 2048, "num_experts_per_tok": 8}}))
    at, moe = decide("sglang", str(tmp_path)).jobs
    assert at.declared_facts is None and moe.declared_facts is None  # probed on a GPU node by the Ray side
    assert isinstance(moe, MoeSearchJob) and moe.device.mode == "cuda"
    assert (moe.shape.num_experts, moe.shape.shard_n) == (64, 192)  # 128 / 2; 768 / (8 / 2)


def test_an_unreadable_or_nvfp4_checkpoint_refuses_only_its_variant(tmp_path: Path) -> None:
    _, moe = decide("sglang", str(tmp_path / "absent")).jobs
    assert isinstance(moe, RefusedJob) and "config.json" in str(moe.error)
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_algo": "NVFP4"}}))
    _, moe = decide("sglang", str(tmp_path)).jobs
    assert isinstance(moe, RefusedJob) and "NVFP4" in str(moe.error)


def test_refusals_that_need_no_checkpoint_raise_before_any_job(tmp_path: Path) -> None:
    cfg = tmp_path / "base.json"
    cfg.write_text(json.dumps({"quantization_config": {"quant_algo": "NVFP4"}}))
    with pytest.raises(TuningError, match="NVFP4"):
        decide("sglang", options=f", model_config: {cfg}")
    with pytest.raises(TuningError, match="NVFP4"):  # the simulator's declared MoE, refused by its dtype
        decide("sim", options=", dtype: nvfp4")


def test_each_engine_has_its_surface() -> None:
    assert isinstance(get_tuning_surface("sim"), SimTuningSurface)
    assert isinstance(get_tuning_surface("sglang"), GpuTuningSurface)
    assert isinstance(get_tuning_surface("vllm"), GpuTuningSurface)
    with pytest.raises(UserError, match="unknown engine"):
        get_tuning_surface("tgi")
