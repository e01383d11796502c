"""A variant's `tuning: {kind, options}`: one model per kind (the kinds' stages are cluster/tuning/stage.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from cluster.config import bounds as B
from cluster.config.fields import FrozenModel, LocalPath


class FlashinferAutotuneOptions(FrozenModel):
    """`flashinfer_autotune`: one launch with FlashInfer autotuning on, its cache the artifact (cluster/tuning/stage.py)."""

    extend: bool = False
    """Also tune the prefill (extend) buckets (SGLANG_FLASHINFER_AUTOTUNE_EXTEND)."""
    warmup_requests: int = Field(default=2, ge=0, le=B.MAX_WARMUP_REQUESTS)
    """Requests of the workload's shapes sent to the tuning launch before its cache is archived."""


class TritonMoeOptions(FrozenModel):
    """`triton_moe`: SGLang's fused-MoE Triton config search for the model's (E, N, dtype), split across GPUs."""

    model_config_path: Optional[LocalPath] = Field(default=None, alias="model_config")
    """Directory (or config.json) with the BF16 base config, when the served checkpoint's is not the one to tune."""
    dtype: str = "auto"
    """A Triton MoE dtype (auto, fp8_w8a8, int8_w8a16, int8_w8a8); NVFP4 is refused (cluster/engines/tuning_contract.py)."""
    batch_sizes: Optional[list[Annotated[int, Field(ge=1, le=B.MAX_BATCH_SIZE)]]] = Field(default=None, min_length=1)
    """Batch sizes to tune (default: SGLang's list)."""
    ep: int = Field(default=1, ge=1, le=B.MAX_GPUS_PER_NODE)
    """Expert-parallel size the configs are tuned for."""
    max_configs: Optional[int] = Field(default=None, ge=1, le=B.MAX_SEARCH_CONFIGS)
    """Subsample of the search space per batch size (default: all of it)."""
    seed: int = Field(default=0, ge=0, le=B.MAX_SEED)
    """Seed of the search-space subsample."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, populate_by_name=True,
                              use_attribute_docstrings=True, protected_namespaces=())


class BackendPair(FrozenModel):
    """One (MoE runner, FP4 GEMM) back-end pair; either side may be left out."""

    moe_runner_backend: Optional[str] = None
    """MoE runner back end of the pair (--moe-runner-backend)."""
    fp4_gemm_backend: Optional[str] = None
    """FP4 GEMM back end of the pair (--fp4-gemm-backend)."""


def _name_list(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


class BackendSweepOptions(FrozenModel):
    """`backend_sweep`: one variant per (MoE runner, FP4 GEMM) back-end pair; no artifact."""

    moe_runner_backend: list[str] = Field(default_factory=list)
    """MoE runner back ends to sweep (one name or a list)."""
    fp4_gemm_backend: list[str] = Field(default_factory=list)
    """FP4 GEMM back ends to sweep (one name or a list)."""
    exclude: list[BackendPair] = Field(default_factory=list)
    """Pairs to leave out of the cross product."""
    combination: Optional[dict[str, str]] = None
    """Set by the planner on each expanded variant: the server args (spec spelling) of its pair."""

    _lists = field_validator("moe_runner_backend", "fp4_gemm_backend", mode="before")(
        classmethod(lambda cls, v: _name_list(v)))


class NoOptions(FrozenModel):
    """`none`: no tuning (the same as leaving `tuning:` out)."""


class FlashinferAutotuneTuning(FrozenModel):
    kind: Literal["flashinfer_autotune"] = "flashinfer_autotune"
    """Tuning kind: FlashInfer's autotuner cache as an artifact."""
    options: FlashinferAutotuneOptions = Field(default_factory=FlashinferAutotuneOptions)
    """Options of the flashinfer_autotune kind."""


class TritonMoeTuning(FrozenModel):
    kind: Literal["triton_moe"] = "triton_moe"
    """Tuning kind: SGLang's fused-MoE Triton config search."""
    options: TritonMoeOptions = Field(default_factory=TritonMoeOptions)
    """Options of the triton_moe kind."""


class BackendSweepTuning(FrozenModel):
    kind: Literal["backend_sweep"] = "backend_sweep"
    """Tuning kind: one variant per back-end pair."""
    options: BackendSweepOptions = Field(default_factory=BackendSweepOptions)
    """Options of the backend_sweep kind."""


class NoTuning(FrozenModel):
    kind: Literal["none"] = "none"
    """Tuning kind: none (the same as leaving tuning: out)."""
    options: NoOptions = Field(default_factory=NoOptions)
    """No options."""


TUNING_MODELS: dict[str, type[BaseModel]] = {"flashinfer_autotune": FlashinferAutotuneTuning,
                                              "triton_moe": TritonMoeTuning, "backend_sweep": BackendSweepTuning,
                                              "none": NoTuning}
"""Tuning kind → its model (the kinds are described in cluster/tuning/stage.py, which declares them once)."""


def _tuning_kind(v: Any) -> Optional[str]:
    kind = v.get("kind", "none") if isinstance(v, dict) else getattr(v, "kind", None)
    return kind if isinstance(kind, str) and kind in TUNING_MODELS else None


TuningSpec = Annotated[
    Union[Annotated[FlashinferAutotuneTuning, Tag("flashinfer_autotune")], Annotated[TritonMoeTuning, Tag("triton_moe")],
          Annotated[BackendSweepTuning, Tag("backend_sweep")], Annotated[NoTuning, Tag("none")]],
    Discriminator(_tuning_kind, custom_error_type="tuning_kind",
                  custom_error_message="unknown tuning kind; expected one of: " + ", ".join(TUNING_MODELS))]
"""A variant's `tuning: {kind, options}`: one model per kind, so a misspelled option is refused with its field."""
ActiveTuning = Union[FlashinferAutotuneTuning, TritonMoeTuning, BackendSweepTuning]
"""What a resolved variant carries (kind `none` resolves to no tuning)."""
