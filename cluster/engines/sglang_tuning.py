"""SGLang 0.5.23's tuning surface: env vars, flags, FlashInfer autotune cache layout, Triton fused-MoE config naming.

Facts read from SGLang 0.5.23's wheel (sglang/srt/environ.py, sglang/srt/server_args.py, the FlashInfer autotuner
cache and fused_moe_triton config naming); what "tuned GEMMs" can mean for NVFP4: docs/design.md. Also the contract
the tuning stage (cluster/tuning/) and the simulator (cluster/sim/tuning.py) both read: the GPU facts an artifact
depends on, the fused-MoE shape SGLang's tuner derives from a model config (NVFP4 refused), and TuningError. Pure:
no engine, no I/O beyond reading a config.json.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from cluster.config.server import ArgValue
from cluster.errors import UserError
from cluster.probe.config import load_json_object
from cluster.probe.files import CheckpointError

ENV_CACHE_DIR = "SGLANG_CACHE_DIR"
"""Root of the FlashInfer autotune cache (and JIT caches); default ~/.cache/sglang."""
ENV_MOE_CONFIG_DIR = "SGLANG_MOE_CONFIG_DIR"
"""Root of the Triton fused-MoE config lookup: `<root>/configs/triton_<ver>/<file>`."""
ENV_AUTOTUNE_CACHE = "SGLANG_FLASHINFER_AUTOTUNE_CACHE"
ENV_AUTOTUNE_EXTEND = "SGLANG_FLASHINFER_AUTOTUNE_EXTEND"

FLAG_DISABLE_AUTOTUNE = "disable-flashinfer-autotune"
FLAG_AUTOTUNE_SKIP_OPS = "flashinfer-autotune-skip-ops"
FLAG_MOE_BACKEND = "moe-runner-backend"
FLAG_FP4_BACKEND = "fp4-gemm-backend"
FLAG_SPEC_MOE_BACKEND = "speculative-moe-runner-backend"

BACKEND_FLAGS = (FLAG_MOE_BACKEND, FLAG_FP4_BACKEND, "fp8-gemm-backend", "bf16-gemm-backend", FLAG_SPEC_MOE_BACKEND,
                 "attention-backend", "quantization", "kv-cache-dtype", "dtype", "ep-size", "dp-size",
                 FLAG_AUTOTUNE_SKIP_OPS, "speculative-algorithm")
"""Server args that change which kernels run, hence what a tuning artifact is valid for (part of its key)."""

AUTOTUNED_MOE_BACKENDS = frozenset({"flashinfer_trtllm", "flashinfer_trtllm_routed", "flashinfer_mxfp4",
                                    "flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_megamoe"})
"""MoE runners SGLang 0.5.23 autotunes at startup (runner/flashinfer_autotune.py)."""
AUTOTUNED_FP4_BACKENDS = frozenset({"flashinfer_cutlass", "flashinfer_cutedsl"})
TRITON_MOE_BACKENDS = frozenset({"auto", "triton"})
"""Runners that may read Triton fused-MoE configs (auto only where the MoE is BF16/FP8, never NVFP4)."""

MOE_BACKENDS_0_5_23 = ("auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "experimental_sgl_trtllm",
                       "flashinfer_trtllm_routed", "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl",
                       "flashinfer_megamoe", "cutlass", "aiter", "marlin", "humming", "experimental_sgl_marlin",
                       "hpc_ops", "megamoe", "intel_xpu")
FP4_BACKENDS_0_5_23 = ("auto", "flashinfer_cudnn", "flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_trtllm",
                       "marlin")

TRITON_MOE_DTYPES = ("auto", "fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16")
"""`--dtype` choices of tuning_fused_moe_triton.py; there is no NVFP4 entry."""
DEFAULT_MOE_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
MOE_CONFIG_FIELDS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
SEARCH_SPACE: dict[str, tuple[int, ...]] = {
    "BLOCK_SIZE_M": (16, 32, 64, 128, 256),
    "BLOCK_SIZE_N": (32, 64, 128, 256),
    "BLOCK_SIZE_K": (64, 128, 256),
    "GROUP_SIZE_M": (1, 16, 32, 64),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}
"""common_utils.get_configs_compute_bound on CUDA: 1,920 configs."""

NVFP4_MARKERS = ("nvfp4", "modelopt_fp4", "fp4")


def device_name_for_file(device_name: str) -> str:
    """torch.cuda.get_device_name() with spaces → '_' (as get_config_file_name writes it)."""
    return device_name.replace(" ", "_")


def triton_dir_name(triton_version: str) -> str:
    """`triton_3_4_0` for Triton 3.4.0 (local version suffixes dropped)."""
    return "triton_" + triton_version.split("+")[0].replace(".", "_")


def moe_config_file_name(num_experts: int, shard_n: int, device_name: str, dtype: Optional[str] = None,
                         block_shape: Optional[Sequence[int]] = None, per_channel_quant: bool = False,
                         down: bool = False) -> str:
    """`E={E},N={N},device_name={dev}[,dtype=..][,block_shape=[bn, bk]][,per_channel_quant=True][_down].json`."""
    name = f"E={num_experts},N={shard_n},device_name={device_name_for_file(device_name)}"
    if dtype and dtype not in ("auto", "bf16", "bfloat16", "float16"):
        name += f",dtype={dtype}"
    if block_shape:
        name += f",block_shape=[{block_shape[0]}, {block_shape[1]}]"
    if per_channel_quant:
        name += ",per_channel_quant=True"
    return name + ("_down" if down else "") + ".json"


def moe_config_relpath(triton_version: str, file_name: str) -> str:
    return f"configs/{triton_dir_name(triton_version)}/{file_name}"


def valid_moe_config(doc: Any) -> bool:
    """A Triton fused-MoE config document: {"<batch size>": {BLOCK_SIZE_M, ..., num_stages}, ...}, non-empty."""
    if not isinstance(doc, dict) or not doc:
        return False
    for k, v in doc.items():
        if not str(k).isdigit() or not isinstance(v, dict):
            return False
        if any(not isinstance(v.get(f), int) for f in MOE_CONFIG_FIELDS):
            return False
    return True


def sm_tag(compute_capability: str) -> str:
    """'12.0' or (12, 0) written as '12.0' → 'sm120'; '9.0' → 'sm90'."""
    major, _, minor = compute_capability.partition(".")
    return f"sm{int(major)}{int(minor or 0)}"


def autotune_config_digest(args: Mapping[str, Any], model_path: str, tp: int, hf_config_class: str = "") -> str:
    """The 16-hex directory name SGLang derives from the key launch args (model|dtype|quant|moe|tp|pp|dp|ep|...).

    The exact field order inside SGLang's digest is an implementation detail; a consumer started with identical
    key args finds the producer's directory, which is all the contract needs.
    """
    def get(name: str, default: str) -> str:
        v = args.get(name, args.get(name.replace("-", "_")))
        return default if v is None or v is False else str(v)

    parts = [model_path, get("dtype", "auto"), get("quantization", "None"), get(FLAG_MOE_BACKEND, "auto"), str(tp),
             get("pp-size", "1"), get("dp-size", "1"), get("ep-size", "1"), hf_config_class,
             get(FLAG_AUTOTUNE_SKIP_OPS, "None")]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def autotune_rank_file(tp_rank: int) -> str:
    return f"rank_tp{tp_rank}_pp0_dp0.json"


def autotune_dir_relpath(flashinfer_version: str, sm: str, digest16: str) -> str:
    """Relative to SGLANG_CACHE_DIR: `flashinfer/autotune/<fi_ver>/sm<XY>/<hash16>`."""
    return f"flashinfer/autotune/{flashinfer_version}/{sm}/{digest16}"


def autotune_applies(args: Mapping[str, Any]) -> bool:
    """Whether SGLang 0.5.23 autotunes at startup for these resolved args (MoE runner or FP4 GEMM on FlashInfer)."""
    if args.get(FLAG_DISABLE_AUTOTUNE) or args.get("disable_flashinfer_autotune"):
        return False
    moe = str(args.get(FLAG_MOE_BACKEND, args.get("moe_runner_backend", "auto")))
    fp4 = str(args.get(FLAG_FP4_BACKEND, args.get("fp4_gemm_runner_backend", "auto")))
    return moe in AUTOTUNED_MOE_BACKENDS or fp4 in AUTOTUNED_FP4_BACKENDS


# ------------------------------------------------------------------------------------------- the tuning contract
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
        return sm_tag(self.compute_capability) if self.compute_capability else "sm?"


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
        return moe_config_file_name(self.num_experts, self.shard_n, device_name, self.dtype)


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
    def from_json(cls, cfg: Mapping[str, Any]) -> "MoeModelConfig":
        """From a config.json as read (free-form JSON: the checkpoint's own, parsed here once)."""
        tc = _text_config(cfg)
        try:
            experts, inter = int(tc["num_experts"]), int(tc["moe_intermediate_size"])
            hidden, top_k = int(tc["hidden_size"]), int(tc.get("num_experts_per_tok", 1))
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


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    tc = cfg.get("text_config")
    return tc if isinstance(tc, Mapping) else cfg


def _config_nvfp4(cfg: Mapping[str, Any]) -> Optional[str]:
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
    if dtype not in TRITON_MOE_DTYPES:
        reason = _nvfp4_reason(None, {}, dtype)
        if reason:
            raise TuningError(f"{where}: triton_moe does not apply to an NVFP4 MoE ({reason}): SGLang's Triton "
                              "fused-MoE tuner has no NVFP4 dtype; use kind flashinfer_autotune or backend_sweep")
        raise TuningError(f"{where}: options.dtype {dtype!r} is not a Triton MoE dtype (expected one of "
                          f"{', '.join(TRITON_MOE_DTYPES)})")
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
