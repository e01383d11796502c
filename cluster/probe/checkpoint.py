"""Checkpoint probe: is MTP in the checkpoint? Answered from config.json, the safetensors index and every shard header.

`probe_checkpoint(model_dir)` never reads tensor data (only 8 + N header bytes per shard) and raises
`CheckpointError` (one line: file, field and what is wrong) on any bad input; every file it reads goes through
probe/files.py (bounded, regular files only; what is refused: docs/checkpoint-files.md).

JSON report (`ProbeReport.to_json()`, schema 1), stable keys:
  schema, model_dir, config{layout, architectures, model_type, text_model_type, hidden_size, num_hidden_layers,
  layer_types{type: count}, num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size,
  vocab_size, mtp_use_dedicated_embeddings, mtp_declared_layers, mtp_declared_in, mtp_declared_keys{key: layers}},
  files{index, shards[], header_bytes, file_bytes}, tensors{count, by_dtype{dtype: count}}, modules{prefix: count},
  mtp{verdict, kind, declared, declared_layers, declared_in, index_tensors, header_tensors, layers_found, fc_tensor,
  fc_dtype, weight_format, dtypes, has_weight_scale, excluded_in_quant_config, looked_in[], layout, layout_source,
  expected_layouts[], layout_matches_architecture, exclude_pattern} (layouts: probe/tensors.py MTP_LAYOUTS),
  quantization{source, quant_method, quant_algo, group_size, kv_cache_quant_algo, kv_cache_quant_source,
  exclude_modules[], producer, quantized_families{family: modules}, unquantized_families{family: modules},
  uncovered_plain_weights{family: modules}},
  params{total, target, mtp, vision, routed_experts, embedding, active_per_token, active_per_token_excl_embedding,
  decode_bytes_per_token, decode_routed_expert_bytes_per_token, mtp_bytes, bytes_by_dtype},
  speculative{supported[], needs_draft_model[]}, identity{fingerprint, hub_revision}, warnings[] (messages),
  warning_records[{code, message, about_mtp}] (probe/warning.py; codes: probe/consistency.py and below).
Keys are only ever added within schema 1 (readers ignore keys they do not know).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from cluster.input_files import JsonValue
from cluster.kernel.runs import uses_builtin_mtp_head
from cluster.probe.consistency import consistency_warnings
from cluster.probe.coverage import coverage_warning, uncovered_plain_weights
from cluster.probe.fingerprint import checkpoint_fingerprint, hub_revision
from cluster.probe.config import ModelConfig, QuantInfo, load_json_object, parse_model_config, parse_quant
from cluster.probe.files import INDEX_LIMIT_BYTES, check_file, clip, present, read_json_object
from cluster.probe.tensors import (
    Classifier,
    MtpEvidence,
    ParamCounts,
    count_params,
    mtp_evidence,
    quantized_families,
    top_prefix,
)
from cluster.probe.safetensors_header import CheckpointError, ShardHeader, TensorInfo, describe_non_file, read_header
from cluster.probe.warning import ProbeWarning

PROBE_SCHEMA_VERSION = 1
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
DRAFT_MODEL_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")
BUILTIN_DRAFT_ALGORITHMS = tuple(a for a in ("NEXTN", "MTP", *DRAFT_MODEL_ALGORITHMS) if uses_builtin_mtp_head(a, None))
"""Algorithms SGLang can run from the checkpoint's own MTP/NextN head, given no draft model (the planner's predicate)."""

__all__ = ["CheckpointError", "ProbeReport", "ProbeWarning", "probe_checkpoint", "probe_here", "PROBE_SCHEMA_VERSION"]


@dataclass
class ProbeReport:
    model_dir: str
    config: ModelConfig
    quant: QuantInfo
    mtp: MtpEvidence
    params: ParamCounts
    index_file: Optional[str]
    shards: list[str]
    header_bytes: int
    file_bytes: int
    tensor_count: int
    tensors_by_dtype: dict[str, int]
    modules: dict[str, int]
    quantized_families: dict[str, int]
    unquantized_families: dict[str, int]
    warnings: list[ProbeWarning] = field(default_factory=list)
    fingerprint: str = ""
    """SHA-256 over config.json, hf_quant_config.json, the index and every shard header (probe/fingerprint.py)."""
    hub_revision: Optional[str] = None
    """The Hugging Face commit of the files where the directory records it (None: not recorded, never guessed)."""
    uncovered_plain_weights: dict[str, int] = field(default_factory=dict)
    """Unquantized 2-D weight families no exclude pattern covers (probe/coverage.py)."""
    headers: list[ShardHeader] = field(default_factory=list, repr=False)
    """Every shard's validated header (tensor offsets included); not part of the JSON report."""

    @property
    def speculative_supported(self) -> list[str]:
        """Algorithms runnable with this checkpoint alone (NGRAM always; the built-in head when its weights exist)."""
        return (list(BUILTIN_DRAFT_ALGORITHMS) if self.mtp.weights_present else []) + ["NGRAM"]

    @property
    def nextn_refused(self) -> Optional[str]:
        """Why NEXTN cannot run from the checkpoint's own head as probed (None: config and weights agree on it)."""
        if not self.mtp.weights_present:
            return ("config.json declares MTP layers but the shards hold no MTP weights (the quantizer dropped them)"
                    if self.mtp.declared else "the checkpoint has no MTP/NextN weights")
        doubts = [w.message for w in self.warnings if w.about_mtp]
        return "; ".join(doubts) if doubts else None

    @property
    def speculative_needs_draft_model(self) -> list[str]:
        return [a for a in DRAFT_MODEL_ALGORITHMS if a not in self.speculative_supported]

    def to_json(self) -> dict[str, JsonValue]:
        quant = self.quant.to_json()
        quant["quantized_families"] = self.quantized_families
        quant["unquantized_families"] = self.unquantized_families
        quant["uncovered_plain_weights"] = self.uncovered_plain_weights
        return {
            "schema": PROBE_SCHEMA_VERSION,
            "model_dir": self.model_dir,
            "config": self.config.to_json(),
            "files": {
                "index": self.index_file,
                "shards": self.shards,
                "header_bytes": self.header_bytes,
                "file_bytes": self.file_bytes,
            },
            "tensors": {"count": self.tensor_count, "by_dtype": self.tensors_by_dtype},
            "modules": self.modules,
            "mtp": self.mtp.to_json(),
            "quantization": quant,
            "params": self.params.to_json(),
            "speculative": {
                "supported": self.speculative_supported,
                "needs_draft_model": self.speculative_needs_draft_model,
            },
            "identity": {"fingerprint": self.fingerprint, "hub_revision": self.hub_revision},
            "warnings": [w.message for w in self.warnings],
            "warning_records": [w.to_json() for w in self.warnings],
        }


