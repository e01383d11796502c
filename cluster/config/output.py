"""What an experiment records besides its requests, and where: the dataset root and GPU telemetry."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from cluster.config import bounds as B
from cluster.config.fields import FrozenModel
from cluster.config.locations import DATASET_SCHEMES, check_location

DatasetRoot = Annotated[str, AfterValidator(lambda v: check_location(v, "output", DATASET_SCHEMES))]
"""Dataset root: a local path or a pyarrow filesystem URI (s3://, gs://, ...)."""


class TelemetrySpec(FrozenModel):
    """GPU telemetry during every measured window (cluster/telemetry/): NVML, or the simulator's device model."""

    enabled: bool = True
    """Sample the server's GPUs during each measured window."""
    rate_hz: float = Field(default=10.0, gt=0, le=B.MAX_TELEMETRY_HZ)
    """Samples per second (monotonic ns timestamps on the requests' clock)."""
