"""What assembling a run's `runs` row needs of its engine: the resolved concurrency cap, the names of the scraped
running and queued gauges (and of the histograms that split a prefill/decode TTFT), and acceptance from the counters diffed around the window. Declared here, by the row's
builder; every adapter in cluster/engines/ satisfies it structurally."""

from __future__ import annotations

from typing import Mapping, Optional, Protocol, Sequence, runtime_checkable

from cluster.engines.base import ConcurrencyCap, PartHistogram
from cluster.input_files import JsonValue


@runtime_checkable
class EngineFacts(Protocol):
    """An engine as the runs row judges a run: did the server run the offered concurrency, and what did its
    counters say about acceptance."""

    @property
    def running_gauge(self) -> Optional[str]:
        """Prometheus gauge of requests running now (None when the engine has none)."""
        ...

    @property
    def queue_gauge(self) -> Optional[str]:
        """Prometheus gauge of requests waiting to be scheduled (None when the engine has none)."""
        ...

    @property
    def ttft_part_histograms(self) -> tuple[PartHistogram, ...]:
        """The histograms whose means per request split a prefill/decode deployment's TTFT (() when none)."""
        ...

    def concurrency_cap(self, infos: Mapping[str, JsonValue],
                        log_lines: Sequence[str] = ()) -> Optional[ConcurrencyCap]:
        """The resolved cap on running requests from the recorded info documents and the cap's log lines."""
        ...

    def window_acceptance(self, before: Mapping[str, float], after: Mapping[str, float],
                          n_requests: int) -> dict[str, float]:
        """Run-scoped speculative figures from the counters diffed around a window ({} when the engine has none)."""
        ...

    def resolved_args(self, infos: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        """The server args the engine resolved, from the recorded info documents ({} when it reports none)."""
        ...