def _shard_path(model_dir: str, index_path: str, shard: str, tensor: str) -> str:
    """The shard file a weight_map entry names: a plain file name or relative path inside the model directory."""
    field, expected = f"weight_map.{tensor}", "a .safetensors file name inside the model directory"
    if not shard or "\x00" in shard:
        raise CheckpointError(index_path, f"{field}: shard name {clip(shard)} is empty or holds a NUL byte",
                              field=field, expected=expected)
    if os.path.isabs(shard) or ".." in shard.replace("\\", "/").split("/"):
        raise CheckpointError(index_path, f"{field}: weight_map entry {clip(tensor)} names shard {clip(shard)} "
                              "outside the model directory", field=field, expected=expected)
    path = os.path.join(model_dir, shard)
    check_file(path, expected, report_in=index_path, field=field)
    return path


def _find_shards(model_dir: str) -> tuple[Optional[str], Optional[dict[str, str]], list[str]]:
    """(index file, weight_map, shard file names); weight_map is None without an index."""
    index_path = os.path.join(model_dir, INDEX_FILE)
    if present(index_path):
        index = read_json_object(index_path, INDEX_FILE, limit_bytes=INDEX_LIMIT_BYTES)
        wm = index.get("weight_map")
        if wm is None:
            raise CheckpointError(index_path, "missing 'weight_map' (expected {tensor name: shard file})",
                                  field="weight_map", expected="{tensor name: shard file}")
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise CheckpointError(index_path, "'weight_map' must be an object of {tensor name: shard file name}",
                                  field="weight_map", expected="{tensor name: shard file}")
        if not wm:
            raise CheckpointError(index_path, "'weight_map' is empty", field="weight_map",
                                  expected="at least one tensor")
        shards: list[str] = []
        seen: set[str] = set()
        for tensor, shard in wm.items():
            if shard not in seen:
                _shard_path(model_dir, index_path, shard, tensor)
                seen.add(shard)
                shards.append(shard)
        return INDEX_FILE, wm, sorted(shards)
    if present(os.path.join(model_dir, SINGLE_FILE)):
        return None, None, [SINGLE_FILE]
    return None, None, sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))


def probe_here(model_path: str) -> bool:
    """Whether this machine should probe `model_path`: something stands there, or it is a symlink loop (a loop
    resolves nowhere, so it is reported here rather than skipped as "on the GPU node"); a NUL path too, to refuse."""
    if "\x00" in model_path:
        return True
    return os.path.exists(model_path) or describe_non_file(model_path) == "is a symlink loop"


