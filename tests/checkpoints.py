"""Builders of tiny, real safetensors checkpoints for tests and benchmarks (real names and dtypes, zero data)."""

from __future__ import annotations

import json
import os
import struct
from math import prod
from pathlib import Path
from typing import Any, Optional, Sequence

from cluster.probe.safetensors_header import DTYPE_BITS, MAX_DIM_SIZE, MAX_DIMS, ShardHeader

Tensors = dict[str, tuple[str, list[int]]]
"""name → (safetensors dtype, shape)."""


def tensor_nbytes(dtype: str, shape: Sequence[int]) -> int:
    return (prod(shape) * DTYPE_BITS[dtype] + 7) // 8


def write_safetensors(path: Path, tensors: Tensors, metadata: Optional[dict[str, str]] = None,
                      data_bytes: Optional[int] = None) -> None:
    """Write a valid safetensors file by raw header writing; the data region is zero (sparse via truncate).

    data_bytes: make the data region this large instead of exactly the tensors' size (for sparse huge files)."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = tensor_nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + (offset if data_bytes is None else data_bytes))


def assert_header_invariant(header: ShardHeader) -> None:
    """What every accepted shard header satisfies: each tensor's bytes lie inside the data region, its size is
    ceil(prod(shape) * dtype bits / 8), its shape is not absurd (MAX_DIMS dimensions of at most MAX_DIM_SIZE, even
    when another is 0), and no two tensors' non-empty byte ranges overlap."""
    spans: list[tuple[int, int, str]] = []
    for name, t in header.tensors.items():
        assert len(t.shape) <= MAX_DIMS and all(0 <= n <= MAX_DIM_SIZE for n in t.shape), (header.path, name, t)
        begin, end = t.data_offsets
        assert 0 <= begin <= end <= header.data_bytes, (header.path, name, t.data_offsets, header.data_bytes)
        assert end - begin == t.nbytes == tensor_nbytes(t.dtype, t.shape), (header.path, name, t)
        if end > begin:
            spans.append((begin, end, name))
    spans.sort()
    for (_, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        assert b1 >= e0, (header.path, n0, n1)


def write_sharded(model_dir: Path, tensors: Tensors, shards: int) -> None:
    """Split tensors over `shards` files in order and write model.safetensors.index.json."""
    names = list(tensors)
    per = max(1, -(-len(names) // shards))
    weight_map: dict[str, str] = {}
    total = 0
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(model_dir / fname, {n: tensors[n] for n in part}, metadata={"format": "pt"})
        for n in part:
            weight_map[n] = fname
            total += tensor_nbytes(*tensors[n])
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1))


def nvfp4_linear(prefix: str, out_features: int, in_features: int) -> Tensors:
    """ModelOpt NVFP4 Linear: U8 packed weight [N, K/2], F8_E4M3 block scale [N, K/16], F32 scalar global scales."""
    return {
        f"{prefix}.weight": ("U8", [out_features, in_features // 2]),
        f"{prefix}.weight_scale": ("F8_E4M3", [out_features, in_features // 16]),
        f"{prefix}.weight_scale_2": ("F32", []),
        f"{prefix}.input_scale": ("F32", []),
    }


def bf16(name: str, *shape: int) -> Tensors:
    return {name: ("BF16", list(shape))}


def _moe_layer(p: str, hidden: int, experts: int, moe_inter: int, shared_inter: int, nvfp4: bool) -> Tensors:
    t: Tensors = {}
    t |= bf16(f"{p}.mlp.gate.weight", experts, hidden)
    for proj, (o, i) in (("gate_proj", (shared_inter, hidden)), ("up_proj", (shared_inter, hidden)),
                         ("down_proj", (hidden, shared_inter))):
        t |= bf16(f"{p}.mlp.shared_expert.{proj}.weight", o, i)
    t |= bf16(f"{p}.mlp.shared_expert_gate.weight", 1, hidden)
    for e in range(experts):
        for proj, (o, i) in (("gate_proj", (moe_inter, hidden)), ("up_proj", (moe_inter, hidden)),
                             ("down_proj", (hidden, moe_inter))):
            name = f"{p}.mlp.experts.{e}.{proj}"
            t |= nvfp4_linear(name, o, i) if nvfp4 else bf16(f"{name}.weight", o, i)
    return t


def _attention(p: str, hidden: int, gated_q: bool = False) -> Tensors:
    """Full attention; `gated_q`: Qwen3.5's q_proj is twice as wide (the query and its output gate)."""
    t: Tensors = {}
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        t |= bf16(f"{p}.self_attn.{proj}.weight", 2 * hidden if gated_q and proj == "q_proj" else hidden, hidden)
    t |= bf16(f"{p}.self_attn.q_norm.weight", 16) | bf16(f"{p}.self_attn.k_norm.weight", 16)
    return t


def _norms(p: str, hidden: int) -> Tensors:
    return bf16(f"{p}.input_layernorm.weight", hidden) | bf16(f"{p}.post_attention_layernorm.weight", hidden)


def qwen35_tensors(*, layers: int = 4, experts: int = 4, hidden: int = 64, moe_inter: int = 32,
                   shared_inter: int = 32, vocab: int = 256, mtp: bool = True, mtp_nvfp4: bool = False) -> Tensors:
    """Qwen3.5-MoE NVFP4 tensors: experts NVFP4, everything else BF16, MTP head BF16 under mtp.* (its experts NVFP4
    with `mtp_nvfp4`, as a quantizer that did not exclude the head writes them)."""
    lm = "model.language_model"
    t: Tensors = bf16(f"{lm}.embed_tokens.weight", vocab, hidden)
    for layer in range(layers):
        p = f"{lm}.layers.{layer}"
        t |= _norms(p, hidden)
        if layer % 4 == 3:
            t |= _attention(p, hidden, gated_q=True)
        else:
            # Qwen3.5's Gated DeltaNet names (Qwen3-Next fuses them as in_proj_qkvz / in_proj_ba)
            t |= bf16(f"{p}.linear_attn.in_proj_qkv.weight", 3 * hidden // 2, hidden)
            t |= bf16(f"{p}.linear_attn.in_proj_z.weight", hidden // 2, hidden)
            t |= bf16(f"{p}.linear_attn.in_proj_b.weight", 4, hidden)
            t |= bf16(f"{p}.linear_attn.in_proj_a.weight", 4, hidden)
            t |= bf16(f"{p}.linear_attn.out_proj.weight", hidden, hidden)
            t |= bf16(f"{p}.linear_attn.conv1d.weight", 2 * hidden, 1, 4)
            t |= {f"{p}.linear_attn.A_log": ("F32", [4]), f"{p}.linear_attn.dt_bias": ("BF16", [4])}
            t |= bf16(f"{p}.linear_attn.norm.weight", 16)
        t |= _moe_layer(p, hidden, experts, moe_inter, shared_inter, nvfp4=True)
    t |= bf16(f"{lm}.norm.weight", hidden) | bf16("lm_head.weight", vocab, hidden)
    t |= bf16("model.visual.patch_embed.proj.weight", hidden, 48) | bf16("model.visual.blocks.0.attn.qkv.weight",
                                                                         3 * hidden, hidden)
    if mtp:
        t |= bf16("mtp.fc.weight", hidden, 2 * hidden)
        for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
            t |= bf16(f"mtp.{n}.weight", hidden)
        t |= _norms("mtp.layers.0", hidden) | _attention("mtp.layers.0", hidden, gated_q=True)
        t |= _moe_layer("mtp.layers.0", hidden, experts, moe_inter, shared_inter, nvfp4=mtp_nvfp4)
    return t


def qwen35_nvfp4(model_dir: Path, *, layers: int = 4, experts: int = 4, experts_per_tok: int = 2, hidden: int = 64,
                 moe_inter: int = 32, shared_inter: int = 32, vocab: int = 256, shards: int = 3,
                 mtp_weights: bool = True, mtp_declared: bool = True, quant_in_config: bool = False,
                 mtp_quantized: bool = False) -> Path:
    """A Qwen3.5-397B-A17B-NVFP4-shaped checkpoint (nested text_config, sharded, hf_quant_config.json);
    `mtp_quantized`: the exclude list lacks `mtp*` and the MTP head's experts are NVFP4 too."""
    model_dir.mkdir(parents=True, exist_ok=True)
    text: dict[str, Any] = {
        "model_type": "qwen3_5_moe_text", "hidden_size": hidden, "num_hidden_layers": layers,
        "layer_types": ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)],
        "full_attention_interval": 4, "num_experts": experts, "num_experts_per_tok": experts_per_tok,
        "moe_intermediate_size": moe_inter, "shared_expert_intermediate_size": shared_inter, "vocab_size": vocab,
        "tie_word_embeddings": False,
    }
    if mtp_declared:
        text |= {"mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False}
    exclude = ["lm_head", "model.visual*", "*.mlp.gate", "*shared_expert*", "*self_attn*", "*linear_attn*", "mtp*"]
    if mtp_quantized:
        exclude.remove("mtp*")
    config: dict[str, Any] = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "text_config": text, "vision_config": {"depth": 1, "hidden_size": hidden},
    }
    if quant_in_config:
        config["quantization_config"] = {
            "quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": exclude,
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                          "input_activations": {"num_bits": 4, "type": "float", "group_size": 16},
                                          "targets": ["Linear"]}},
            "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
            "producer": {"name": "modelopt", "version": "0.37.0"},
        }
    write_json(model_dir / "config.json", config)
    write_json(model_dir / "hf_quant_config.json", {
        "producer": {"name": "modelopt", "version": "0.37.0"},
        "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                         "exclude_modules": exclude},
    })
    tensors = qwen35_tensors(layers=layers, experts=experts, hidden=hidden, moe_inter=moe_inter,
                             shared_inter=shared_inter, vocab=vocab, mtp=mtp_weights, mtp_nvfp4=mtp_quantized)
    write_sharded(model_dir, tensors, shards)
    return model_dir


def qwen35_nvfp4_mtp_stripped(model_dir: Path, **kw: Any) -> Path:
    """The quantizer dropped the MTP head but config.json still declares it (verdict: declared_but_absent)."""
    return qwen35_nvfp4(model_dir, mtp_weights=False, mtp_declared=True, **kw)


def deepseek_nextn(model_dir: Path, *, layers: int = 3, experts: int = 4, hidden: int = 64, vocab: int = 256,
                   nextn_weights: bool = True) -> Path:
    """DeepSeek-V3-style: flat config, num_nextn_predict_layers 1, NextN layer stored as model.layers.{layers}."""
    model_dir.mkdir(parents=True, exist_ok=True)
    write_json(model_dir / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": hidden,
        "num_hidden_layers": layers, "n_routed_experts": experts, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "vocab_size": vocab, "num_nextn_predict_layers": 1,
    })
    t: Tensors = bf16("model.embed_tokens.weight", vocab, hidden)
    for layer in range(layers + (1 if nextn_weights else 0)):
        p = f"model.layers.{layer}"
        t |= _norms(p, hidden) | _attention(p, hidden)
        for e in range(experts):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                t |= bf16(f"{p}.mlp.experts.{e}.{proj}.weight", 32, hidden)
    if nextn_weights:
        p = f"model.layers.{layers}"
        t |= bf16(f"{p}.eh_proj.weight", hidden, 2 * hidden) | bf16(f"{p}.enorm.weight", hidden)
        t |= bf16(f"{p}.hnorm.weight", hidden) | bf16(f"{p}.shared_head.norm.weight", hidden)
        t |= bf16(f"{p}.shared_head.head.weight", vocab, hidden)
    t |= bf16("model.norm.weight", hidden) | bf16("lm_head.weight", vocab, hidden)
    write_sharded(model_dir, t, 2)
    return model_dir


MTP_CONTRADICTIONS = {"undeclared": "mtp-undeclared", "layer-count": "mtp-layer-count",
                      "keys-disagree": "mtp-keys-disagree", "hidden-layers": "mtp-layer-count"}
"""The cases `mtp_contradiction` builds → the probe warning code each must raise."""


def mtp_contradiction(model_dir: Path, case: str) -> Path:
    """A checkpoint whose config.json and weights disagree about the MTP head: `undeclared` (DeepSeek NextN weights,
    no num_nextn_predict_layers), `layer-count` (MiMo declaring 1 MTP layer, 2 in the weights), `keys-disagree`
    (Qwen3.5: text_config.mtp_num_hidden_layers 1 beside a top-level num_nextn_predict_layers 2), `hidden-layers`
    (DeepSeek whose num_hidden_layers is one short, so its last decoder layer reads as a second NextN layer)."""
    if case == "layer-count":
        mimo_mtp(model_dir, mtp_layers=2)
    elif case == "keys-disagree":
        qwen35_nvfp4(model_dir)
    else:
        deepseek_nextn(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    if case == "undeclared":
        del config["num_nextn_predict_layers"]
    elif case == "layer-count":
        config["num_nextn_predict_layers"] = 1
    elif case == "keys-disagree":
        config["num_nextn_predict_layers"] = 2
    elif case == "hidden-layers":
        config["num_hidden_layers"] -= 1
    else:
        raise ValueError(f"no such case {case!r}: one of {sorted(MTP_CONTRADICTIONS)}")
    write_json(model_dir / "config.json", config)
    return model_dir


def qwen3_next_flat(model_dir: Path, *, layers: int = 4, experts: int = 4, hidden: int = 64, vocab: int = 256,
                    mtp_weights: bool = True) -> Path:
    """Qwen3-Next-style flat config (no mtp_* key); the MTP head ships only as mtp.* tensors."""
    model_dir.mkdir(parents=True, exist_ok=True)
    write_json(model_dir / "config.json", {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": hidden,
        "num_hidden_layers": layers, "full_attention_interval": 4, "num_experts": experts, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "vocab_size": vocab,
    })
    t: Tensors = {}
    for name, (dtype, shape) in qwen35_tensors(layers=layers, experts=experts, hidden=hidden, vocab=vocab,
                                               mtp=mtp_weights).items():
        if "visual" in name:
            continue
        # Qwen3-Next is unquantized BF16 and names its decoder model.layers.*
        new = name.replace("model.language_model.", "model.")
        if dtype == "U8":
            t[new] = ("BF16", [shape[0], shape[1] * 2])
        elif not name.endswith(("weight_scale", "weight_scale_2", "input_scale")):
            t[new] = (dtype, shape)
    write_sharded(model_dir, t, 2)
    return model_dir


def single_file_model(model_dir: Path, *, layers: int = 2, hidden: int = 64, vocab: int = 256) -> Path:
    """An unsharded Llama-style model.safetensors (no index, no MTP)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    write_json(model_dir / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "num_hidden_layers": layers, "vocab_size": vocab,
    })
    t: Tensors = bf16("model.embed_tokens.weight", vocab, hidden)
    for layer in range(layers):
        p = f"model.layers.{layer}"
        t |= _norms(p, hidden) | _attention(p, hidden)
        for proj, (o, i) in (("gate_proj", (128, hidden)), ("up_proj", (128, hidden)), ("down_proj", (hidden, 128))):
            t |= bf16(f"{p}.mlp.{proj}.weight", o, i)
    t |= bf16("model.norm.weight", hidden) | bf16("lm_head.weight", vocab, hidden)
    write_safetensors(model_dir / "model.safetensors", t, metadata={"format": "pt"})
    return model_dir


def _dense_mlp(p: str, hidden: int, inter: int = 128) -> Tensors:
    t: Tensors = {}
    for proj, (o, i) in (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)), ("down_proj", (hidden, inter))):
        t |= bf16(f"{p}.mlp.{proj}.weight", o, i)
    return t


def _dense_body(layers: int, hidden: int, vocab: int) -> Tensors:
    t: Tensors = bf16("model.embed_tokens.weight", vocab, hidden)
    for layer in range(layers):
        p = f"model.layers.{layer}"
        t |= _norms(p, hidden) | _attention(p, hidden) | _dense_mlp(p, hidden)
    return t | bf16("model.norm.weight", hidden) | bf16("lm_head.weight", vocab, hidden)


def _dense_model(model_dir: Path, config: dict[str, Any], t: Tensors) -> Path:
    model_dir.mkdir(parents=True, exist_ok=True)
    write_json(model_dir / "config.json", config)
    write_sharded(model_dir, t, 2)
    return model_dir


def mimo_mtp(model_dir: Path, *, layers: int = 2, hidden: int = 64, vocab: int = 256, mtp_layers: int = 1,
             mtp_weights: bool = True) -> Path:
    """MiMo (SGLang mimo_mtp.py): a Qwen2 body plus `model.mtp_layers.{i}.*` (a decoder layer, token/hidden/final
    layernorms, input_proj [H, 2H]) and `num_nextn_predict_layers`, as tests/sglang_cpu builds it for real."""
    t = _dense_body(layers, hidden, vocab)
    if mtp_weights:
        for i in range(mtp_layers):
            p = f"model.mtp_layers.{i}"
            t |= _norms(p, hidden) | _attention(p, hidden) | _dense_mlp(p, hidden)
            for norm in ("token_layernorm", "hidden_layernorm", "final_layernorm"):
                t |= bf16(f"{p}.{norm}.weight", hidden)
            t |= bf16(f"{p}.input_proj.weight", hidden, 2 * hidden)
    return _dense_model(model_dir, {
        "architectures": ["MiMoForCausalLM"], "model_type": "mimo", "hidden_size": hidden,
        "num_hidden_layers": layers, "vocab_size": vocab, "num_nextn_predict_layers": mtp_layers,
        "tie_word_embeddings": False,
    }, t)


def ernie45_mtp(model_dir: Path, *, layers: int = 2, hidden: int = 64, vocab: int = 256) -> Path:
    """Ernie 4.5 MoE (SGLang ernie4_eagle.py): `model.mtp_block.0.*`, `model.mtp_{emb,hidden}_norm.0`,
    `model.mtp_linear_proj.0` (dense stand-in for the MoE body: the layout is what is tested)."""
    p = "model.mtp_block.0"
    t = _dense_body(layers, hidden, vocab) | _norms(p, hidden) | _attention(p, hidden) | _dense_mlp(p, hidden)
    t |= bf16("model.mtp_emb_norm.0.weight", hidden) | bf16("model.mtp_hidden_norm.0.weight", hidden)
    t |= bf16("model.mtp_linear_proj.0.weight", hidden, 2 * hidden)
    return _dense_model(model_dir, {
        "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "hidden_size": hidden,
        "num_hidden_layers": layers, "vocab_size": vocab, "num_nextn_predict_layers": 1,
    }, t)


def model_mtp_prefixed(model_dir: Path, *, arch: str = "MiMoV2FlashForCausalLM", layers: int = 2, hidden: int = 64,
                       vocab: int = 256) -> Path:
    """MiMo-V2 / LongCat-Flash (SGLang mimo_v2_nextn.py, longcat_flash_nextn.py): `model.mtp.layers.{i}.*`."""
    p = "model.mtp.layers.0"
    t = _dense_body(layers, hidden, vocab) | _norms(p, hidden) | _attention(p, hidden) | _dense_mlp(p, hidden)
    t |= bf16(f"{p}.eh_proj.weight", hidden, 2 * hidden) | bf16(f"{p}.enorm.weight", hidden)
    t |= bf16(f"{p}.hnorm.weight", hidden)
    return _dense_model(model_dir, {
        "architectures": [arch], "model_type": "mimo_v2_flash", "hidden_size": hidden,
        "num_hidden_layers": layers, "vocab_size": vocab, "num_nextn_predict_layers": 1,
    }, t)


def deepseek_v4_mtp(model_dir: Path, *, layers: int = 2, hidden: int = 64, vocab: int = 256) -> Path:
    """DeepSeek-V4 (SGLang deepseek_v4_nextn.py): the MTP module under `mtp.0.*` (e_proj, h_proj, decoder)."""
    p = "mtp.0"
    t = _dense_body(layers, hidden, vocab) | _norms(p, hidden) | _attention(p, hidden) | _dense_mlp(p, hidden)
    t |= bf16(f"{p}.e_proj.weight", hidden, hidden) | bf16(f"{p}.h_proj.weight", hidden, hidden)
    return _dense_model(model_dir, {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": hidden,
        "num_hidden_layers": layers, "vocab_size": vocab, "num_nextn_predict_layers": 1,
    }, t)


TENSOR_SPEC_FILE = "tensors.json"
"""In a committed test case, the checkpoint files to build: {"model.safetensors": {name: [dtype, shape]}}, or
{"model.safetensors": {"raw_hex": "0102"}} for a deliberately broken file of exactly those bytes, or
{"model.safetensors": {"raw_header": {...}, "data_bytes": 16}} for a header written as given (offsets, shapes and
all) with its length prefix and that many zero data bytes, or {"generation_config.json": {"fifo": true}} for a
named pipe (git cannot commit one)."""


def materialise_tensor_specs(root: Path) -> None:
    """Build every checkpoint a copied test case describes in a tensors.json (so no binary is committed)."""
    for spec in sorted(root.rglob(TENSOR_SPEC_FILE)):
        for fname, tensors in json.loads(spec.read_text()).items():
            if "raw_hex" in tensors:
                (spec.parent / fname).write_bytes(bytes.fromhex(tensors["raw_hex"]))
            elif tensors.get("fifo") is True:
                os.mkfifo(spec.parent / fname)
            elif "raw_header" in tensors:
                raw = json.dumps(tensors["raw_header"]).encode()
                (spec.parent / fname).write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * tensors["data_bytes"])
            else:
                write_safetensors(spec.parent / fname, {n: (d, list(s)) for n, (d, s) in tensors.items()})
        spec.unlink()
