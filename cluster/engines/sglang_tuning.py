"""SGLang 0.5.23's tuning surface: env vars, flags, FlashInfer autotune cache layout, Triton fused-MoE config naming.

Facts read from SGLang 0.5.23's wheel (sglang/srt/environ.py, sglang/srt/server_args.py, the FlashInfer autotuner
cache and fused_moe_triton config naming); what "tuned GEMMs" can mean for NVFP4: docs/design.md. Pure: stdlib only
(the contract built on these facts, shared by the tuning stage and the simulator: cluster/engines/tuning_contract.py).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Optional, Sequence, TypeVar

ArgT = TypeVar("ArgT")
"""A server arg's value, whatever its type (a launch's declared value or /server_info's resolved one): the readers
below only compare it with None/False and spell it with str()."""

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


def autotune_config_digest(args: Mapping[str, ArgT], model_path: str, tp: int, hf_config_class: str = "") -> str:
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


def autotune_applies(args: Mapping[str, ArgT]) -> bool:
    """Whether SGLang 0.5.23 autotunes at startup for these resolved args (MoE runner or FP4 GEMM on FlashInfer)."""
    if args.get(FLAG_DISABLE_AUTOTUNE) or args.get("disable_flashinfer_autotune"):
        return False
    moe = str(args.get(FLAG_MOE_BACKEND, args.get("moe_runner_backend", "auto")))
    fp4 = str(args.get(FLAG_FP4_BACKEND, args.get("fp4_gemm_runner_backend", "auto")))
    return moe in AUTOTUNED_MOE_BACKENDS or fp4 in AUTOTUNED_FP4_BACKENDS
