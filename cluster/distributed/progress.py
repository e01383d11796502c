"""What the driver tells a watcher while it runs an experiment: typed progress events (the live view's input).

The driver calls `on_event` from its segment threads (one per server being measured), so a watcher must be
thread-safe. Nothing here imports Ray: the terminal side reads these records without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Union

import pyarrow as pa

from cluster.kernel.run_row import RunRow
from cluster.kernel.runs import RunPlan

ServerStateName = Literal["placing", "starting", "healthy", "gate", "measuring", "failed", "stopped"]


@dataclass(frozen=True)
class ServerState:
    """A variant's server moved on: waiting for its GPUs, starting, healthy, answering the correctness gate,
    measuring, failed (to start or its gate) or stopped (its segment is over)."""

    variant: str
    state: ServerStateName
    detail: str = ""


@dataclass(frozen=True)
class PointStarted:
    """A run's warmup, flush and measured window begin."""

    plan: RunPlan


@dataclass(frozen=True)
class PointRecords:
    """Finished requests of a running window, as they left a load actor (times relative to the window's start)."""

    plan: RunPlan
    requests: pa.RecordBatch


@dataclass(frozen=True)
class PointFinished:
    """A run is recorded: its status (ok, invalid, failed), why when not ok, and the stored run row's own figures
    (None where the row has none, e.g. a failed run)."""

    plan: RunPlan
    status: str
    reason: Optional[str]
    output_tok_s: Optional[float]
    ttft_ms_p50: Optional[float]
    accept_length: Optional[float]
    n_requests: Optional[int] = None

    @classmethod
    def from_row(cls, plan: RunPlan, status: str, row: Optional[RunRow]) -> "PointFinished":
        """The event for a committed runs row: the m_* figures the results report, never recomputed."""
        metrics = row.metrics if row is not None else {}

        def fig(name: str) -> Optional[float]:
            v = metrics.get(name)
            return float(v) if isinstance(v, (int, float)) else None

        reason = (row.invalid_reasons or row.failure_reason) if row is not None else None
        n = row.n_requests if row is not None else None
        return cls(plan, status, str(reason) if reason else None, fig("output_tok_s"), fig("ttft_ms_p50"),
                   fig("accept_length"), int(n) if isinstance(n, int) else None)


ProgressEvent = Union[ServerState, PointStarted, PointRecords, PointFinished]


def ignore(event: ProgressEvent) -> None:
    """The default watcher: nobody is watching."""
