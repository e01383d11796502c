"""How a run's per-request figures are judged: the latency limits that goodput and SLO attainment count against."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from cluster.config import bounds as B
from cluster.config.fields import FrozenModel


class SLOSpec(FrozenModel):
    ttft_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """Time-to-first-token limit per request, ms."""
    tpot_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """Time-per-output-token limit per request, ms."""
    e2e_ms: Optional[float] = Field(default=None, gt=0, le=B.MAX_LATENCY_MS)
    """End-to-end latency limit per request, ms."""
