"""`repeats:` beyond a plain count: repeat a load point until the 95 % interval of a run metric is narrow enough."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag, model_validator

from cluster.config import bounds as B
from cluster.config.fields import FieldProblem, FrozenModel

UntilMetric = Literal["output_tps", "total_tps", "request_rps", "ttft_ms_p50", "tpot_ms_p50", "e2e_ms_p50",
                      "accept_length"]
UNTIL_METRIC_COLUMNS: dict[str, str] = {
    "output_tps": "m_output_tok_s",
    "total_tps": "m_total_tok_s",
    "request_rps": "m_request_throughput_rps",
    "ttft_ms_p50": "m_ttft_ms_p50",
    "tpot_ms_p50": "m_tpot_ms_p50",
    "e2e_ms_p50": "m_e2e_ms_p50",
    "accept_length": "m_accept_length",
}
"""The runs column each `until.metric` reads: one value per repeat (output_tps is the run's output tokens/s)."""


class UntilSpec(FrozenModel):
    """When a point has been repeated enough: the 95 % interval of `metric`'s mean over its ok repeats is at most
    ±half_width_pct % of that mean."""

    metric: UntilMetric = "output_tps"
    """The run metric whose interval decides (one value per repeat)."""
    half_width_pct: float = Field(gt=0, le=100)
    """Target half-width of the 95 % interval, in percent of the mean."""


class RepeatsUntil(FrozenModel):
    """Repeat each load point (on the same server start) until `until` holds, at least `min` and at most `max`
    times; the repeats a point got and why it stopped are recorded."""

    until: UntilSpec
    """The interval to reach."""
    min: int = Field(default=3, ge=2, le=B.MAX_REPEATS)
    """Repeats every point gets (planned up front; an interval needs at least 2)."""
    max: int = Field(default=10, ge=2, le=B.MAX_REPEATS)
    """Repeats a point gets at most: the bound `plan` shows."""

    @model_validator(mode="after")
    def _bounds(self) -> "RepeatsUntil":
        if self.min > self.max:
            raise FieldProblem(("max",), f"max ({self.max}) is below min ({self.min})")
        return self


REPEATS_UNTIL_TAG = "repeats_until"
REPEATS_TAGS = ("count", REPEATS_UNTIL_TAG)
"""The two forms' tags in a validation error's location (the loader drops them)."""


def _form(v: Any) -> str:
    return REPEATS_UNTIL_TAG if isinstance(v, (dict, RepeatsUntil)) else "count"


Repeats = Annotated[Union[Annotated[int, Field(ge=1, le=B.MAX_REPEATS), Tag("count")],
                          Annotated[RepeatsUntil, Tag(REPEATS_UNTIL_TAG)]], Discriminator(_form)]
"""`repeats: N` or `repeats: {until: ..., min, max}` (an error names the form it read)."""


def planned_repeats(repeats: Union[int, RepeatsUntil]) -> int:
    """Repeats every point is planned with: the count, or `min` (repeats until sure add more as they run)."""
    return repeats if isinstance(repeats, int) else repeats.min


def most_repeats(repeats: Union[int, RepeatsUntil]) -> int:
    """Repeats a point gets at most: the count, or `max`."""
    return repeats if isinstance(repeats, int) else repeats.max
