"""Checkpoint probe on tiny real safetensors checkpoints: MTP verdicts, quantization, params, bytes, no data reads."""

from __future__ import annotations

import builtins
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/ is not a package: reach tests/checkpoints.py

from tests import checkpoints as ck  # noqa: E402

from cluster.probe.checkpoint import probe_checkpoint  # noqa: E402
from cluster.probe.safetensors_header import read_header  # noqa: E402


def test_qwen35_nvfp4_with_mtp(tmp_path: Path) -> None:
    d = ck.qwen35_nvfp4(tmp_path / "m", layers=4, experts=4, experts_per_tok=2, hidden=64, moe_inter=32)
    r = probe_checkpoint(str(d))
    assert r.config.layout == "nested_text_config"
    assert r.config.architectures == ["Qwen3_5MoeForConditionalGeneration"]
    assert (r.config.num_experts, r.config.num_experts_per_tok, r.config.hidden_size) == (4, 2, 64)
    assert r.config.layer_types == {"linear_attention": 3, "full_attention": 1}
    m = r.mtp
    assert m.verdict == "present" and m.kind == "mtp"
    assert m.declared_in == "config.json text_config.mtp_num_hidden_layers"
    # mtp: fc + 3 norms + 2 layer norms + 6 attention + gate + 3 shared + shared gate + 4 experts x 3 = 29
    assert m.index_tensors == 29 and m.header_tensors == 29
    assert (m.fc_tensor, m.fc_dtype, m.weight_format) == ("mtp.fc.weight", "BF16", "BF16")
    assert m.layers_found == [0] and not m.has_weight_scale and m.excluded_in_quant_config
    assert len(r.shards) == 3 and r.index_file == "model.safetensors.index.json"
    assert r.quant.source == "hf_quant_config.json"
    assert (r.quant.quant_algo, r.quant.group_size, r.quant.kv_cache_quant_algo) == ("NVFP4", 16, "FP8")
    assert r.quantized_families == {
        f"model.language_model.layers.*.mlp.experts.*.{p}": 16 for p in ("down_proj", "gate_proj", "up_proj")
    }
    assert "mtp.fc" in r.unquantized_families and "lm_head" in r.unquantized_families
    assert r.modules["mtp"] == 29 and r.modules["lm_head"] == 1
    assert r.speculative_supported == ["NEXTN", "MTP", "EAGLE", "NGRAM"]
    assert r.speculative_needs_draft_model == ["EAGLE3", "STANDALONE"]
    assert r.warnings == []


def test_params_and_decode_bytes_follow_the_nvfp4_arithmetic(tmp_path: Path) -> None:
    layers, experts, k, hidden, inter = 4, 8, 2, 64, 32
    r = probe_checkpoint(str(ck.qwen35_nvfp4(tmp_path / "m", layers=layers, experts=experts, experts_per_tok=k,
                                             hidden=hidden, moe_inter=inter)))
    p = r.params
    routed = layers * experts * 3 * hidden * inter  # U8 packed: 2 params per byte
    assert p.routed_experts == routed == 196608
    # 0.5625 B/param (4 bit + one F8 scale per 16) plus two F32 scalars per projection
    routed_bytes = routed * 9 // 16 + layers * experts * 3 * 2 * 4
    active_routed_bytes = routed_bytes * k // experts
    assert p.decode_routed_expert_bytes_per_token == active_routed_bytes
    assert p.active_per_token == p.target - routed + routed * k // experts
    assert p.active_per_token_excl_embedding == p.active_per_token - 256 * hidden
    # non-expert target tensors are all BF16 (2 B/param) except A_log (F32): embedding counts one row
    other_params = p.target - routed - 256 * hidden
    a_log = (layers - 1) * 4
    assert p.decode_bytes_per_token == active_routed_bytes + 2 * other_params + 2 * a_log + 2 * hidden
    assert p.total == p.target + p.mtp + p.vision
    assert p.vision == hidden * 48 + 3 * hidden * hidden
    assert p.mtp_bytes == 2 * p.mtp


