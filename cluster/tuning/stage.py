"""The GEMM tuning stage, pure part: kinds, reuse keys, MoE shapes, NVFP4 refusal, back-end sweeps, launch env/args.

Kinds (a variant's `tuning: {kind, options}`), named for what they really tune (reference
checkpoints-tuning-limits.md §3.4):
- `flashinfer_autotune`: one launch with FlashInfer autotuning on into a dedicated SGLANG_CACHE_DIR, warmed with the
  workload's shapes; the per-rank cache JSONs become the artifact; the variant launches with SGLANG_CACHE_DIR there.
  Options: `extend` (bool, also tune prefill buckets), `warmup_requests` (int).
- `triton_moe`: SGLang's fused-MoE Triton config search for the model's (E, N, dtype), split across GPUs; the merged
  `E=..,N=..,device_name=..json` becomes the artifact; the variant launches with SGLANG_MOE_CONFIG_DIR there.
  Refused for an NVFP4 MoE. Options: `model_config` (dir or config.json with the BF16 base config), `dtype`,
  `batch_sizes`, `ep`, `max_configs` (search-space subsample), `seed`.
- `backend_sweep`: no artifact; the planner (cluster/plan/runs.py expand_backend_sweep) expands it into one variant
  per (MoE runner, FP4 GEMM) back-end pair; tuning_options_check says whether SGLang 0.5.23 has those back ends.
  Options: `moe_runner_backend: [...]`, `fp4_gemm_backend: [...]`, `exclude: [{moe_runner_backend, fp4_gemm_backend}]`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from cluster.engines import sglang_tuning as sgt
from cluster.errors import UserError
from cluster.kernel.runs import ResolvedVariant
from cluster.probe.config import load_json_object
from cluster.probe.files import CheckpointError
from cluster.config.tuning import (TUNING_MODELS, BackendSweepTuning, FlashinferAutotuneTuning, TritonMoeOptions,
                                   TritonMoeTuning)
from cluster.config.server import ArgValue
from cluster.tuning.artifacts import TuningArtifact

KINDS = tuple(k for k in TUNING_MODELS if k != "none")
"""The tuning kinds, declared once (each kind's options are its model in cluster/config/models.py)."""
ARTIFACT_KINDS = ("flashinfer_autotune", "triton_moe")
"""The kinds that produce an artifact (a tuning job before the variant's runs); backend_sweep only expands."""
assert set(ARTIFACT_KINDS) <= set(KINDS)
PROVENANCE_FIELD = "tuning_artifact"
"""Run-row field (records.py) holding the artifact's content hash."""
PENDING_ARTIFACT = "<tuning artifact: made at run time>"
"""Placeholder path shown by `sglbench plan` before the tuning stage has produced the artifact."""


class TuningError(UserError):
    """A tuning request that cannot be honoured (one line naming the variant, the field and the reason)."""


@dataclass(frozen=True)
class GpuFacts:
    """What a tuning artifact depends on besides the server args (SGLang rejects a FlashInfer cache on mismatch)."""

    gpu_name: str
    compute_capability: str = ""
    driver_version: str = ""
    gpu_count: int = 0
    sglang_version: str = ""
    flashinfer_version: str = ""
    triton_version: str = ""
    torch_version: str = ""
    cuda_version: str = ""

    @property
    def sm(self) -> str:
        return sgt.sm_tag(self.compute_capability) if self.compute_capability else "sm?"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _canon_args(args: Mapping[str, ArgValue]) -> dict[str, ArgValue]:
    return {k.replace("_", "-"): v for k, v in args.items()}


def backend_args(variant: ResolvedVariant) -> dict[str, Any]:
    """The variant's kernel-choosing server args (back ends, quantization, dtypes, parallelism), normalised."""
    args = _canon_args(variant.args)
    out: dict[str, Any] = {k: args[k] for k in sgt.BACKEND_FLAGS if k in args and args[k] not in (None, False)}
    if variant.speculative is not None:
        out["speculative-algorithm"] = variant.speculative.algorithm
        out["speculative-num-steps"] = variant.speculative.num_steps
    return out


def artifact_key(kind: str, variant: ResolvedVariant, facts: GpuFacts, extra: Optional[Mapping[str, Any]] = None
                 ) -> dict[str, Any]:
    """The reuse key: an artifact is reused only when every field matches (JSON-normalised)."""
    key: dict[str, Any] = {
        "kind": kind,
        "engine": variant.engine,
        "gpu_name": facts.gpu_name,
        "sm": facts.sm,
        "driver_version": facts.driver_version,
        "sglang_version": facts.sglang_version,
        "flashinfer_version": facts.flashinfer_version,
        "model_path": variant.model_path,
        "tp": variant.tp,
        "backends": backend_args(variant),
        "extra": dict(extra or {}),
    }
    if kind == "triton_moe":
        key["triton_version"] = facts.triton_version
    normalised: dict[str, Any] = json.loads(json.dumps(key, sort_keys=True, default=str))
    return normalised


# ------------------------------------------------------------------------------------------- triton_moe shapes
@dataclass(frozen=True)
class MoeShape:
    """One fused-MoE GEMM problem as SGLang's tuner sees it (per TP/EP shard)."""

    num_experts: int
    shard_n: int
    """`N` in the file name: moe_intermediate_size / (tp / ep)."""
    hidden_size: int
    top_k: int
    dtype: str = "auto"

    def file_name(self, device_name: str) -> str:
        return sgt.moe_config_file_name(self.num_experts, self.shard_n, device_name, self.dtype)


def load_model_config(path: str) -> dict[str, Any]:
    """A checkpoint's config.json (path to the file or its directory); TuningError naming the file when unreadable."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:  # the checkpoint boundary: bounded, regular files only (a FIFO cannot hang it), depth and digit limits
        return load_json_object(str(p))
    except CheckpointError as e:
        raise TuningError(f"{e}; set tuning.options.model_config to a directory holding the BF16 base config.json",
                          file=e.file, field=e.field, expected=e.expected) from None


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    tc = cfg.get("text_config")
    return tc if isinstance(tc, Mapping) else cfg


def nvfp4_reason(cfg: Mapping[str, Any], args: Mapping[str, ArgValue], dtype: str) -> Optional[str]:
    """Why the Triton fused-MoE tuner does not apply (an NVFP4 MoE), or None."""
    quant = str(_canon_args(args).get("quantization") or "")
    if "fp4" in quant.lower():
        return f"--quantization {quant}"
    if "fp4" in dtype.lower():
        return f"dtype {dtype}"
    for qc in (cfg.get("quantization_config"), _text_config(cfg).get("quantization_config")):
        if not isinstance(qc, Mapping):
            continue
        algo = str(qc.get("quant_algo") or qc.get("quant_method") or "")
        if "fp4" in algo.lower():
            return f"quantization_config {algo}"
        groups = qc.get("config_groups")
        if isinstance(groups, Mapping):
            for g in groups.values():
                w = g.get("weights") if isinstance(g, Mapping) else None
                if isinstance(w, Mapping) and w.get("num_bits") == 4 and w.get("type") == "float":
                    return "quantization_config.config_groups with 4-bit float weights (NVFP4)"
    return None


def moe_shape(cfg: Mapping[str, Any], tp: int, ep: int = 1, dtype: str = "auto",
              args: Optional[Mapping[str, ArgValue]] = None, where: str = "tuning") -> MoeShape:
    """SGLang tuner's shape for Qwen3-MoE/Qwen3-Next/Qwen3.5-MoE: E = experts/ep, N = moe_intermediate/(tp/ep).

    Raises TuningError for an NVFP4 MoE: the Triton fused-MoE kernel has no NVFP4 path (those experts run on
    FlashInfer/CUTLASS, tuned by `flashinfer_autotune`).
    """
    if dtype not in sgt.TRITON_MOE_DTYPES:
        reason = nvfp4_reason({}, {}, dtype)
        if reason:
            raise TuningError(f"{where}: triton_moe does not apply to an NVFP4 MoE ({reason}): SGLang's Triton "
                              "fused-MoE tuner has no NVFP4 dtype; use kind flashinfer_autotune or backend_sweep")
        raise TuningError(f"{where}: options.dtype {dtype!r} is not a Triton MoE dtype (expected one of "
                          f"{', '.join(sgt.TRITON_MOE_DTYPES)})")
    reason = nvfp4_reason(cfg, args or {}, dtype)
    if reason:
        raise TuningError(f"{where}: triton_moe does not apply to an NVFP4 MoE ({reason}): SGLang's Triton fused-MoE "
                          "tuner has no NVFP4 dtype and ModelOpt NVFP4 experts run on FlashInfer/CUTLASS; use kind "
                          "flashinfer_autotune or backend_sweep (to tune the BF16 MTP draft MoE instead, point "
                          "options.model_config at the BF16 base config.json)")
    tc = _text_config(cfg)
    try:
        experts = int(tc["num_experts"])
        inter = int(tc["moe_intermediate_size"])
        hidden = int(tc["hidden_size"])
        top_k = int(tc.get("num_experts_per_tok", 1))
    except (KeyError, TypeError, ValueError):
        raise TuningError(f"{where}: the model config lacks num_experts/moe_intermediate_size/hidden_size "
                          "(expected a MoE config such as Qwen3.5-MoE's text_config)") from None
    if ep < 1 or tp % ep or experts % ep or inter % (tp // ep):
        raise TuningError(f"{where}: tp {tp} / ep {ep} do not divide experts {experts} and "
                          f"moe_intermediate_size {inter} evenly")
    return MoeShape(experts // ep, inter // (tp // ep), hidden, top_k, dtype)


def split_batch_sizes(batch_sizes: list[int], gpus: int) -> list[list[int]]:
    """Round-robin over at most `gpus` workers (as SGLang's tuner spreads batch sizes over its Ray workers)."""
    n = max(1, min(gpus, len(batch_sizes)))
    return [batch_sizes[i::n] for i in range(n) if batch_sizes[i::n]]


def merge_moe_configs(parts: list[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per-worker {batch size: best config} → one SGLang config document sorted by batch size."""
    merged: dict[int, dict[str, int]] = {}
    for part in parts:
        for bs, cfg in part.items():
            merged[int(bs)] = {f: int(cfg[f]) for f in sgt.MOE_CONFIG_FIELDS}
    return {str(bs): merged[bs] for bs in sorted(merged)}


# ------------------------------------------------------------------------------------------- backend_sweep
def _check_backends(v: ResolvedVariant, field: str, values: list[str], allowed: tuple[str, ...]) -> None:
    for x in values:
        if x not in allowed:
            raise TuningError(f"variant {v.family or v.name}: tuning.options.{field}: {x!r} is not a SGLang 0.5.23 "
                              f"choice (expected one of {', '.join(allowed)})", field=f"tuning.options.{field}",
                              expected=", ".join(allowed))


# ------------------------------------------------------------------------------------------- launch env/args
def tuning_env_and_args(variant: ResolvedVariant, artifact: Optional[TuningArtifact]
                        ) -> tuple[dict[str, str], dict[str, ArgValue]]:
    """The env and server args a variant launches with, given its artifact (None → plan-time placeholder path).

    flashinfer_autotune: SGLANG_CACHE_DIR=<artifact>, cache reuse on, autotune not disabled (identical key args, so
    SGLang finds the producer's `<hash16>` directory). triton_moe: SGLANG_MOE_CONFIG_DIR=<artifact>. Other variants
    are returned unchanged (the A/B baseline sets --disable-flashinfer-autotune itself in the experiment).
    """
    env = dict(variant.env)
    args = dict(variant.args)
    kind = variant.tuning.kind if variant.tuning else None
    path = artifact.path if artifact is not None else PENDING_ARTIFACT
    if artifact is not None and kind is not None and artifact.kind != kind:
        raise TuningError(f"variant {variant.name}: got a {artifact.kind} artifact for tuning kind {kind}")
    if kind == "flashinfer_autotune":
        env[sgt.ENV_CACHE_DIR] = path
        env[sgt.ENV_AUTOTUNE_CACHE] = "1"
        for k in [k for k in args if k.replace("_", "-") == sgt.FLAG_DISABLE_AUTOTUNE]:
            args.pop(k)
    elif kind == "triton_moe":
        env[sgt.ENV_MOE_CONFIG_DIR] = path
    return env, args


def with_artifact(variant: ResolvedVariant, artifact: Optional[TuningArtifact]) -> ResolvedVariant:
    """The variant as launched: env/args from tuning_env_and_args (its name and declared identity unchanged)."""
    env, args = tuning_env_and_args(variant, artifact)
    return dataclasses.replace(variant, env=env, args=args)


def autotune_run_variant(variant: ResolvedVariant, cache_dir: str) -> ResolvedVariant:
    """The one-off tuning launch of a flashinfer_autotune variant: autotune on, writing into `cache_dir`."""
    extend = isinstance(variant.tuning, FlashinferAutotuneTuning) and variant.tuning.options.extend
    env = dict(variant.env)
    env[sgt.ENV_CACHE_DIR] = cache_dir
    env[sgt.ENV_AUTOTUNE_CACHE] = "1"
    if extend:
        env[sgt.ENV_AUTOTUNE_EXTEND] = "1"
    args = {k: a for k, a in variant.args.items() if k.replace("_", "-") != sgt.FLAG_DISABLE_AUTOTUNE}
    return dataclasses.replace(variant, name=f"{variant.name}-autotune"[:64], env=env, args=args, tuning=None,
                               is_baseline=False)


def tuning_options_check(variant: ResolvedVariant) -> None:
    """What the spec's option models cannot know (they hold no engine flags): a backend_sweep's back ends must be
    SGLang 0.5.23 choices. Unknown option keys are refused by the spec itself (file:line:field)."""
    t = variant.tuning
    if not isinstance(t, BackendSweepTuning):
        return
    o = t.options
    _check_backends(variant, "moe_runner_backend", o.moe_runner_backend, sgt.MOE_BACKENDS_0_5_23)
    _check_backends(variant, "fp4_gemm_backend", o.fp4_gemm_backend, sgt.FP4_BACKENDS_0_5_23)
    if o.combination is not None:
        _check_backends(variant, "moe_runner_backend", [c for k, c in o.combination.items() if k == "moe_runner_backend"],
                        sgt.MOE_BACKENDS_0_5_23)
        _check_backends(variant, "fp4_gemm_backend", [c for k, c in o.combination.items() if k == "fp4_gemm_backend"],
                        sgt.FP4_BACKENDS_0_5_23)


def triton_moe_options(variant: ResolvedVariant) -> TritonMoeOptions:
    """A triton_moe variant's options (defaults for any other variant)."""
    return variant.tuning.options if isinstance(variant.tuning, TritonMoeTuning) else TritonMoeOptions()


def autotune_warmup_requests(variant: ResolvedVariant) -> int:
    """Warm-up requests of a flashinfer_autotune tuning launch."""
    t = variant.tuning
    return t.options.warmup_requests if isinstance(t, FlashinferAutotuneTuning) else 2


def autotune_extend(variant: ResolvedVariant) -> bool:
    """Whether a flashinfer_autotune launch also tunes the prefill buckets (part of the artifact's key)."""
    t = variant.tuning
    return isinstance(t, FlashinferAutotuneTuning) and t.options.extend
