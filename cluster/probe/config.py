"""Checkpoint config reading for the probe: config.json (flat or nested text_config) and quantization metadata."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from cluster.input_files import JsonObject, JsonValue

from cluster.probe.files import CheckpointError, clip, present, read_json_object

MAX_CONFIG_INT = 2**63 - 1
"""An integer setting past int64 is no model's (HF and SGLang hold them in int64 tensors and C longs)."""


def load_json_object(path: str) -> JsonObject:
    """Read a checkpoint JSON file that must hold an object; every failure is a one-line CheckpointError."""
    return read_json_object(path, os.path.basename(path))


@dataclass(frozen=True)
class MtpDeclaration:
    layers: int
    key: str
    """Where it was declared, e.g. `config.json text_config.mtp_num_hidden_layers`."""


@dataclass(frozen=True)
class ModelConfig:
    layout: str
    """`nested_text_config` (Qwen3.5) or `flat` (Qwen3-Next, DeepSeek, Llama)."""
    architectures: list[str]
    model_type: Optional[str]
    text_model_type: Optional[str]
    hidden_size: Optional[int]
    num_hidden_layers: Optional[int]
    layer_types: dict[str, int]
    num_experts: Optional[int]
    num_experts_per_tok: Optional[int]
    moe_intermediate_size: Optional[int]
    shared_expert_intermediate_size: Optional[int]
    vocab_size: Optional[int]
    max_position_embeddings: Optional[int]
    """The model's context length in tokens (a prompt plus its output must fit)."""
    mtp: Optional[MtpDeclaration]
    mtp_use_dedicated_embeddings: Optional[bool]
    mtp_keys: tuple[MtpDeclaration, ...] = ()
    """Every MTP layer-count key config.json sets, in the order read (`mtp` is the first; they may disagree)."""

    def to_json(self) -> dict[str, JsonValue]:
        d = asdict(self)
        d["mtp_declared_layers"] = self.mtp.layers if self.mtp else 0
        d["mtp_declared_in"] = self.mtp.key if self.mtp else None
        d["mtp_declared_keys"] = {k.key: k.layers for k in self.mtp_keys}
        del d["mtp"], d["mtp_keys"]
        return d


def _int(file: str, cfg: JsonObject, where: str, *keys: str) -> Optional[int]:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            v = cfg[key]
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_CONFIG_INT:
                raise CheckpointError(file, f"{where}{key} must be a non-negative integer of at most "
                                      f"{MAX_CONFIG_INT}, got {clip(v)}", field=f"{where}{key}",
                                      expected=f"an integer in 0..{MAX_CONFIG_INT}")
            return v
    return None


def _positive(file: str, cfg: JsonObject, where: str, *keys: str) -> Optional[int]:
    """A size that is never 0 in a model that loads (a hidden size, a layer count, a vocabulary, a context)."""
    v = _int(file, cfg, where, *keys)
    if v == 0:
        key = next(k for k in keys if cfg.get(k) is not None)
        raise CheckpointError(file, f"{where}{key} is 0, a size no model that loads has", field=f"{where}{key}",
                              expected=f"an integer in 1..{MAX_CONFIG_INT}")
    return v


def _opt(file: str, cfg: JsonObject, where: str, key: str, kind: type, expected: str) -> Any:
    """A string or boolean setting, or None when absent; another type is an error (it was read as absent, silently)."""
    v = cfg.get(key)
    if v is not None and not isinstance(v, kind):
        raise CheckpointError(file, f"{where}{key} must be {expected}, got {clip(v)}", field=f"{where}{key}",
                              expected=expected)
    return v


def _opt_str(file: str, cfg: JsonObject, where: str, key: str) -> Optional[str]:
    got: Optional[str] = _opt(file, cfg, where, key, str, "a string")
    return got


def _opt_bool(file: str, cfg: JsonObject, where: str, key: str) -> Optional[bool]:
    got: Optional[bool] = _opt(file, cfg, where, key, bool, "true or false")
    return got