def test_mtp_stripped_but_declared(tmp_path: Path) -> None:
    r = probe_checkpoint(str(ck.qwen35_nvfp4_mtp_stripped(tmp_path / "m")))
    assert r.mtp.verdict == "declared_but_absent"
    assert (r.mtp.index_tensors, r.mtp.header_tensors, r.mtp.fc_dtype) == (0, 0, None)
    assert "NEXTN" not in r.speculative_supported and "EAGLE" in r.speculative_needs_draft_model


def test_quantization_config_in_config_json(tmp_path: Path) -> None:
    r = probe_checkpoint(str(ck.qwen35_nvfp4(tmp_path / "m", quant_in_config=True)))
    q = r.quant
    assert (q.source, q.quant_method, q.quant_algo, q.group_size) == ("config.json quantization_config", "modelopt",
                                                                      "NVFP4", 16)
    assert q.kv_cache_quant_algo == "FP8" and "mtp*" in q.exclude_modules and q.producer == "modelopt 0.37.0"


def test_deepseek_nextn_layer(tmp_path: Path) -> None:
    r = probe_checkpoint(str(ck.deepseek_nextn(tmp_path / "m", layers=3)))
    m = r.mtp
    assert (m.verdict, m.kind, m.layers_found) == ("present", "nextn", [3])
    assert m.declared_in == "config.json num_nextn_predict_layers"
    assert m.fc_tensor == "model.layers.3.eh_proj.weight" and m.fc_dtype == "BF16"
    # nextn layer: 2 norms + 6 attn + 12 experts + eh_proj, enorm, hnorm, shared_head.norm, shared_head.head
    assert m.header_tensors == 25
    # the NextN layer is not part of the target's active params
    assert r.params.routed_experts == 3 * 4 * 3 * 32 * 64
    r2 = probe_checkpoint(str(ck.deepseek_nextn(tmp_path / "n", nextn_weights=False)))
    assert r2.mtp.verdict == "declared_but_absent"


def test_qwen3_next_flat_config(tmp_path: Path) -> None:
    r = probe_checkpoint(str(ck.qwen3_next_flat(tmp_path / "m")))
    assert r.config.layout == "flat" and r.config.model_type == "qwen3_next"
    assert r.config.layer_types == {"linear_attention": 3, "full_attention": 1}  # from full_attention_interval
    assert r.mtp.verdict == "not_declared_but_present" and "NEXTN" in r.speculative_supported
    assert r.quant.source is None and r.quantized_families == {}
    r2 = probe_checkpoint(str(ck.qwen3_next_flat(tmp_path / "n", mtp_weights=False)))
    assert r2.mtp.verdict == "absent" and r2.speculative_supported == ["NGRAM"]


def test_single_file_model(tmp_path: Path) -> None:
    r = probe_checkpoint(str(ck.single_file_model(tmp_path / "m", layers=2, hidden=64, vocab=256)))
    assert r.index_file is None and r.shards == ["model.safetensors"]
    assert r.mtp.verdict == "absent" and r.mtp.index_tensors is None
    per_layer = 2 * 64 + 4 * 64 * 64 + 2 * 16 + 3 * 128 * 64
    assert r.params.total == 256 * 64 * 2 + 64 + 2 * per_layer
    assert r.tensor_count == 25


def test_json_report_is_stable_and_serialisable(tmp_path: Path) -> None:
    r = probe_checkpoint(str(ck.qwen35_nvfp4(tmp_path / "m")))
    j = json.loads(json.dumps(r.to_json()))
    assert j["schema"] == 1
    assert set(j) == {"schema", "model_dir", "config", "files", "tensors", "modules", "mtp", "quantization",
                      "params", "speculative", "identity", "warnings", "warning_records"}
    assert j["mtp"]["verdict"] == "present" and j["config"]["mtp_declared_layers"] == 1
    assert j["speculative"]["supported"] == ["NEXTN", "MTP", "EAGLE", "NGRAM"]
    # 3 Gated-DeltaNet layers with Qwen3.5's four input projections (in_proj_qkv/z/b/a) each
    assert j["tensors"]["by_dtype"] == {"BF16": 86 + 3 * 2, "F32": 99, "F8_E4M3": 48, "U8": 48}


