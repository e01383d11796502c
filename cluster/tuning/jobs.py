"""The tuning stage's decision, made before any GPU is reserved: per tuned variant, the job the Ray side carries out
(a Triton fused-MoE search or a FlashInfer autotune launch) or the refusal it records, from what the variant's
engine adapter answers (TuningSurface, implemented per engine in cluster/engines/tuning_surfaces.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence, Union

from cluster.engines import sglang_tuning as sgt
from cluster.engines.tuning_contract import GpuFacts, MoeModelConfig, MoeShape, TuningError, load_moe_config, moe_shape
from cluster.engines.tuning_surfaces import MoeSearchDevice
from cluster.input_files import JsonValue
from cluster.kernel.runs import ResolvedVariant
from cluster.tuning.stage import (ARTIFACT_KINDS, artifact_key, autotune_extend, autotune_run_variant,
                                  autotune_warmup_requests, split_batch_sizes, triton_moe_options,
                                  tuning_options_check)


class TuningSurface(Protocol):
    """What the tuning stage asks an engine adapter: the answers that differ per engine."""

    def declared_gpu_facts(self, variant: ResolvedVariant, gpus_per_node: int) -> Optional[GpuFacts]:
        """The GPU an artifact is keyed on, where the engine declares it; None: probe a GPU node."""
        ...

    def declared_moe_config(self, variant: ResolvedVariant) -> Optional[MoeModelConfig]:
        """The model's MoE dimensions, where the engine declares them; None: read the checkpoint's config.json."""
        ...

    def moe_search_device(self, variant: ResolvedVariant) -> MoeSearchDevice:
        """Where the Triton fused-MoE search times its configs."""
        ...


@dataclass(frozen=True)
class MoeSearchJob:
    """A triton_moe variant's fused-MoE config search, its batch sizes split over one node's GPUs."""

    variant: ResolvedVariant
    declared_facts: Optional[GpuFacts]
    shape: MoeShape
    batch_sizes: tuple[int, ...]
    max_configs: Optional[int]
    seed: int
    device: MoeSearchDevice

    def key(self, facts: GpuFacts) -> dict[str, JsonValue]:
        """The artifact's reuse key (JSON: stored as given in the artifact's manifest)."""
        extra: dict[str, JsonValue] = {
            "E": self.shape.num_experts, "N": self.shape.shard_n, "dtype": self.shape.dtype,
            "batch_sizes": list(self.batch_sizes), "max_configs": self.max_configs, "seed": self.seed}
        return artifact_key("triton_moe", self.variant, facts, extra)

    def worker_batches(self, gpus_per_node: int, cluster_gpus: int) -> list[list[int]]:
        """The batch sizes of each worker: one per GPU of one node, at most as many as the cluster has."""
        return split_batch_sizes(list(self.batch_sizes), min(gpus_per_node, max(1, cluster_gpus)))


@dataclass(frozen=True)
class AutotuneJob:
    """A flashinfer_autotune variant's one-off launch with autotuning on, warmed with the workload's shapes."""

    variant: ResolvedVariant
    declared_facts: Optional[GpuFacts]
    extend: bool
    warmup_requests: int

    def key(self, facts: GpuFacts) -> dict[str, JsonValue]:
        """The artifact's reuse key (JSON: stored as given in the artifact's manifest)."""
        return artifact_key("flashinfer_autotune", self.variant, facts, {"extend": self.extend})

    def launch_variant(self, cache_dir: str) -> ResolvedVariant:
        """The variant as the tuning launch runs it, writing its cache into `cache_dir`."""
        return autotune_run_variant(self.variant, cache_dir)


@dataclass(frozen=True)
class RefusedJob:
    """A variant whose tuning its checkpoint's config refuses (unreadable, not a MoE, NVFP4): recorded as that
    variant's failure when the Ray side reaches it, the other variants' jobs still run."""

    variant: ResolvedVariant
    declared_facts: Optional[GpuFacts]
    error: TuningError


TuningJob = Union[MoeSearchJob, AutotuneJob, RefusedJob]


@dataclass(frozen=True)
class TuningDecision:
    """The jobs of the tuning stage, in the variants' order."""

    jobs: tuple[TuningJob, ...]


def decide_tuning(variants: Sequence[ResolvedVariant], surface_of: Callable[[str], TuningSurface],
                  gpus_per_node: int) -> TuningDecision:
    """One job per variant whose tuning kind makes an artifact. Refusals that need no GPU and no checkpoint raise
    TuningError here, before any job (back ends SGLang lacks; a triton_moe whose given or declared config is an
    NVFP4 MoE or no MoE)."""
    tuned = [v for v in variants if v.tuning is not None and v.tuning.kind in ARTIFACT_KINDS]
    for v in tuned:
        _check(v, surface_of(v.engine))
    return TuningDecision(tuple(_job(v, surface_of(v.engine), gpus_per_node) for v in tuned))


def _check(v: ResolvedVariant, surface: TuningSurface) -> None:
    tuning_options_check(v)
    if v.tuning is None or v.tuning.kind != "triton_moe":
        return
    opts = triton_moe_options(v)
    cfg = load_moe_config(opts.model_config_path) if opts.model_config_path else surface.declared_moe_config(v)
    if cfg is not None:
        moe_shape(cfg, v.tp, opts.ep, opts.dtype, v.args, f"variant {v.name}")


def _job(v: ResolvedVariant, surface: TuningSurface, gpus_per_node: int) -> TuningJob:
    facts = surface.declared_gpu_facts(v, gpus_per_node)
    assert v.tuning is not None
    if v.tuning.kind != "triton_moe":
        return AutotuneJob(v, facts, autotune_extend(v), autotune_warmup_requests(v))
    opts = triton_moe_options(v)
    try:
        cfg = load_moe_config(opts.model_config_path) if opts.model_config_path else surface.declared_moe_config(v)
        if cfg is None:
            cfg = load_moe_config(v.model_path)
        shape = moe_shape(cfg, v.tp, opts.ep, opts.dtype, v.args, f"variant {v.name}")
    except TuningError as e:
        return RefusedJob(v, facts, e)
    return MoeSearchJob(v, facts, shape, tuple(opts.batch_sizes or sgt.DEFAULT_MOE_BATCH_SIZES), opts.max_configs,
                        opts.seed, surface.moe_search_device(v))