def parse_model_config(file: str, raw: JsonObject) -> ModelConfig:
    text = raw.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise CheckpointError(file, f"text_config must be an object, got {type(text).__name__}", field="text_config",
                              expected="a JSON object")
    cfg = text if text is not None else raw
    where = "text_config." if text is not None else ""
    archs = raw.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise CheckpointError(file, f"architectures must be a list of strings, got {clip(archs)}",
                              field="architectures", expected="a list of strings")
    layers = _positive(file, cfg, where, "num_hidden_layers", "n_layer", "num_layers")
    types_raw = cfg.get("layer_types")
    layer_types: dict[str, int] = {}
    interval = _positive(file, cfg, where, "full_attention_interval")
    if types_raw is not None:
        if not isinstance(types_raw, list) or not all(isinstance(t, str) for t in types_raw):
            raise CheckpointError(file, f"{where}layer_types must be a list of strings, got {clip(types_raw)}",
                                  field=f"{where}layer_types", expected="a list of strings")
        if layers is not None and len(types_raw) != layers:  # transformers refuses this config too
            raise CheckpointError(file, f"{where}layer_types has {len(types_raw)} entries for {layers} layers "
                                  f"(num_hidden_layers)", field=f"{where}layer_types",
                                  expected=f"one entry per layer ({layers})")
        for t in types_raw:
            layer_types[t] = layer_types.get(t, 0) + 1
    elif layers is not None and interval:
        full = layers // interval
        layer_types = {"linear_attention": layers - full, "full_attention": full}
    mtp_keys: list[MtpDeclaration] = []
    for scope, scope_name in ((cfg, where), (raw, "")) if text is not None else ((raw, ""),):
        for key in ("mtp_num_hidden_layers", "num_nextn_predict_layers"):
            n = _int(file, scope, scope_name, key)
            if n is not None:
                mtp_keys.append(MtpDeclaration(layers=n, key=f"config.json {scope_name}{key}"))
    mtp = mtp_keys[0] if mtp_keys and mtp_keys[0].layers else None
    experts = _int(file, cfg, where, "num_experts", "n_routed_experts", "num_local_experts")
    per_token = _int(file, cfg, where, "num_experts_per_tok", "moe_topk")
    if experts and per_token is not None and per_token > experts:
        raise CheckpointError(file, f"{where}num_experts_per_tok {per_token} is more than the {experts} experts",
                              field=f"{where}num_experts_per_tok", expected=f"at most {experts}")
    dedicated = _opt_bool(file, cfg, where, "mtp_use_dedicated_embeddings")
    if dedicated is None:
        dedicated = _opt_bool(file, raw, "", "mtp_use_dedicated_embeddings")
    model_type = _opt_str(file, raw, "", "model_type")
    return ModelConfig(
        layout="nested_text_config" if text is not None else "flat",
        architectures=list(archs),
        model_type=model_type,
        text_model_type=_opt_str(file, cfg, where, "model_type") if text is not None else None,
        hidden_size=_positive(file, cfg, where, "hidden_size", "d_model", "n_embd"),
        num_hidden_layers=layers,
        layer_types=layer_types,
        num_experts=experts,
        num_experts_per_tok=per_token,
        moe_intermediate_size=_int(file, cfg, where, "moe_intermediate_size"),
        shared_expert_intermediate_size=_int(file, cfg, where, "shared_expert_intermediate_size"),
        vocab_size=_positive(file, cfg, where, "vocab_size"),
        max_position_embeddings=_positive(file, cfg, where, "max_position_embeddings", "n_positions", "max_seq_len"),
        mtp=mtp,
        mtp_use_dedicated_embeddings=dedicated,
        mtp_keys=tuple(mtp_keys),
    )


@dataclass(frozen=True)
class QuantInfo:
    source: Optional[str]
    """`config.json quantization_config`, `hf_quant_config.json`, or None (unquantized)."""
    quant_method: Optional[str] = None
    quant_algo: Optional[str] = None
    group_size: Optional[int] = None
    kv_cache_quant_algo: Optional[str] = None
    exclude_modules: list[str] = field(default_factory=list)
    producer: Optional[str] = None
    kv_cache_quant_source: Optional[str] = None
    """Where kv_cache_quant_algo was found: it can live only in hf_quant_config.json even when config.json has a
    quantization_config (SGLang reads both: PR #27906)."""

    def to_json(self) -> dict[str, JsonValue]:
        return asdict(self)


def _str_list(file: str, key: str, v: JsonValue) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise CheckpointError(file, f"{key} must be a list of strings, got {clip(v)}", field=key,
                              expected="a list of strings")
    return list(v)


def _producer(p: JsonValue) -> Optional[str]:
    if isinstance(p, dict) and isinstance(p.get("name"), str):
        return f"{p['name']} {p.get('version', '')}".strip()
    return None