def test_mtp_unquantized_but_not_excluded_warns(tmp_path: Path) -> None:
    d = ck.qwen35_nvfp4(tmp_path / "m")
    hq = d / "hf_quant_config.json"
    obj = json.loads(hq.read_text())
    obj["quantization"]["exclude_modules"] = ["lm_head"]
    hq.write_text(json.dumps(obj))
    r = probe_checkpoint(str(d))
    assert not r.mtp.excluded_in_quant_config
    assert any("no exclude/ignore pattern covers mtp" in w.message for w in r.warnings)


def test_probe_never_reads_tensor_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards whose data region is 16 GiB of sparse zeros: only 8 + N header bytes may be read from each."""
    d = tmp_path / "big"
    d.mkdir()
    ck.write_json(d / "config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 65536,
                                      "num_hidden_layers": 1, "vocab_size": 65536})
    weight_map = {}
    for i in range(2):
        name = f"model-{i}.safetensors"
        t = {f"model.layers.0.w{i}.weight": ("BF16", [65536, 65536])}  # 8 GiB each
        ck.write_safetensors(d / name, t)
        weight_map[f"model.layers.0.w{i}.weight"] = name
    ck.write_json(d / "model.safetensors.index.json", {"weight_map": weight_map})
    read_bytes: dict[str, int] = {}
    fd_paths: dict[int, str] = {}
    real_open, real_read, real_builtin_open = os.open, os.read, builtins.open

    def counting_open(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        fd = real_open(path, flags, *a, **kw)
        fd_paths[fd] = str(path)
        return fd

    def counting_read(fd: int, n: int) -> bytes:
        b = real_read(fd, n)
        path = fd_paths.get(fd, "")
        if path.endswith(".safetensors"):
            read_bytes[path] = read_bytes.get(path, 0) + len(b)
        return b

    def no_builtin_open(path: Any, *a: Any, **kw: Any) -> Any:
        assert not str(path).endswith(".safetensors"), "a shard must be read through cluster/input_files.py"
        return real_builtin_open(path, *a, **kw)

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(os, "read", counting_read)
    monkeypatch.setattr(builtins, "open", no_builtin_open)
    r = probe_checkpoint(str(d))
    monkeypatch.undo()
    assert r.params.total == 2 * 65536 * 65536
    assert len(read_bytes) == 2
    for path, n in read_bytes.items():
        assert n == 8 + read_header(path).header_bytes < 4096


def test_builder_files_are_valid_for_the_safetensors_library(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors")
    d = ck.qwen35_nvfp4(tmp_path / "m", shards=1)
    ours = read_header(str(d / "model-00001-of-00001.safetensors")).tensors
    with safetensors.safe_open(str(d / "model-00001-of-00001.safetensors"), framework="numpy") as f:
        names = list(f.keys())
        assert sorted(names) == sorted(ours)
        for name in ("model.language_model.layers.0.mlp.experts.1.up_proj.weight",
                     "model.language_model.layers.0.mlp.experts.1.up_proj.weight_scale",
                     "model.language_model.layers.0.mlp.experts.1.up_proj.weight_scale_2", "mtp.fc.weight"):
            s = f.get_slice(name)
            assert (s.get_dtype(), tuple(s.get_shape())) == (ours[name].dtype, ours[name].shape)
    assert ours["model.language_model.layers.0.mlp.experts.1.up_proj.weight_scale"].dtype == "F8_E4M3"
    assert ours["model.language_model.layers.0.mlp.experts.1.up_proj.weight_scale_2"].shape == ()
