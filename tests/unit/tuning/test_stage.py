"""Tuning stage, pure parts: hashing, reuse keys, SGLang file naming, NVFP4 refusal, sweeps, archives, sim contract."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cluster.engines import sglang_tuning as sgt
from cluster.sim import tuning as st
from cluster.plan.runs import expand_backend_sweep, expand_variants
from cluster.config.tuning import BackendSweepTuning
from cluster.config.loader import load_spec, parse_spec_text
from cluster.tuning.stage import (artifact_key, merge_moe_configs, split_batch_sizes, tuning_env_and_args,
                                  tuning_options_check)
from cluster.engines.tuning_contract import GpuFacts, MoeModelConfig, TuningError, moe_shape
from cluster.tuning.artifacts import ArtifactStore, content_hash, key_id
from cluster.tuning.moe_search import simulated_search

REPO = Path(__file__).resolve().parents[3]
QWEN35 = {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
          "text_config": {"num_experts": 512, "moe_intermediate_size": 1024, "hidden_size": 4096,
                          "num_experts_per_tok": 10}}
FACTS = GpuFacts("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "580.1", 8, "0.5.23", "0.6.12", "3.4.0")
SPEC = """
version: 1
name: t
model: {path: /m, engine: sim, tp: 8}
variants:
  - {name: base, baseline: true, args: {disable-flashinfer-autotune: true, moe-runner-backend: flashinfer_cutlass}}
  - name: at
    args: {moe-runner-backend: flashinfer_cutlass}
    tuning: {kind: flashinfer_autotune}
  - name: sweep
    tuning: {kind: backend_sweep, options: {moe_runner_backend: [flashinfer_cutlass, marlin],
                                            fp4_gemm_backend: [flashinfer_cudnn, flashinfer_cutlass]}}