def _size(v: JsonValue) -> Optional[int]:
    """A group size as given (a bool or a number past int64 is none)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_CONFIG_INT else None


def _checked_group_size(file: str, where: str, qc: JsonObject) -> Optional[int]:
    """The group size, refused when given but not a positive integer (a quoted "16" or a 0 read as none before)."""
    v = qc.get("group_size")
    if v is not None and _size(v) is None:
        raise CheckpointError(file, f"{where}group_size must be a positive integer, got {clip(v)}",
                              field=f"{where}group_size", expected=f"an integer in 1..{MAX_CONFIG_INT}")
    return _group_size(qc)


def _group_size(qc: JsonObject) -> Optional[int]:
    if _size(qc.get("group_size")) is not None:
        return _size(qc.get("group_size"))
    groups = qc.get("config_groups")
    if isinstance(groups, dict):
        for g in groups.values():
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict) and _size(w.get("group_size")) is not None:
                return _size(w.get("group_size"))
    return None


def _hf_kv_cache_algo(model_dir: str) -> Optional[str]:
    """hf_quant_config.json's quantization.kv_cache_quant_algo, or None (absent file, key or object)."""
    hf_file = os.path.join(model_dir, "hf_quant_config.json")
    if not present(hf_file):
        return None
    q = load_json_object(hf_file).get("quantization")
    kv = q.get("kv_cache_quant_algo") if isinstance(q, dict) else None
    return kv if isinstance(kv, str) else None


def parse_quant(model_dir: str, config: JsonObject) -> QuantInfo:
    """config.json quantization_config first (as SGLang reads it), else hf_quant_config.json; the KV-cache
    quantization from hf_quant_config.json also when config.json's block names none (SGLang reads both, #27906)."""
    cfg_file = os.path.join(model_dir, "config.json")
    qc = config.get("quantization_config")
    if qc is not None:
        if not isinstance(qc, dict):
            raise CheckpointError(cfg_file, "quantization_config must be a JSON object", field="quantization_config",
                                  expected="a JSON object")
        kv = qc.get("kv_cache_quant_algo")
        scheme = qc.get("kv_cache_scheme")
        if kv is None and isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8:
            kv = "FP8"
        excl_key = next((k for k in ("ignore", "modules_to_not_convert", "exclude_modules") if k in qc), "ignore")
        kv_source = "config.json quantization_config" if isinstance(kv, str) else None
        if not isinstance(kv, str):
            hf_kv = _hf_kv_cache_algo(model_dir)
            kv, kv_source = hf_kv, ("hf_quant_config.json" if hf_kv else None)
        where = "quantization_config."
        return QuantInfo(
            kv_cache_quant_source=kv_source,
            source="config.json quantization_config",
            quant_method=_opt_str(cfg_file, qc, where, "quant_method"),
            quant_algo=_opt_str(cfg_file, qc, where, "quant_algo"),
            group_size=_checked_group_size(cfg_file, where, qc),
            kv_cache_quant_algo=kv if isinstance(kv, str) else None,
            exclude_modules=_str_list(cfg_file, f"quantization_config.{excl_key}", qc.get(excl_key)),
            producer=_producer(qc.get("producer")),
        )
    hf_file = os.path.join(model_dir, "hf_quant_config.json")
    if not present(hf_file):
        return QuantInfo(source=None)
    hf = load_json_object(hf_file)
    q = hf.get("quantization")
    if not isinstance(q, dict):
        raise CheckpointError(hf_file, "missing the 'quantization' object", field="quantization",
                              expected="a JSON object")
    kv = _opt_str(hf_file, q, "quantization.", "kv_cache_quant_algo")
    producer = hf.get("producer")
    producer_name = producer.get("name") if isinstance(producer, dict) else None
    return QuantInfo(
        source="hf_quant_config.json",
        kv_cache_quant_source="hf_quant_config.json" if isinstance(kv, str) else None,
        quant_method=_producer(producer) and str(producer_name),
        quant_algo=_opt_str(hf_file, q, "quantization.", "quant_algo"),
        group_size=_checked_group_size(hf_file, "quantization.", q),
        kv_cache_quant_algo=kv if isinstance(kv, str) else None,
        exclude_modules=_str_list(hf_file, "quantization.exclude_modules", q.get("exclude_modules")),
        producer=_producer(producer),
    )
