"""Fairness rules that depend on the model and the GPU: the hybrid-model radix-cache strategy and pinned back ends.

Each rule cites the SGLang 0.5.23 source it relies on (paths under sglang/srt/ of the installed wheel) or the
public PR/issue that measured the trap. What the checkpoint is comes from the probe (`ModelFacts.from_report`);
where no probe ran (the checkpoint is not readable on this machine) the facts are unknown and only the rules that
need no facts apply; the GPU node's preflight runs them again with the probe and the GPUs' compute capability.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from cluster.input_files import JsonObject
from cluster.plan.findings import FindingCollector, Level
from cluster.kernel.runs import ResolvedVariant

if TYPE_CHECKING:
    from cluster.probe.checkpoint import ProbeReport

SM120 = 120
"""RTX PRO 6000 Blackwell / RTX 50xx (compute capability 12.0), as `nvidia-smi --query-gpu=compute_cap` × 10."""

_ROUTED = re.compile(r"(^|\.)experts\.\*\.")
"""A routed-expert family (`…mlp.experts.*.gate_proj`); `shared_expert.` is dense and does not match."""


@dataclass(frozen=True)
class ModelFacts:
    """What the probe says about a checkpoint, as far as these rules need it (None: not known here)."""

    hybrid: Optional[bool] = None
    """Linear-attention layers with recurrent (Mamba-style) state: config layer_types holds linear_attention/mamba."""
    moe: Optional[bool] = None
    nvfp4: Optional[bool] = None
    dense_nvfp4_families: tuple[str, ...] = ()
    """NVFP4-quantized linear families outside the routed experts (shared experts, attention, dense MLP)."""
    routed_nvfp4: Optional[bool] = None

    @property
    def routed_only_nvfp4(self) -> bool:
        """Only routed experts are NVFP4: --fp4-gemm-backend (dense FP4 GEMMs) has nothing to run."""
        return bool(self.nvfp4 and self.routed_nvfp4 and not self.dense_nvfp4_families)

    @classmethod
    def from_report(cls, report: "ProbeReport") -> "ModelFacts":
        types = " ".join(report.config.layer_types).lower()
        algo = report.quant.quant_algo
        nvfp4 = bool(algo and "FP4" in algo.upper())
        quantized = list(report.quantized_families)
        return cls(hybrid="linear" in types or "mamba" in types, moe=bool(report.config.num_experts), nvfp4=nvfp4,
                   dense_nvfp4_families=tuple(f for f in quantized if not _ROUTED.search(f)) if nvfp4 else (),
                   routed_nvfp4=nvfp4 and any(_ROUTED.search(f) for f in quantized))


def _set(v: Any) -> bool:
    return v is not None and v is not False and v != ""


def _auto(v: Any) -> bool:
    return not _set(v) or str(v).strip().lower() == "auto"


def _strategy(args: JsonObject) -> Optional[str]:
    for key in ("mamba-radix-cache-strategy", "mamba-scheduler-strategy"):
        if _set(args.get(key)):
            return str(args[key]).strip().lower()
    return None


def _speculative(v: ResolvedVariant, args: JsonObject) -> bool:
    return v.speculative is not None or _set(args.get("speculative-algorithm"))


def hybrid_cache_rules(chk: FindingCollector, v: ResolvedVariant, args: JsonObject, facts: ModelFacts,
                       version: Optional[str]) -> None:
    """Issue 15 item 1: on a hybrid model the radix-cache strategy must be explicit (and, across variants, equal).

    0.5.23 resolves `auto` per variant (arg_groups/overrides.py `_mamba_radix_cache_resolution`): extra_buffer when
    overlap scheduling or paging is on and the model supports it, else no_buffer *with overlap scheduling turned
    off*; sglang PR #27220 measured 1,278 (no_buffer) vs 1,528 (extra_buffer) vs 1,977 tok/s (radix cache off) on
    Qwen3.5-35B-A3B from this choice alone. An explicit strategy on a model without Mamba state raises in
    arg_groups/model_hook.py `handle_mamba_radix_cache` ("needs mamba state")."""
    from cluster.engines.sglang import MAMBA_STRATEGY_RENAME, mamba_strategy_flag, parse_version

    flag = mamba_strategy_flag(version)
    strategy = _strategy(args)
    radix_off = _set(args.get("disable-radix-cache"))
    if facts.hybrid and not radix_off and (strategy is None or strategy == "auto"):
        chk.add(v, "error", "mamba-radix-cache-strategy",
                f"hybrid (linear-attention + Mamba-state) model with {flag} {strategy or 'unset'} (auto): SGLang "
                "resolves it per variant (extra_buffer, or no_buffer with overlap scheduling off), which moved "
                "throughput 1,278 vs 1,977 tok/s in sglang PR #27220; pin it (e.g. extra_buffer) on every variant")
    if facts.hybrid is False and strategy not in (None, "auto"):
        chk.add(v, "error", "mamba-radix-cache-strategy",
                f"{flag} {strategy} on a model without Mamba state: SGLang 0.5.23 refuses it at launch "
                "(arg_groups/model_hook.py handle_mamba_radix_cache: 'needs mamba state'); drop it")
    if (parse_version(version) < MAMBA_STRATEGY_RENAME and _speculative(v, args) and strategy == "no_buffer"
            and not radix_off):
        chk.add(v, "error", "mamba-radix-cache-strategy",
                f"{flag} no_buffer with speculative decoding on SGLang {version}: releases before 0.5.14 "
                "turned the radix cache off for the speculative variant only (0.5.8-0.5.9, with a warning) or "
                "refused to start (0.5.10-0.5.13, ValueError; server_args.py of each wheel, sglang#27418), so it "
                "is compared without the cache its baseline has; use extra_buffer")


def backend_rules(chk: FindingCollector, v: ResolvedVariant, args: JsonObject, facts: ModelFacts,
                  gpu_sm: Optional[int]) -> None:
    """Issue 15 item 3: MoE runner (target and draft) and FP4 GEMM back ends explicit where `auto` is a trap.

    - `--moe-runner-backend auto` routed to a back end that raises NotImplementedError on SM120 in some builds
      (sglang PR #39807); the draft inherits it unless `--speculative-moe-runner-backend` is set (0.5.23:
      arg_groups/overrides.py `_speculative_moe_runner_default`: None → the target's runner). An error on SM120,
      a warning on an NVFP4 MoE checkpoint when the GPU is not known here.
    - `--fp4-gemm-backend auto` (0.5.23 fields/exec_.py: flashinfer_cutlass on SM120) has flipped between cudnn
      and flashinfer_cutlass across releases (PRs #20047, #38170): pinned wherever a dense layer is NVFP4."""
    sm120 = gpu_sm == SM120
    if _speculative(v, args) and facts.moe is not False and (sm120 or (facts.moe and facts.nvfp4)):
        level: Level = "error" if sm120 else "warning"
        where = "on SM120" if sm120 else "on an NVFP4 MoE checkpoint (SM120 if the node is one)"
        if _auto(args.get("moe-runner-backend")):
            chk.add(v, level, "moe-runner-backend",
                    f"speculative variant {where} with --moe-runner-backend auto: auto has routed to a back end "
                    "that raises NotImplementedError on SM120 (sglang PR #39807); pin it")
        if not _set(args.get("speculative-moe-runner-backend")):
            chk.add(v, level, "speculative-moe-runner-backend",
                    f"speculative variant {where} without --speculative-moe-runner-backend: the draft model "
                    "inherits the target's MoE runner (0.5.23 arg_groups/overrides.py _speculative_moe_runner_"
                    "default); pin it (the MTP head is BF16: triton is SGLang's own choice for a BF16 NextN MoE)")
    if facts.dense_nvfp4_families and _auto(args.get("fp4-gemm-backend")):
        chk.add(v, "error", "fp4-gemm-backend",
                f"dense NVFP4 layers ({', '.join(facts.dense_nvfp4_families[:3])}"
                f"{', …' if len(facts.dense_nvfp4_families) > 3 else ''}) with --fp4-gemm-backend auto: auto has "
                "flipped between flashinfer_cudnn and flashinfer_cutlass across releases (sglang PRs #20047, "
                "#38170); pin it")


def cross_variant_cache_rule(chk: FindingCollector, group: Sequence[ResolvedVariant],
                             args_of: Mapping[str, JsonObject], version: Optional[str]) -> None:
    """The radix-cache strategy and radix-cache switch equal across compared variants (unset reads as auto)."""
    from cluster.engines.sglang import mamba_strategy_flag

    ref = next((v for v in group if v.is_baseline), group[0])
    want = (_strategy(args_of[ref.name]) or "auto", _set(args_of[ref.name].get("disable-radix-cache")))
    for v in group:
        got = (_strategy(args_of[v.name]) or "auto", _set(args_of[v.name].get("disable-radix-cache")))
        if v is ref or got == want:
            continue
        chk.add(v, "error", "mamba-radix-cache-strategy",
                f"{mamba_strategy_flag(version)} {got[0]} (radix cache {'off' if got[1] else 'on'}) here but "
                f"{want[0]} (radix cache {'off' if want[1] else 'on'}) on {ref.name!r}: on a hybrid model this "
                "choice alone moved throughput 1,278 vs 1,977 tok/s (sglang PR #27220); compared variants must match")
