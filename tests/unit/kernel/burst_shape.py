"""A throwaway load shape, to show that a shape is one module: open-loop bursts of `size` requests sent together,
the bursts spaced so the mean rate is each declared rate (`load.shapes: [{shape: burst, rates: [...], size: N}]`)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from cluster.config.load import LoadShapeOptions, LoadSpec
from cluster.kernel.load_shapes import ArrivalTimes, LoadPoint, LoadShape, Schedule, register_load_shape


class BurstOptions(LoadShapeOptions):
    shape: Literal["burst"]
    rates: list[float] = Field(min_length=1)
    size: int = Field(ge=1)


@register_load_shape
class Burst(LoadShape):
    kind = "burst"
    closed = False
    options = BurstOptions
    prefix, noun, unit = "b", "burst rate", "req/s"

    def points_of(self, options: LoadShapeOptions, load: LoadSpec) -> list[LoadPoint]:
        assert isinstance(options, BurstOptions)
        return [LoadPoint(self.kind, float(r), load.max_concurrency, read_batch_s=load.read_batch_ms / 1000.0,
                          params=(("size", float(options.size)),)) for r in options.rates]

    def schedule(self, point: LoadPoint, n: int, seed: int, arrivals: ArrivalTimes) -> Schedule:
        size = int(point.param("size"))
        burst = np.arange(n, dtype=np.int64) // size
        return Schedule(offsets_ns=burst * int(round(size / point.value * 1e9)), max_concurrency=point.max_concurrency)