workloads: [{name: w, input_tokens: 8, output_tokens: 4, num_requests: 2}]
load: {concurrency: [1]}
"""


def variants():
    return expand_variants(parse_spec_text(SPEC))


def test_content_hash_stable_and_sensitive() -> None:
    a = {"x/rank_tp0.json": b"{}", "x/rank_tp1.json": b"[1]"}
    h = content_hash(a)
    assert h == content_hash(dict(reversed(list(a.items()))))
    assert len(h) == 64
    assert content_hash({**a, "x/rank_tp1.json": b"[2]"}) != h
    assert content_hash({"x/rank_tp0.jso": b"n{}", "x/rank_tp1.json": b"[1]"}) != h  # path/bytes boundary
    assert content_hash({"y/rank_tp0.json": b"{}", "x/rank_tp1.json": b"[1]"}) != h


def test_reuse_key_matching(tmp_path: Path) -> None:
    v = variants()[1]
    k1 = artifact_key("flashinfer_autotune", v, FACTS)
    assert k1 == artifact_key("flashinfer_autotune", v, FACTS)
    assert k1["backends"] == {"moe-runner-backend": "flashinfer_cutlass"}
    other_gpu = dataclasses.replace(FACTS, gpu_name="NVIDIA H200")
    other_tp = dataclasses.replace(v, tp=4)
    other_be = dataclasses.replace(v, args={"moe-runner-backend": "marlin"})
    other_fi = dataclasses.replace(FACTS, flashinfer_version="0.6.13")
    for k2 in (artifact_key("flashinfer_autotune", v, other_gpu), artifact_key("flashinfer_autotune", other_tp, FACTS),
               artifact_key("flashinfer_autotune", other_be, FACTS), artifact_key("flashinfer_autotune", v, other_fi),
               artifact_key("flashinfer_autotune", v, dataclasses.replace(FACTS, driver_version="590.0"))):
        assert key_id(k2) != key_id(k1)
    store = ArtifactStore(str(tmp_path))
    art = store.put("flashinfer_autotune", k1, {"flashinfer/autotune/a.json": b"{}"}, "at")
    assert store.find(k1).hash == art.hash and store.find(k1).reused
    assert store.find(artifact_key("flashinfer_autotune", v, other_gpu)) is None


def test_archive_round_trip_and_corruption(tmp_path: Path) -> None:
    store = ArtifactStore(str(tmp_path))
    files = {"configs/triton_3_4_0/E=512,N=128,device_name=X.json": b'{"1": {}}', "b/c.json": b"2"}
    key = {"kind": "triton_moe", "n": 1}
    art = store.put("triton_moe", key, files, "v", {"tuning_s": 1.5})
    assert Path(art.path) == tmp_path / "_artifacts" / "triton_moe" / art.hash[:16]
    for rel, data in files.items():
        assert (Path(art.path) / rel).read_bytes() == data
    manifest = json.loads((Path(art.path) / "manifest.json").read_text())
    assert manifest["hash"] == art.hash == content_hash(files)
    assert manifest["producer_variant"] == "v" and manifest["key"] == key
    assert store.put("triton_moe", key, files, "v2").hash == art.hash  # same content, same artifact
    (tmp_path / "_artifacts" / "index.json").unlink()
    assert store.find(key).hash == art.hash  # index rebuilt from manifests
    (Path(art.path) / "b/c.json").write_bytes(b"3")
    assert store.find(key) is None  # tampered: never reused


def test_moe_shape_and_file_name_follow_sglang() -> None:
    s = moe_shape(MoeModelConfig.from_json(QWEN35), tp=8)
    assert (s.num_experts, s.shard_n) == (512, 128)
    assert s.file_name("NVIDIA RTX PRO 6000 Blackwell Server Edition") == \
        "E=512,N=128,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
    s2 = moe_shape(MoeModelConfig.from_json(QWEN35), tp=8, ep=2, dtype="fp8_w8a8")
    assert (s2.num_experts, s2.shard_n) == (256, 256)
    assert s2.file_name("NVIDIA H200") == "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    assert sgt.moe_config_relpath("3.4.0", "f.json") == "configs/triton_3_4_0/f.json"
    assert sgt.moe_config_file_name(8, 64, "A B", block_shape=[128, 128], down=True) == \
        "E=8,N=64,device_name=A_B,block_shape=[128, 128]_down.json"


@pytest.mark.parametrize("cfg,args,dtype", [
    ({**QWEN35, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}, {}, "auto"),
    (QWEN35, {"quantization": "modelopt_fp4"}, "auto"),
    (QWEN35, {}, "nvfp4"),
    ({**QWEN35, "quantization_config": {"config_groups": {"g": {"weights": {"num_bits": 4, "type": "float",
                                                                            "group_size": 16}}}}}, {}, "auto"),
])
def test_triton_moe_refused_for_nvfp4(cfg: dict, args: dict, dtype: str) -> None:
    with pytest.raises(TuningError, match="NVFP4.*flashinfer_autotune"):
        moe_shape(MoeModelConfig.from_json(cfg), tp=8, dtype=dtype, args=args)


def test_moe_config_is_read_once_from_config_json() -> None:
    c = MoeModelConfig.from_json({"text_config": {"num_experts": "64", "moe_intermediate_size": 256,
                                                  "hidden_size": 1024}})
    assert c == MoeModelConfig(64, 256, 1024, 1)  # digits in a string are SGLang's int(); top_k defaults to 1
    lacking = MoeModelConfig.from_json({"hidden_size": 1024, "num_experts": 8})
    assert (lacking.num_experts, lacking.nvfp4) == (None, None)
    with pytest.raises(TuningError, match="lacks num_experts"):
        moe_shape(lacking, tp=8)


def test_backend_sweep_expansion() -> None:
    vs = variants()  # the planner expands a backend_sweep (plan/runs.py expand_backend_sweep, the one definition)
    names = [v.name for v in vs]
    assert names == ["base", "at", "sweep-fi_cutlass-fi_cudnn", "sweep-fi_cutlass-fi_cutlass",
                     "sweep-marlin-fi_cudnn", "sweep-marlin-fi_cutlass"]
    sw = vs[4]
    assert sw.args == {"moe-runner-backend": "marlin", "fp4-gemm-backend": "flashinfer_cudnn"}
    assert sw.family == "sweep" and not sw.is_baseline
    assert [x for v in vs for x in expand_backend_sweep(v)] == vs  # idempotent
    bad = dataclasses.replace(variants()[2], tuning=BackendSweepTuning.model_validate(
        {"options": {"moe_runner_backend": ["b12x"]}}))
    with pytest.raises(TuningError, match="b12x"):
        tuning_options_check(bad)  # the check validate, plan and the driver's pre-GPU checks ask


def test_tuning_env_and_args(tmp_path: Path) -> None:
    base, at = variants()[:2]
    art = ArtifactStore(str(tmp_path)).put("flashinfer_autotune", {"k": 1}, {"a.json": b"{}"}, "at")
    env, args = tuning_env_and_args(at, art)
    assert env["SGLANG_CACHE_DIR"] == art.path and "disable-flashinfer-autotune" not in args
    env_b, args_b = tuning_env_and_args(base, None)
    assert "SGLANG_CACHE_DIR" not in env_b and args_b["disable-flashinfer-autotune"] is True


def test_split_and_merge_batch_sizes() -> None:
    parts = split_batch_sizes([1, 2, 4, 8, 16], 8)
    assert parts == [[1], [2], [4], [8], [16]]
    assert split_batch_sizes(list(range(1, 11)), 4) == [[1, 5, 9], [2, 6, 10], [3, 7], [4, 8]]
    shape = moe_shape(MoeModelConfig.from_json(QWEN35), tp=8).__dict__
    a = simulated_search(shape, [1, 4], "X", max_configs=50)
    b = simulated_search(shape, [2], "X", max_configs=50)
    merged = merge_moe_configs([{k: r["config"] for k, r in p.items()} for p in (b, a)])
    assert list(merged) == ["1", "2", "4"] and sgt.valid_moe_config(merged)
    assert simulated_search(shape, [1, 4], "X", max_configs=50) == a  # deterministic


def test_sim_contract_autotune(tmp_path: Path) -> None:
    k, rest = st.split_knobs({"garbage_backends": ["marlin"], "time_scale": 0.0, "autotune_time_s": 0.0})
    assert rest == {"time_scale": 0.0}
    args = {"model_path": "/m", "tp_size": 2, "moe_runner_backend": "flashinfer_cutlass",
            "fp4_gemm_runner_backend": "flashinfer_cudnn", "disable_flashinfer_autotune": False}
    env = {"SGLANG_CACHE_DIR": str(tmp_path)}
    first = st.startup_effect(args, env, k, sleep=lambda s: None)
    assert first.autotune == "tuned" and first.speed_factor == pytest.approx(k.autotune_speed_factor)
    files = sorted(p.name for p in tmp_path.rglob("*.json"))
    assert files == ["rank_tp0_pp0_dp0.json", "rank_tp1_pp0_dp0.json"]
    rel = next(tmp_path.rglob("rank_tp0_pp0_dp0.json")).relative_to(tmp_path).parts
    assert rel[:4] == ("flashinfer", "autotune", "0.6.12", "sm120") and len(rel[4]) == 16
    assert st.startup_effect(args, env, k).autotune == "loaded"
    assert st.startup_effect({**args, "disable_flashinfer_autotune": True}, env, k).speed_factor == 1.0
    assert st.startup_effect(args, {}, k).speed_factor == 1.0  # no cache dir: nothing applied, nothing written
    other = k.model_copy(update={"gpu_name": "NVIDIA H200"})
    assert not st.valid_autotune_cache(args, str(tmp_path), other)  # metadata mismatch → not valid
    assert st.startup_effect({**args, "moe_runner_backend": "marlin"}, {}, k).garbage


def test_sim_contract_moe_config(tmp_path: Path) -> None:
    k, _ = st.split_knobs({})
    args = {"model_path": "/m", "tp_size": 8, "moe_runner_backend": "triton"}
    env = {"SGLANG_MOE_CONFIG_DIR": str(tmp_path)}
    assert st.startup_effect(args, env, k).moe_config == "default"
    p = st.moe_config_path(str(tmp_path), k, 8)
    assert p.name == "E=512,N=128,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(simulated_search(moe_shape(MoeModelConfig.from_json(QWEN35), 8).__dict__, [1], "x", 10)))  # wrong format
    assert st.startup_effect(args, env, k).moe_config == "default"
    p.write_text(json.dumps({"1": {f: 16 for f in sgt.MOE_CONFIG_FIELDS}}))
    eff = st.startup_effect(args, env, k)
    assert eff.moe_config == "loaded" and eff.speed_factor == pytest.approx(k.moe_config_speed_factor)


def test_bad_sim_knob() -> None:
    with pytest.raises(ValueError, match="garbage_backends"):
        st.split_knobs({"garbage_backends": "marlin"})


def test_study_yaml_loads() -> None:
    spec = load_spec(REPO / "experiments" / "qwen35-397b-nvfp4-sm120.yaml")
    vs = expand_variants(spec)
    for v in vs:
        tuning_options_check(v)
    names = [v.name for v in vs]
    assert names[:5] == ["baseline", "nextn-1", "nextn-2", "nextn-3", "autotune"]
    assert len([n for n in names if n.startswith("sweep-")]) == 4
    base = vs[0]
    assert base.args["disable-flashinfer-autotune"] is True and base.tp == 8
    for v in vs:
        assert {"max-running-requests", "kv-cache-dtype", "attention-backend"} <= set(v.args)
