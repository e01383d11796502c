"""The GEMM tuning stage, pure part: kinds, reuse keys, batch-size split and merge, back-end checks, launch env/args
(the MoE shape, NVFP4 refusal and GPU facts it shares with the simulator: cluster/engines/sglang_tuning.py).

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
from typing import Mapping, Optional, Sequence

from cluster.engines import sglang_tuning as sgt
from cluster.engines.tuning_contract import GpuFacts, TuningError, canonical_args
from cluster.input_files import JsonObject, JsonValue
from cluster.kernel.runs import ResolvedVariant
from cluster.config.tuning import (TUNING_MODELS, BackendSweepTuning, FlashinferAutotuneTuning, TritonMoeOptions,
                                   TritonMoeTuning)
from cluster.config.server import ArgValue
from cluster.tuning.artifacts import TuningArtifact

KINDS = tuple(k for k in TUNING_MODELS if k != "none")
"""The tuning kinds, declared once (each kind's options are its model in cluster/config/tuning.py)."""
ARTIFACT_KINDS = ("flashinfer_autotune", "triton_moe")
"""The kinds that produce an artifact (a tuning job before the variant's runs); backend_sweep only expands."""
assert set(ARTIFACT_KINDS) <= set(KINDS)
PROVENANCE_FIELD = "tuning_artifact"
"""Run-row field (records.py) holding the artifact's content hash."""
PENDING_ARTIFACT = "<tuning artifact: made at run time>"
"""Placeholder path shown by `sglbench plan` before the tuning stage has produced the artifact."""


def backend_args(variant: ResolvedVariant) -> dict[str, ArgValue]:
    """The variant's kernel-choosing server args (back ends, quantization, dtypes, parallelism), normalised."""
    args = canonical_args(variant.args)
    out: dict[str, ArgValue] = {k: args[k] for k in sgt.BACKEND_FLAGS if k in args and args[k] not in (None, False)}
    if variant.speculative is not None:
        out["speculative-algorithm"] = variant.speculative.algorithm
        out["speculative-num-steps"] = variant.speculative.num_steps
    return out


def artifact_key(kind: str, variant: ResolvedVariant, facts: GpuFacts, extra: Optional[JsonObject] = None
                 ) -> dict[str, JsonValue]:
    """The reuse key: an artifact is reused only when every field matches (JSON-normalised)."""
    key: dict[str, JsonValue] = {
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
    normalised: dict[str, JsonValue] = json.loads(json.dumps(key, sort_keys=True, default=str))
    return normalised


# ------------------------------------------------------------------------------------------- triton_moe batch sizes
def split_batch_sizes(batch_sizes: list[int], gpus: int) -> list[list[int]]:
    """Round-robin over at most `gpus` workers (as SGLang's tuner spreads batch sizes over its Ray workers)."""
    n = max(1, min(gpus, len(batch_sizes)))
    return [batch_sizes[i::n] for i in range(n) if batch_sizes[i::n]]


def merge_moe_configs(parts: Sequence[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
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
