"""Seeded token-length draws: a workload's fixed count or `{dist: uniform|normal|lognormal, mean, std, min, max}`."""

from __future__ import annotations

import math
from typing import Union

import numpy as np

from cluster.config.workload import LengthDist

INPUT_STREAM = 1
OUTPUT_STREAM = 2
"""Sub-stream ids: input and output lengths are drawn from their own generators seeded by (seed, stream), so
drawing output lengths never changes the prompts (and a fixed-length workload keeps its prompts)."""


def length_rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream])


def draw_lengths(length: Union[int, LengthDist], n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` int64 lengths: the fixed count repeated, or draws from the distribution clipped to [min, max].

    normal: N(mean, std) rounded; lognormal: the lognormal whose own mean and std are `mean` and `std`
    (sigma² = ln(1 + std²/mean²), mu = ln(mean) − sigma²/2), rounded; uniform: integers in [min, max] inclusive.
    Clipping (not redrawing) keeps one draw per request, so the same seed gives the same lengths at any n' ≥ n
    prefix: lengths[:k] does not depend on n.
    """
    if n < 0:
        raise ValueError(f"number of lengths must be >= 0, got {n}")
    if isinstance(length, int):
        return np.full(n, length, dtype=np.int64)
    lo, hi = length.min, length.max
    if length.dist == "uniform":
        return rng.integers(lo, hi + 1, size=n, dtype=np.int64)
    assert length.mean is not None and length.std is not None  # LengthDist validation
    if length.dist == "normal":
        raw = rng.normal(length.mean, length.std, size=n)
    else:
        sigma2 = math.log1p((length.std / length.mean) ** 2)
        raw = rng.lognormal(math.log(length.mean) - sigma2 / 2, math.sqrt(sigma2), size=n)
    return np.clip(np.rint(raw), lo, hi).astype(np.int64)
