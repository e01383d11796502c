"""Back-end sweep duplicates: where only routed experts are NVFP4, --fp4-gemm-backend runs no GEMM, so sweep variants
that differ only in it are the same server; keep one per MoE runner and say why (issue 15 item 6).

What is NVFP4 comes from the checkpoint probe (its quantized families: modules with a weight_scale sibling); with no
probe (the checkpoint is not readable here) nothing collapses and `plan` says the node decides.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from cluster.plan.model_rules import ModelFacts
from cluster.kernel.runs import ResolvedVariant
from cluster.config.tuning import BackendSweepTuning

FP4_ARG = "fp4_gemm_backend"


def _combo(v: ResolvedVariant) -> Optional[dict[str, str]]:
    t = v.tuning
    return t.options.combination if isinstance(t, BackendSweepTuning) else None


def collapse_fp4_duplicates(variants: Sequence[ResolvedVariant], facts: Optional[Mapping[str, ModelFacts]]
                            ) -> tuple[list[ResolvedVariant], list[str]]:
    """The variants without the redundant sweep members, and one note per dropped variant."""
    kept: list[ResolvedVariant] = []
    notes: list[str] = []
    first: dict[tuple[str, str, Optional[str]], str] = {}
    for v in variants:
        combo = _combo(v)
        mf = (facts or {}).get(v.model_path)
        if combo is None or FP4_ARG not in combo or mf is None or not mf.routed_only_nvfp4:
            kept.append(v)
            continue
        key = (v.family or v.name, v.model_path, combo.get("moe_runner_backend"))
        if key not in first:
            first[key] = v.name
            kept.append(v)
            continue
        notes.append(f"{v.name} is not run: it is the same server as {first[key]} because only the routed experts of "
                     f"{v.model_path} are NVFP4 (probe: no dense layer has a weight_scale), so --fp4-gemm-backend "
                     f"{combo[FP4_ARG]} runs no GEMM")
    return kept, notes


def undecided_note(variants: Sequence[ResolvedVariant], facts: Optional[Mapping[str, ModelFacts]]) -> Optional[str]:
    """A note when a sweep varies --fp4-gemm-backend on a checkpoint this machine could not probe."""
    swept = [v for v in variants if (c := _combo(v)) is not None and FP4_ARG in c and v.model_path not in (facts or {})]
    if len({(_combo(v) or {}).get(FP4_ARG) for v in swept}) < 2:
        return None
    return (f"{len(swept)} sweep variants vary --fp4-gemm-backend on a checkpoint not probed here; if the GPU node's "
            "probe finds only routed experts NVFP4, the duplicates (same server) are not run")
