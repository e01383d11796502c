"""What a workload's prompt source offered (the selection the workload audit judges a run's sent requests against).

Built by the load generator (cluster/loadgen/selection.py) where its prompts are built, carried to the driver in the
measured window's record (cluster/kernel/window.py) and judged by cluster/analysis/workload_audit.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


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
    """The selection's input-length quantiles (workload_audit.QUANTILES); None when the client cannot know lengths."""
    categories: tuple[CategoryShare, ...]
    """The selection's category shares (summing to 1); ((None, 1.0),) for a source without categories."""
    draw_multiplicities: tuple[tuple[int, int], ...] = ()
    """Where positions do not all give distinct prompts: (c, how many distinct prompts are given by c positions
    each). A generated source's positions are drawn uniformly (a corpus repeating itself), a file source's are its
    rows (a file holding the same prompt twice); () when every position is its own prompt."""
