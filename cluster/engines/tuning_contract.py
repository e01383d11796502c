"""The tuning contract the tuning stage (cluster/tuning/) and the simulator (cluster/sim/tuning.py) both read, on
SGLang's tuning facts (cluster/engines/sglang_tuning.py): the GPU facts an artifact depends on, the fused-MoE shape
SGLang's tuner derives from a model's config.json (NVFP4 refused), and TuningError."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from cluster.config.server import ArgValue
from cluster.engines import sglang_tuning as sgt
from cluster.errors import UserError
from cluster.input_files import JsonObject, JsonValue
from cluster.probe.config import load_json_object
from cluster.probe.files import CheckpointError


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


def canonical_args(args: Mapping[str, ArgValue]) -> dict[str, ArgValue]:
    """Server args keyed by their dashed flag names (`tp_size` and `tp-size` are one flag)."""
    return {k.replace("_", "-"): v for k, v in args.items()}


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


@dataclass(frozen=True)
class MoeModelConfig:
    """What SGLang's fused-MoE tuner reads of a model's config.json (its text part for Qwen3.5): the MoE dimensions
    (all None when one is missing or not an integer) and why the checkpoint is an NVFP4 MoE, if it is."""

    num_experts: Optional[int]
    moe_intermediate_size: Optional[int]
    hidden_size: Optional[int]
    top_k: Optional[int]
    """num_experts_per_tok (1 where the config leaves it out)."""
    nvfp4: Optional[str] = None
    """The quantization_config that makes the MoE NVFP4, said as the refusal says it; None: not NVFP4."""

    @classmethod
    def from_json(cls, cfg: JsonObject) -> "MoeModelConfig":
        """From a config.json as read (free-form JSON: the checkpoint's own, parsed here once)."""
        tc = _text_config(cfg)
        try:
            experts, inter = _int(tc["num_experts"]), _int(tc["moe_intermediate_size"])
            hidden, top_k = _int(tc["hidden_size"]), _int(tc.get("num_experts_per_tok", 1))
        except (KeyError, TypeError, ValueError):
            return cls(None, None, None, None, _config_nvfp4(cfg))
        return cls(experts, inter, hidden, top_k, _config_nvfp4(cfg))


def load_moe_config(path: str) -> MoeModelConfig:
    """A checkpoint's config.json (path to the file or its directory); TuningError naming the file when unreadable."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:  # the checkpoint boundary: bounded, regular files only (a FIFO cannot hang it), depth and digit limits
        return MoeModelConfig.from_json(load_json_object(str(p)))
    except CheckpointError as e:
        raise TuningError(f"{e}; set tuning.options.model_config to a directory holding the BF16 base config.json",
                          file=e.file, field=e.field, expected=e.expected) from None


def _int(v: JsonValue) -> int:
    """int() of a config value as Python reads it (a JSON number, bool or numeric string); TypeError otherwise."""
    if isinstance(v, (bool, int, float, str)):
        return int(v)
    raise TypeError(f"not a number: {type(v).__name__}")


def _text_config(cfg: JsonObject) -> JsonObject:
    tc = cfg.get("text_config")
    return tc if isinstance(tc, Mapping) else cfg


def _config_nvfp4(cfg: JsonObject) -> Optional[str]:
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


def _nvfp4_reason(config_nvfp4: Optional[str], args: Mapping[str, ArgValue], dtype: str) -> Optional[str]:
    """Why the Triton fused-MoE tuner does not apply (an NVFP4 MoE), or None."""
    quant = str(canonical_args(args).get("quantization") or "")
    if "fp4" in quant.lower():
        return f"--quantization {quant}"
    if "fp4" in dtype.lower():
        return f"dtype {dtype}"
    return config_nvfp4


def moe_shape(cfg: MoeModelConfig, tp: int, ep: int = 1, dtype: str = "auto",
              args: Optional[Mapping[str, ArgValue]] = None, where: str = "tuning") -> MoeShape:
    """SGLang tuner's shape for Qwen3-MoE/Qwen3-Next/Qwen3.5-MoE: E = experts/ep, N = moe_intermediate/(tp/ep).

    Raises TuningError for an NVFP4 MoE: the Triton fused-MoE kernel has no NVFP4 path (those experts run on
    FlashInfer/CUTLASS, tuned by `flashinfer_autotune`).
    """
    if dtype not in sgt.TRITON_MOE_DTYPES:
        reason = _nvfp4_reason(None, {}, dtype)
        if reason:
            raise TuningError(f"{where}: triton_moe does not apply to an NVFP4 MoE ({reason}): SGLang's Triton "
                              "fused-MoE tuner has no NVFP4 dtype; use kind flashinfer_autotune or backend_sweep")
        raise TuningError(f"{where}: options.dtype {dtype!r} is not a Triton MoE dtype (expected one of "
                          f"{', '.join(sgt.TRITON_MOE_DTYPES)})")
    reason = _nvfp4_reason(cfg.nvfp4, args or {}, dtype)
    if reason:
        raise TuningError(f"{where}: triton_moe does not apply to an NVFP4 MoE ({reason}): SGLang's Triton fused-MoE "
                          "tuner has no NVFP4 dtype and ModelOpt NVFP4 experts run on FlashInfer/CUTLASS; use kind "
                          "flashinfer_autotune or backend_sweep (to tune the BF16 MTP draft MoE instead, point "
                          "options.model_config at the BF16 base config.json)")
    experts, inter, hidden, top_k = cfg.num_experts, cfg.moe_intermediate_size, cfg.hidden_size, cfg.top_k
    if experts is None or inter is None or hidden is None or top_k is None:
        raise TuningError(f"{where}: the model config lacks num_experts/moe_intermediate_size/hidden_size "
                          "(expected a MoE config such as Qwen3.5-MoE's text_config)")
    if ep < 1 or tp % ep or experts % ep or inter % (tp // ep):
        raise TuningError(f"{where}: tp {tp} / ep {ep} do not divide experts {experts} and "
                          f"moe_intermediate_size {inter} evenly")
    return MoeShape(experts // ep, inter // (tp // ep), hidden, top_k, dtype)