def probe_checkpoint(model_dir: str) -> ProbeReport:
    """Probe a Hugging Face-style checkpoint directory without loading tensor data."""
    if not str(model_dir):
        raise CheckpointError("''", "the model path is empty", field="model path", expected="a model directory")
    if "\x00" in str(model_dir):
        raise CheckpointError(clip(str(model_dir)), "the model path holds a NUL byte", field="model path",
                              expected="a path without NUL bytes")
    model_dir = os.path.abspath(os.path.expanduser(str(model_dir)))
    what = describe_non_file(model_dir)
    if what in ("does not exist", "is a dangling symlink", "is a symlink loop") or (what or "").startswith("cannot"):
        raise CheckpointError(model_dir, what or "", expected="a model directory")
    if what != "is a directory, not a file":
        raise CheckpointError(model_dir, "is not a directory (give the model directory holding config.json)",
                              expected="a model directory")
    cfg_path = os.path.join(model_dir, "config.json")
    try:
        index_file, weight_map, shards = _find_shards(model_dir)
    except OSError as e:
        raise CheckpointError(model_dir, f"cannot list directory: {e.strerror or e}") from None
    if not present(cfg_path):
        if not shards:
            raise CheckpointError(model_dir, "not a model directory: no config.json and no *.safetensors files")
        raise CheckpointError(cfg_path, "missing: a model directory needs config.json beside its safetensors files",
                              expected="the model's config.json")
    raw_cfg = load_json_object(cfg_path)
    cfg = parse_model_config(cfg_path, raw_cfg)
    quant = parse_quant(model_dir, raw_cfg)
    if not shards:
        raise CheckpointError(model_dir, f"no weights: neither {INDEX_FILE}, {SINGLE_FILE} nor any *.safetensors file")
    warnings: list[ProbeWarning] = []
    if index_file is None and shards != [SINGLE_FILE]:
        warnings.append(ProbeWarning("no-index", f"no {INDEX_FILE}: read all {len(shards)} *.safetensors files in "
                                     "the directory"))

    tensors: dict[str, TensorInfo] = {}
    header_bytes = file_bytes = 0
    missing_from_index = 0
    header_digests: list[tuple[str, str]] = []
    headers: list[ShardHeader] = []
    for shard in shards:
        hdr = read_header(os.path.join(model_dir, shard))
        headers.append(hdr)
        header_digests.append((shard, hdr.header_sha256))
        header_bytes += 8 + hdr.header_bytes
        file_bytes += hdr.file_size_bytes
        for name, info in hdr.tensors.items():
            if weight_map is not None and weight_map.get(name) != shard:
                missing_from_index += 1
                continue
            if name in tensors:
                raise CheckpointError(hdr.path, f"tensor {clip(name)} is also in another shard", field=name,
                                      expected="each tensor in one shard")
            tensors[name] = info
    if weight_map is not None:
        absent = [n for n in weight_map if n not in tensors]
        if absent:
            warnings.append(ProbeWarning(
                "index-tensor-absent", f"{INDEX_FILE}: {len(absent)} tensor(s) of the weight_map are not in their "
                f"shard's header (e.g. {absent[0]!r} in {weight_map[absent[0]]})"))
        if missing_from_index:
            warnings.append(ProbeWarning("index-unmapped", f"{missing_from_index} tensor(s) in shard headers are not "
                                         "mapped to that shard by the index"))

    cls = Classifier(cfg)
    looked_in = [f"config.json ({'text_config.' if cfg.layout == 'nested_text_config' else ''}mtp_num_hidden_layers, "
                 "num_nextn_predict_layers)"]
    if index_file:
        looked_in.append(f"{index_file} weight_map ({len(weight_map or {})} tensors)")
    looked_in.append(f"safetensors headers of {len(shards)} shard(s)")
    mtp = mtp_evidence(cfg, quant, cls, list(weight_map) if weight_map is not None else None, tensors, looked_in)
    warnings += consistency_warnings(cfg, mtp, cls, tensors)
    if (mtp.weights_present and quant.quant_algo and "FP4" in quant.quant_algo.upper()
            and mtp.weight_format in ("BF16", "F16", "F32") and not mtp.excluded_in_quant_config):
        warnings.append(ProbeWarning("mtp-quant-uncovered", "MTP weights are unquantized but no exclude/ignore "
                                     "pattern covers mtp.*: some loaders will expect NVFP4 scales for them"))
    params = count_params(cfg, cls, tensors, warnings)
    by_dtype: dict[str, int] = {}
    modules: dict[str, int] = {}
    for name, info in tensors.items():
        by_dtype[info.dtype] = by_dtype.get(info.dtype, 0) + 1
        p = top_prefix(name)
        modules[p] = modules.get(p, 0) + 1
    qf, uf = quantized_families(tensors)
    uncovered = uncovered_plain_weights(tensors, quant)
    if uncovered:
        warnings.append(ProbeWarning("quant-uncovered", coverage_warning(uncovered, quant)))
    return ProbeReport(
        fingerprint=checkpoint_fingerprint(model_dir, index_file, header_digests),
        hub_revision=hub_revision(model_dir),
        uncovered_plain_weights=uncovered,
        headers=headers,
        model_dir=model_dir,
        config=cfg,
        quant=quant,
        mtp=mtp,
        params=params,
        index_file=index_file,
        shards=shards,
        header_bytes=header_bytes,
        file_bytes=file_bytes,
        tensor_count=len(tensors),
        tensors_by_dtype=dict(sorted(by_dtype.items())),
        modules=dict(sorted(modules.items())),
        quantized_families=qf,
        unquantized_families=uf,
        warnings=warnings,
    )
