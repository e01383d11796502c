"""The GEMM tuning stage: kinds, reuse keys, artifacts and the Triton fused-MoE config search."""
