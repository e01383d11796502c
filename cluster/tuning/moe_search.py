"""Ray-free fused-MoE Triton config search (one GPU): timed on CUDA, or a deterministic simulated search on CPU.

Imports only the standard library at module level (torch and Triton are imported inside the CUDA path), so
scripts/gpu_check.py can use it on a machine with nothing but torch and Triton. The output is SGLang's format:
{"<batch size>": {BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages}}.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from typing import Mapping, Optional, TypedDict, Union

from cluster.engines.sglang_tuning import SEARCH_SPACE  # SGLang's CUDA search space (1,920 configs)

SIM_DEVICE = "simulated"

MoeShapeFields = Mapping[str, Union[int, str]]
"""A fused-MoE GEMM problem by field name (engines/tuning_contract.py MoeShape's __dict__: num_experts, shard_n,
hidden_size, top_k, dtype), as it crosses to a Ray worker and as scripts/gpu_check.py writes it by hand."""


class _BatchSizeBestAlways(TypedDict):
    config: dict[str, int]
    time_us: float
    tried: int


class BatchSizeBest(_BatchSizeBestAlways, total=False):
    """One batch size's search result (stored in the artifact's details, and read back by the tuning stage)."""

    skipped: int
    """CUDA only: configs that did not run on this GPU."""
    max_abs_err: float
    """CUDA only, when checked: the best config's largest error against the reference GEMM."""


class WorkerSearch(TypedDict):
    """One worker's share of the search: how it was timed and each of its batch sizes' best."""

    mode: str
    device_name: str
    triton_version: str
    results: dict[str, BatchSizeBest]


def candidate_configs(max_configs: Optional[int] = None, seed: int = 0) -> list[dict[str, int]]:
    """The full space, or a seeded subsample of it (always including a small safe config)."""
    keys = list(SEARCH_SPACE)
    allc = [dict(zip(keys, vals)) for vals in itertools.product(*(SEARCH_SPACE[k] for k in keys))]
    if max_configs is None or max_configs >= len(allc):
        return allc
    safe = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
            "num_stages": 2}
    rest = [c for c in allc if c != safe]
    return [safe] + random.Random(seed).sample(rest, max(0, max_configs - 1))


def simulated_time_us(shape: MoeShapeFields, batch_size: int, cfg: Mapping[str, int], device_name: str) -> float:
    """A deterministic cost model (padding waste, tile count, pipelining) plus hashed jitter; not a GPU figure."""
    experts, n, k, top_k = int(shape["num_experts"]), 2 * int(shape["shard_n"]), int(shape["hidden_size"]), \
        int(shape["top_k"])
    pairs = batch_size * top_k
    active = min(experts, pairs)
    bm, bn, bk = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"], cfg["BLOCK_SIZE_K"]
    rows = active * math.ceil(max(1, pairs / active) / bm) * bm
    tiles = (rows // bm) * math.ceil(n / bn)
    waves = math.ceil(tiles / 132)
    per_tile = (bm * bn * k) / (2.0e6 * (1 + 0.15 * (cfg["num_stages"] - 2))) + k / bk * 0.02
    weights = active * n * k * 2 / 3.0e6  # bytes / (3 TB/s) in us
    occupancy = 1.0 + (0.2 if cfg["num_warps"] == 8 and bm * bn < 64 * 64 else 0.0)
    group = 1.0 - (0.03 if cfg["GROUP_SIZE_M"] > 1 and tiles > 64 else 0.0)
    jitter = int(hashlib.sha256(f"{device_name}|{batch_size}|{sorted(cfg.items())}".encode()).hexdigest()[:6], 16)
    return (max(weights, waves * per_tile) * occupancy * group + 3.0) * (1.0 + (jitter % 1000) / 20000.0)


def simulated_search(shape: MoeShapeFields, batch_sizes: list[int], device_name: str = SIM_DEVICE,
                     max_configs: Optional[int] = None, seed: int = 0) -> dict[str, BatchSizeBest]:
    """{bs: {"config": best, "time_us": t, "tried": n}} from the cost model: deterministic for the same inputs."""
    configs = candidate_configs(max_configs, seed)
    out: dict[str, BatchSizeBest] = {}
    for bs in batch_sizes:
        timed = [(simulated_time_us(shape, bs, c, device_name), i) for i, c in enumerate(configs)]
        t, i = min(timed)
        out[str(bs)] = {"config": dict(configs[i]), "time_us": round(t, 3), "tried": len(configs)}
    return out


def cuda_search(shape: MoeShapeFields, batch_sizes: list[int], max_configs: Optional[int] = None, seed: int = 0,
                check: bool = True) -> dict[str, BatchSizeBest]:
    """Time every candidate config of the gate/up fused-MoE GEMM on the current CUDA device; keep the fastest."""
    import torch
    import triton.testing

    from cluster.tuning.moe_kernel import moe_gemm, reference_moe_gemm, routing

    dev = torch.device("cuda")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    experts, n2, k, top_k = int(shape["num_experts"]), 2 * int(shape["shard_n"]), int(shape["hidden_size"]), \
        int(shape["top_k"])
    w = (torch.randn(experts, n2, k, generator=gen) * 0.02).to(dev, torch.bfloat16)
    configs = candidate_configs(max_configs, seed)
    out: dict[str, BatchSizeBest] = {}
    for bs in batch_sizes:
        x = torch.randn(bs, k, generator=gen).to(dev, torch.bfloat16)
        ids = routing(bs, experts, top_k, seed + bs).to(dev)
        best: Optional[tuple[float, dict[str, int]]] = None
        skipped = 0
        for cfg in configs:
            try:
                fn = moe_gemm(x, w, ids, cfg)
                fn()
                t_ms = float(triton.testing.do_bench(fn, warmup=3, rep=10))
            except Exception:  # noqa: BLE001 - out of shared memory / registers for this tile: skip, as SGLang does
                skipped += 1
                continue
            if best is None or t_ms < best[0]:
                best = (t_ms, cfg)
        if best is None:
            raise RuntimeError(f"batch size {bs}: no candidate config ran on this GPU")
        entry: BatchSizeBest = {"config": dict(best[1]), "time_us": round(best[0] * 1000, 3),
                                "tried": len(configs), "skipped": skipped}
        if check:
            got = moe_gemm(x, w, ids, best[1], return_output=True)()
            ref = reference_moe_gemm(x, w, ids)
            entry["max_abs_err"] = float((got.float() - ref.float()).abs().max())
        out[str(bs)] = entry
    return out


def cuda_available() -> bool:
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def tune_batch_sizes(shape: MoeShapeFields, batch_sizes: list[int], mode: str = "auto",
                     max_configs: Optional[int] = None, seed: int = 0, sim_device_name: str = SIM_DEVICE,
                     sim_triton_version: str = "3.4.0") -> WorkerSearch:
    """One worker's share: {"mode", "device_name", "triton_version", "results": {bs: {...}}}.

    mode: "cuda" (time on the GPU), "sim" (deterministic cost model) or "auto" (cuda when torch sees a GPU).
    """
    use_cuda = mode == "cuda" or (mode == "auto" and cuda_available())
    if use_cuda:
        import torch
        import triton

        results = cuda_search(shape, batch_sizes, max_configs, seed)
        return {"mode": "cuda", "device_name": torch.cuda.get_device_name(), "triton_version": triton.__version__,
                "results": results}
    return {"mode": "sim", "device_name": sim_device_name, "triton_version": sim_triton_version,
            "results": simulated_search(shape, batch_sizes, sim_device_name, max_configs, seed)}
