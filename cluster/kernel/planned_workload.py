"""What a workload's prompt source offered (the selection the workload audit judges a run's sent requests against),
with the two summaries it is made of (length quantiles, category shares).

Built by the load generator (cluster/loadgen/selection.py) where its prompts are built, carried to the driver in the
measured window's record and judged by cluster/analysis/workload_audit.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

QUANTILES = (0.1, 0.5, 0.9)
"""The input-length quantiles a selection records and the audit checks."""


@dataclass(frozen=True)
class LengthQuantile:
    """The selection's p-quantile of input length in tokens, with its CDF just below and at it."""

    p: float
    tokens: int
    cdf_below: float
    """F(q−): the share of the selection's prompts shorter than `tokens`."""
    cdf_at: float
    """F(q): the share at or below `tokens`."""


@dataclass(frozen=True)
class CategoryShare:
    category: Optional[str]
    share: float


@dataclass(frozen=True)
class PlannedWorkload:
    """What the workload's prompt source offered (the selection), computed where its prompts are built."""

    source: str
    """The prompt source (random_ids, jsonl, text, sharegpt, messages, trace; shared_prefix under random_ids)."""
    offered_distinct: float
    """K distinct prompts of a file source, or M, the size of a generated source's space (may be inf)."""
    with_replacement: bool
    """True for a generated source (independent draws), False for a file source (cycled permutations)."""
    lengths: Optional[tuple[LengthQuantile, ...]]
    """The selection's input-length quantiles (QUANTILES); None when the client cannot know lengths."""
    categories: tuple[CategoryShare, ...]
    """The selection's category shares (summing to 1); ((None, 1.0),) for a source without categories."""
    draw_multiplicities: tuple[tuple[int, int], ...] = ()
    """Where positions do not all give distinct prompts: (c, how many distinct prompts are given by c positions
    each). A generated source's positions are drawn uniformly (a corpus repeating itself), a file source's are its
    rows (a file holding the same prompt twice); () when every position is its own prompt."""


def length_quantiles(lengths: np.ndarray) -> tuple[LengthQuantile, ...]:
    """The QUANTILES of a population of integer lengths (the lower empirical quantile) with F(q−) and F(q)."""
    x = np.sort(np.asarray(lengths, dtype=np.int64))
    n = len(x)
    out = []
    for p in QUANTILES:
        q = int(x[min(n - 1, max(0, math.ceil(p * n) - 1))])
        out.append(LengthQuantile(p, q, float(np.searchsorted(x, q, "left")) / n,
                                  float(np.searchsorted(x, q, "right")) / n))
    return tuple(out)


def category_shares(categories: list[Optional[str]]) -> tuple[CategoryShare, ...]:
    """Each category's share of the selection (None: no category), in name order with None last."""
    counts: dict[Optional[str], int] = {}
    for c in categories:
        counts[c] = counts.get(c, 0) + 1
    n = len(categories)
    return tuple(CategoryShare(c, k / n) for c, k in sorted(counts.items(), key=lambda kv: (kv[0] is None,
                                                                                          kv[0] or "")))
