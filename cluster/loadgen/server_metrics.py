"""Scrapes an engine's Prometheus /metrics on a background thread during a measured window (server_metrics table)."""

from __future__ import annotations

import threading
import time
from typing import Any, Optional, Sequence, Union

import pyarrow as pa

from cluster.engines.http_call import call
from cluster.engines.prometheus import parse_prometheus
from cluster.engines.registry import scraped_metric_names
from cluster.errors import EngineFault, EnvironmentFault

SCRAPE_TIMEOUT_S = 5.0
"""One scrape's whole deadline: a /metrics that answers slower (or never ends) counts as a scrape error."""

SERVER_METRICS_FIELDS = [
    pa.field("t_ns", pa.int64(), nullable=False),
    pa.field("metric", pa.string(), nullable=False),
    pa.field("labels", pa.string()),
    pa.field("value", pa.float64()),
]
"""One row per (scrape time, sample); t_ns is wall-clock ns relative to the run's window start."""
SERVER_METRICS_BATCH_SCHEMA = pa.schema(SERVER_METRICS_FIELDS)

class MetricsScraper:
    """GET base_url + path every interval_s until stopped; keeps the samples whose names are listed."""

    def __init__(self, url: Union[str, Sequence[tuple[str, str]]], interval_s: float = 1.0,
                 names: Optional[tuple[str, ...]] = None, max_rows: int = 2_000_000) -> None:
        """`url`: one server's /metrics, or (process name, /metrics URL) of each server of a deployment, whose
        samples get the label process=<name> (one series per role and replica, on one clock). `names`: the samples
        kept (default: every registered engine's scraped_metric_names; gauges and counters worth a time series,
        and only the _sum and _count of the histograms that split a prefill/decode TTFT)."""
        self.targets: list[tuple[str, str]] = [("", url)] if isinstance(url, str) else list(url)
        self.url = self.targets[0][1]
        self.interval_s = interval_s
        self.names = set(names if names is not None else scraped_metric_names())
        self.max_rows = max_rows
        self.rows: list[tuple[int, str, str, float]] = []
        self.errors = 0
        self.t0_ns = time.time_ns()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "MetricsScraper":
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.scrape_once()
            self._stop.wait(self.interval_s)

    def scrape_once(self) -> None:
        t = time.time_ns()  # one time per round: a gauge summed over a deployment's servers sums one moment's values
        for process, url in self.targets:
            self._scrape(process, url, t)

    def _scrape(self, process: str, url: str, t: int) -> None:
        try:  # 5 s in all for the whole answer (a deadline, not per read), its size bounded (http_call)
            reply = call(url, "", timeout_s=SCRAPE_TIMEOUT_S)
        except (EngineFault, EnvironmentFault):
            self.errors += 1
            return
        if reply.status != 200:
            self.errors += 1
            return
        text = reply.text()
        for name, labels, value in parse_prometheus(text):
            if name in self.names and len(self.rows) < self.max_rows:
                if process:
                    labels = {**labels, "process": process}
                lab = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
                self.rows.append((t, name, lab, value))

    def halt(self) -> None:
        """Stop scraping (one last scrape closes the series)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.scrape_once()

    def batch(self, window_start_unix_s: float) -> pa.RecordBatch:
        """The samples, times as ns relative to the window start (negative: scraped before it opened)."""
        t0 = int(window_start_unix_s * 1e9)
        cols: dict[str, Any] = {"t_ns": [r[0] - t0 for r in self.rows], "metric": [r[1] for r in self.rows],
                                "labels": [r[2] for r in self.rows], "value": [r[3] for r in self.rows]}
        return pa.RecordBatch.from_pydict(cols, schema=SERVER_METRICS_BATCH_SCHEMA)
