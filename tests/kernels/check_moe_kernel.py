"""Run by tests/kernels/test_moe_kernel_interpreter.py with an interpreter that has torch + Triton (CPU)."""

from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # Triton's interpreter: the kernel's logic on the CPU, no GPU needed
sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402

from cluster.tuning.moe_search import candidate_configs  # noqa: E402
from cluster.tuning.moe_kernel import moe_gemm, reference_moe_gemm, routing  # noqa: E402

gen = torch.Generator().manual_seed(0)
x = torch.randn(9, 64, generator=gen)
w = torch.randn(4, 32, 64, generator=gen) * 0.05
ids = routing(9, 4, 2, 1)
ref = reference_moe_gemm(x, w, ids)
results = []
for cfg in candidate_configs(200, seed=3):
    if cfg["BLOCK_SIZE_M"] > 32 or cfg["BLOCK_SIZE_N"] > 64 or cfg["BLOCK_SIZE_K"] > 64:
        continue  # the interpreter is slow; small tiles exercise the same index arithmetic
    out = moe_gemm(x, w, ids, cfg, return_output=True)()
    results.append({"cfg": cfg, "max_abs_err": (out.float() - ref).abs().max().item()})
    if len(results) >= 4:
        break
print(json.dumps(results))
