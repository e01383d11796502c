"""`sglbench run`'s live view in a terminal: a table of the points being measured (variant, server state, point,
requests done/total, tok/s, TTFT p50, acceptance length, verdict) above the run's progress bar, redrawn by rich's Live.

A running point's figures are cluster.analysis.metrics.summarize_run over the requests finished so far, the window's
duration taken up to the latest of them (the stored figure divides by the whole window instead); a finished point
shows its stored runs row's own figures and verdict (driver events, cluster/distributed/progress.py). Only a terminal
gets this view: `sglbench run` in a pipe or CI prints one line per event as before, and `--no-progress` shows neither.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cluster.analysis.metrics import summarize_run
from cluster.analysis.request_metrics import int_column
from cluster.distributed.progress import PointFinished, PointRecords, PointStarted, ProgressEvent, ServerState
from cluster.kernel.runs import RunPlan

COLUMNS = ("variant", "server", "point", "requests", "tok/s", "TTFT p50", "accept", "verdict")
MAX_ROWS = 14
"""Points shown at once: the latest ones (a long experiment's earlier points are in the dataset)."""
RECOMPUTE_S = 0.5
"""A running point's figures are recomputed at most this often (summarize_run over its requests so far)."""
NS_PER_S = 1e9
LIVE_COLUMNS = ("error", "actual_send_ns", "intended_send_ns", "first_chunk_ns", "last_chunk_ns",
                "completion_tokens", "client_tokens", "spec_verify_ct")
"""The requests columns the shown figures read (ok, TTFT, output tokens, acceptance): a running point keeps only
these, not whole rows, so a long window does not sit in memory twice (the driver spools it to disk)."""


@dataclass
class _Point:
    plan: RunPlan
    done: int = 0
    batches: list[pa.RecordBatch] = field(default_factory=list)
    output_tok_s: Optional[float] = None
    ttft_ms_p50: Optional[float] = None
    accept_length: Optional[float] = None
    verdict: str = "running"
    computed_s: float = 0.0

    def add(self, batch: pa.RecordBatch, now_s: float) -> None:
        self.batches.append(batch.select([c for c in LIVE_COLUMNS if c in batch.schema.names]))
        self.done += batch.num_rows
        if now_s - self.computed_s >= RECOMPUTE_S:
            self.recompute(now_s)

    def recompute(self, now_s: float) -> None:
        """The running figures, by the results' own definitions, over the window up to its latest finished request."""
        requests = pa.Table.from_batches(self.batches)
        last_ns, valid = int_column(requests, "last_chunk_ns", 0)
        duration_s = float(last_ns[valid].max()) / NS_PER_S if valid.any() else 0.0
        m = summarize_run(requests, pa.table({}), duration_s)
        self.output_tok_s, self.ttft_ms_p50, self.accept_length = (
            m["output_tok_s"], m["ttft_ms_p50"], m["accept_length"])
        self.computed_s = now_s

    def label(self) -> str:
        return f"{self.plan.workload.name} {self.plan.load.label} r{self.plan.repeat}"

    def finish(self, e: PointFinished) -> None:
        self.output_tok_s, self.ttft_ms_p50, self.accept_length = e.output_tok_s, e.ttft_ms_p50, e.accept_length
        self.verdict = e.status
        self.done = self.done if e.n_requests is None else e.n_requests
        self.batches = []  # its figures are the stored row's now


def _fig(x: Optional[float], fmt: str, unit: str = "") -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:{fmt}}{unit}"


class LiveView:
    """The live table's state, fed by driver events from any thread; rich's Live renders it (`__rich__`)."""

    def __init__(self, title: str, total_runs: int, max_rows: int = MAX_ROWS,
                 clock: Callable[[], float] = time.monotonic, console: Optional[Console] = None,
                 bar: bool = True, log: Callable[[str], None] = lambda line: None) -> None:
        self.title = title
        self.log = log
        """Where a point that is not ok says why (above the table: the verdict column keeps to the status)."""
        self.max_rows = max_rows
        self.clock = clock
        self._lock = threading.Lock()
        self._servers: dict[str, str] = {}
        self._points: dict[str, _Point] = {}
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=console,
                                 disable=not bar)
        self.task = self.progress.add_task(title, total=total_runs, last="")

    def __call__(self, event: ProgressEvent) -> None:
        with self._lock:
            if isinstance(event, ServerState):
                if not (event.state == "stopped" and self._servers.get(event.variant) == "failed"):
                    self._servers[event.variant] = event.state  # a failed server stays marked failed
            elif isinstance(event, PointStarted):
                self._points[event.plan.run_key] = _Point(event.plan)
            elif isinstance(event, PointRecords):
                self._point(event.plan).add(event.requests, self.clock())
            elif isinstance(event, PointFinished):
                self._point(event.plan).finish(event)
        if isinstance(event, PointFinished) and event.reason:
            self.log(f"[{event.plan.variant.name}] {_Point(event.plan).label()}: {event.status}: {event.reason}")

    def _point(self, plan: RunPlan) -> _Point:
        """A point's state; one that finished without starting (failed before its window) gets its row here."""
        return self._points.setdefault(plan.run_key, _Point(plan))

    def on_run(self, p: RunPlan, status: str) -> None:
        self.progress.update(self.task, advance=1,
                             last=f"{p.variant.name} {p.workload.name} {p.load.label} r{p.repeat}: {status}")

    def complete(self) -> None:
        self.progress.update(self.task, completed=self.progress.tasks[0].total)

    def table(self) -> Table:
        t = Table(title=f"{self.title}: live", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in COLUMNS:
            right = col in ("requests", "tok/s", "TTFT p50", "accept")
            # figures never wrap (a cut number misleads); names and states fold at a narrow width
            t.add_column(col, justify="right" if right else "left", no_wrap=right, overflow="fold",
                         min_width=len(col) if right else None)
        with self._lock:
            points = list(self._points.values())[-self.max_rows:]
            shown = {p.plan.variant.name for p in points}
            waiting = [(v, s) for v, s in self._servers.items() if v not in shown and s != "stopped"]
            for p in points:
                v = p.plan.variant.name
                t.add_row(v, self._servers.get(v, "-"), p.label(),
                          f"{p.done}/{p.plan.workload.num_requests}", _fig(p.output_tok_s, ".1f"),
                          _fig(p.ttft_ms_p50, ".1f", " ms"), _fig(p.accept_length, ".2f"), p.verdict)
            for v, s in waiting:  # a server placing, starting or answering its gate: no point yet
                t.add_row(v, s, "-", "-", "-", "-", "-", "-")
        return t

    def __rich__(self) -> RenderableType:
        return Group(self.table(), self.progress.get_renderable())


@contextlib.contextmanager
def run_display(console: Console, title: str, total_runs: int, progress: bool
                ) -> Iterator[tuple[LiveView, Callable[[str], None], Optional[Callable[[ProgressEvent], None]]]]:
    """What `sglbench run` shows while the block runs: (the view, a log function printing above it, the driver's
    event watcher or None). In a terminal the live table over the progress bar; elsewhere (a pipe, CI) the bar as
    before and one line per log event, with no watcher (so the driver batches as without a view); with `progress`
    off only the log lines."""
    live = progress and console.is_terminal

    def log(msg: str) -> None:
        console.print(msg, highlight=False, markup=False, soft_wrap=True)

    view = LiveView(title, total_runs, console=console, bar=progress, log=log)

    with Live(view, console=console, refresh_per_second=4) if live else view.progress:
        yield view, log, view if live else None
        view.complete()
