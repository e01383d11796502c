"""A Triton grouped GEMM shaped like SGLang's fused-MoE gate/up kernel, for timing candidate configs (CUDA only).

Tokens are routed to top_k experts; (token, expert) pairs are sorted by expert and padded to BLOCK_SIZE_M so that
each M-block belongs to one expert, which is what makes BLOCK_SIZE_M/N/K, GROUP_SIZE_M, warps and stages matter
the same way they do in SGLang's kernel. Imported only where torch and Triton are installed.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_gemm_kernel(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, num_valid, n, k, top_k, padded_rows,
                     stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
                     BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                     GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(padded_rows, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(n, BLOCK_SIZE_N)
    in_group = GROUP_SIZE_M * num_pid_n
    first_m = (pid // in_group) * GROUP_SIZE_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + ((pid % in_group) % group_m)
    pid_n = (pid % in_group) // group_m
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    pair = tl.load(sorted_ids_ptr + offs_m)
    mask_m = pair < num_valid
    expert = tl.load(expert_ids_ptr + pid_m)
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % n
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (pair[:, None] // top_k) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(k, BLOCK_SIZE_K)):
        kmask = offs_k < k - kk * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + pair[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & (offs_cn[None, :] < n))


def routing(tokens: int, experts: int, top_k: int, seed: int) -> torch.Tensor:
    """Seeded top-k expert ids per token (distinct experts per token), int32 [tokens, top_k] on CPU."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.rand(tokens, experts, generator=gen).topk(top_k, dim=1).indices.to(torch.int32)


def align_by_expert(topk_ids: torch.Tensor, experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(sorted pair ids padded per expert to block_m with the sentinel num_pairs, expert id per block, rows)."""
    flat = topk_ids.flatten().long()
    dev = flat.device
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    rows = int(padded.sum().item())
    order = torch.argsort(flat, stable=True)
    sorted_experts = flat[order]
    starts = torch.cumsum(padded, 0) - padded
    count_starts = torch.cumsum(counts, 0) - counts
    pos = starts[sorted_experts] + (torch.arange(flat.numel(), device=dev) - count_starts[sorted_experts])
    sorted_ids = torch.full((rows,), flat.numel(), dtype=torch.int32, device=dev)
    sorted_ids[pos] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(torch.arange(experts, device=dev, dtype=torch.int32), padded // block_m)
    return sorted_ids, expert_ids, rows


def moe_gemm(x: torch.Tensor, w: torch.Tensor, topk_ids: torch.Tensor, cfg: Mapping[str, int],
             return_output: bool = False) -> Callable[[], Any]:
    """A zero-argument launcher of the kernel for one config (alignment done once, outside the timed call)."""
    experts, n, k = w.shape
    top_k = topk_ids.shape[1]
    sorted_ids, expert_ids, rows = align_by_expert(topk_ids, experts, cfg["BLOCK_SIZE_M"])
    out = torch.empty(topk_ids.numel(), n, device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(rows, cfg["BLOCK_SIZE_M"]) * triton.cdiv(n, cfg["BLOCK_SIZE_N"]),)

    def run() -> Any:
        _moe_gemm_kernel[grid](
            x, w, out, sorted_ids, expert_ids, topk_ids.numel(), n, k, top_k, rows,
            x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2), out.stride(0), out.stride(1),
            BLOCK_SIZE_M=cfg["BLOCK_SIZE_M"], BLOCK_SIZE_N=cfg["BLOCK_SIZE_N"], BLOCK_SIZE_K=cfg["BLOCK_SIZE_K"],
            GROUP_SIZE_M=cfg["GROUP_SIZE_M"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        return out if return_output else None

    return run


def reference_moe_gemm(x: torch.Tensor, w: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """out[t * top_k + j] = x[t] @ w[topk_ids[t, j]].T in float32 (for checking the kernel)."""
    top_k = topk_ids.shape[1]
    ids = topk_ids.flatten().long()
    rows = x.float().repeat_interleave(top_k, dim=0)
    return torch.einsum("pk,pnk->pn", rows, w.float()[ids])
