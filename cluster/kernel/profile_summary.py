"""A variant's kernel profile summarised: the top kernels by time and the time per category (GEMM, MoE, attention,
communication, other). Summarised by cluster/analysis/kernel_profile.py, carried by the EngineActor's capture
(cluster/telemetry/profile.py) to the kernel_profile table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelTime:
    kernel: str
    category: str
    calls: int
    total_us: float
    share: float
    """Of the summed time of every kernel in the traces (not only the top ones)."""


@dataclass(frozen=True)
class ProfileSummary:
    level: str
    """`kernel` (device kernels) or `cpu_op` (a CPU-only trace)."""
    top: tuple[KernelTime, ...]
    by_category_us: dict[str, float]
    total_us: float
    files: tuple[str, ...]
    simulated: bool
