"""What the load generator needs of an engine: one streaming request's body, a parser for its stream, the speculative
counters in /metrics, and the paths and headers it calls. Declared here, by the code that calls it."""

from __future__ import annotations

from typing import Mapping, Optional, Protocol, runtime_checkable

from cluster.engines.base import HttpRequest, StreamParser, StreamRequest


@runtime_checkable
class LoadTarget(Protocol):
    """An engine as the window runner, the warmup and the flush drive it (guidellm's BackendInterface pattern: the
    consumer owns the interface; every adapter in cluster/engines/ satisfies it structurally, none imports it)."""

    @property
    def headers(self) -> Mapping[str, str]:
        """Headers every call sends (the variant's API key, where it has one)."""
        ...

    @property
    def metrics_path(self) -> str:
        """GET path of the Prometheus text scraped around a window."""
        ...

    @property
    def flush_path(self) -> Optional[str]:
        """POST path that resets caches and counters before a window (None: the engine has none)."""
        ...

    def build_request(self, request: StreamRequest) -> HttpRequest:
        """The path, body and headers of one streaming request for a prompt."""
        ...

    def new_parser(self, api: str, keep_text: bool = False) -> StreamParser:
        """A parser for one request's SSE stream (keep_text: it keeps the output for the run's output sample)."""
        ...

    def spec_counters(self, metrics_text: str) -> dict[str, float]:
        """Run-scoped speculative counters read from Prometheus text ({} when the engine has none)."""
        ...
