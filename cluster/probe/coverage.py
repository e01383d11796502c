"""Quantization exclude-list coverage: unquantized 2-D weights of a quantized checkpoint that no exclude pattern names.

A loader that trusts the list expects quantized tensors (packed weight, scales) for every module it does not exclude;
NVIDIA's Qwen3.5-397B-A17B-NVFP4 list once omitted `*.mlp.gate` (the router) and `mtp.fc`, and vLLM failed to load it
until it special-cased them (vllm#35156). The probe warns with the module families instead of letting a server fail.
"""

from __future__ import annotations

from typing import Mapping

from cluster.probe.config import QuantInfo
from cluster.probe.safetensors_header import TensorInfo
from cluster.probe.tensors import family_of, glob_to_regex, leaf, module_of

PLAIN_DTYPES = frozenset({"BF16", "F16", "F32"})
EMBEDDING_MODULES = frozenset({"embed_tokens", "embeddings", "word_embeddings", "wte", "embed"})
"""Embedding tables are looked up, never run as quantized linears: no exclude entry is needed for them."""


def uncovered_plain_weights(tensors: Mapping[str, TensorInfo], quant: QuantInfo) -> dict[str, int]:
    """family → count of plain (BF16/F16/F32) 2-D `.weight` tensors without a `weight_scale` sibling whose module
    no exclude pattern matches; {} for an unquantized checkpoint."""
    if not quant.quant_algo:
        return {}
    patterns = [glob_to_regex(p) for p in quant.exclude_modules]
    out: dict[str, int] = {}
    for name, info in tensors.items():
        if leaf(name) != "weight" or len(info.shape) != 2 or info.dtype not in PLAIN_DTYPES:
            continue
        mod = module_of(name)
        if mod + ".weight_scale" in tensors or mod.rsplit(".", 1)[-1] in EMBEDDING_MODULES:
            continue
        if any(p.fullmatch(mod) for p in patterns):
            continue
        fam = family_of(mod)
        out[fam] = out.get(fam, 0) + 1
    return dict(sorted(out.items()))


def coverage_warning(uncovered: Mapping[str, int], quant: QuantInfo) -> str:
    where = f"{quant.source} exclude list" if quant.source else "the exclude list"
    names = ", ".join(list(uncovered)[:8]) + (", …" if len(uncovered) > 8 else "")
    return (f"{sum(uncovered.values())} unquantized 2-D weight(s) are not covered by {where}: {names}; a loader "
            "that trusts the list expects quantized tensors for them (NVIDIA's list once omitted *.mlp.gate and "
            "mtp.fc: vllm#35156)")
