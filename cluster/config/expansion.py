"""How one declared variant expands into several, and what the expanded ones are named: one rule for the spec's
checks (names that collide, a baseline that would be several variants, packed ports) and the planner
(cluster/plan/runs.py), so what validate refuses is exactly what the plan would have produced."""

from __future__ import annotations

import hashlib
import itertools
from typing import Optional, Sequence

MAX_NAME_CHARS = 64
"""A variant name's length limit (check_name in cluster/config/fields.py)."""

Pair = tuple[Optional[str], Optional[str]]
"""(moe_runner_backend, fp4_gemm_backend) of one backend_sweep combination; None: that side is not swept."""


def step_names(name: str, steps: Sequence[int]) -> list[str]:
    """A speculative variant's names: itself for one num_steps value, NAME-<steps> for each of a list."""
    return [name] if len(steps) == 1 else [f"{name}-{s}" for s in steps]


def sweep_pairs(moe_backends: Sequence[str], fp4_backends: Sequence[str], excluded: set[Pair]) -> list[Pair]:
    """The backend_sweep combinations: the cross product of the (deduplicated) lists, excluded pairs left out."""
    moes: list[Optional[str]] = [*dict.fromkeys(moe_backends)] or [None]
    fp4s: list[Optional[str]] = [*dict.fromkeys(fp4_backends)] or [None]
    if moes == [None] and fp4s == [None]:
        return []
    return [p for p in itertools.product(moes, fp4s) if p not in excluded]


def _short(backend: str) -> str:
    return backend.replace("flashinfer_", "fi_")


def sweep_name(base: str, pair: Pair) -> str:
    """`<base>-<short moe>-<short fp4>` (a side not swept left out); past 64 characters, a hash keeps it unique."""
    name = "-".join([base, *(_short(b) for b in pair if b is not None)])
    if len(name) > MAX_NAME_CHARS:
        name = f"{base[:40]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name
