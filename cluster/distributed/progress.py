"""What the driver tells a watcher while it runs an experiment: typed progress events (the live view's input).

The driver calls `on_event` from its segment threads (one per server being measured), so a watcher must be
thread-safe. Nothing here imports Ray: the terminal side reads these records without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, Union

import pyarrow as pa

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
    def from_row(cls, plan: RunPlan, status: str, row: Optional[Mapping[str, Any]]) -> "PointFinished":
        """The event for a committed runs row: the m_* figures the results report, never recomputed."""
        r: Mapping[str, Any] = row or {}

        def fig(name: str) -> Optional[float]:
            v = r.get(f"m_{name}")
            return float(v) if isinstance(v, (int, float)) else None

        reason = r.get("invalid_reasons") or r.get("failure_reason")
        n = r.get("n_requests")
        return cls(plan, status, str(reason) if reason else None, fig("output_tok_s"), fig("ttft_ms_p50"),
                   fig("accept_length"), int(n) if isinstance(n, int) else None)


ProgressEvent = Union[ServerState, PointStarted, PointRecords, PointFinished]


def ignore(event: ProgressEvent) -> None:
    """The default watcher: nobody is watching."""
