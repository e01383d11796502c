"""One run on a running server: warmup and flush, every load actor's shard of the measured window streamed into the
dataset, then the run judged (a server death is `failed`, retried on resubmission) and committed."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

import pyarrow.compute as pc
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup

from cluster.config.experiment import ExperimentSpec
from cluster.kernel.run_facts import SegmentFacts, ServerFacts
from cluster.analysis.run_row import build_run_row, failed_run_row
from cluster.kernel.run_row import RunRow
from cluster.dataset.store import DatasetStore
from cluster.dataset.writer import RunWriter
from cluster.distributed.actors import LoadBatch
from cluster.distributed.eval_stage import EvalStage
from cluster.distributed.handles import EngineHandle, LoadHandle
from cluster.distributed.progress import PointRecords, PointStarted, ProgressEvent
from cluster.distributed.run_records import DEATH_SETTLE_S, Death, DiedBeforeWindow, RunRecorder, error_text
from cluster.distributed.teardown import kill_actors
from cluster.distributed.window_summary import WindowSummary
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.server.process import with_decisive_line
from cluster.kernel.telemetry_capture import TelemetryCapture
from cluster.kernel.window import MeasuredWindow
from cluster.kernel.window_job import WindowJob

LIVE_UPDATES_PER_WINDOW = 20
"""With a live watcher, a load actor hands out its finished requests about this often per window (batches of at
least LIVE_MIN_BATCH_ROWS), so the view's requests done and running figures move during the window."""
LIVE_MIN_BATCH_ROWS = 8


def batch_rows_for(p: RunPlan, batch_rows: int, live: bool) -> int:
    """Requests per batch out of a load actor: batch_rows, or smaller with a live watcher."""
    if not live:
        return batch_rows
    per_update = -(-p.workload.num_requests // LIVE_UPDATES_PER_WINDOW)
    return min(batch_rows, max(LIVE_MIN_BATCH_ROWS, per_update))


class SharedNodes:
    """Thread-shared bookkeeping: which variants run on which node right now (for `shared_node_with`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[str, str] = {}

    def enter(self, variant: str, node_id: str) -> None:
        with self.lock:
            self.active[variant] = node_id

    def leave(self, variant: str) -> None:
        with self.lock:
            self.active.pop(variant, None)

    def neighbours(self, variant: str, node_id: str) -> set[str]:
        with self.lock:
            return {v for v, n in self.active.items() if n == node_id and v != variant}


@dataclass
class ServerStart:
    """One server start's live parts: its placement group, actors and facts (its load actors are replaced after one
    fails while its server lives)."""

    variant: ResolvedVariant
    pg: PlacementGroup
    seg: SegmentFacts
    engine: Optional[EngineHandle] = None
    loads: list[LoadHandle] = field(default_factory=list)
    server: Optional[ServerFacts] = None
    load_pg: Optional[PlacementGroup] = None
    """A spread deployment's second group: its gateway's and load actors' CPU bundles (None: they share `pg`)."""


NewLoadActor = Callable[[PlacementGroup, ResolvedVariant, int], LoadHandle]


class PointRunner:
    """Measures runs on server starts; shared by every segment thread of one experiment."""

    def __init__(self, spec: ExperimentSpec, store: DatasetStore, recorder: RunRecorder, shared: SharedNodes,
                 log: Callable[[str], None], on_event: Callable[[ProgressEvent], None], live: bool,
                 batch_rows: int, new_load_actor: NewLoadActor) -> None:
        self.spec = spec
        self.store = store
        self.recorder = recorder
        self.shared = shared
        self.log = log
        self.on_event = on_event
        self.live = live
        self.batch_rows = batch_rows
        self.new_load_actor = new_load_actor
        self.evals: Optional[EvalStage] = None
        """The accuracy task (correctness.eval): its items ride in the window of the runs it names."""

    def _stream_window(self, p: RunPlan, s: ServerStart, server: ServerFacts, engine: EngineHandle,
                       writer: RunWriter) -> MeasuredWindow:
        """Warmup and flush (first load actor), then every load actor runs its shard of the window; record batches
        are written as they arrive and summarised on their way (WindowSummary), so neither the actors nor the driver
        hold a whole long window, and the driver reads none of it back."""
        model_name = self.spec.model.served_name or self.spec.model.path
        loads = s.loads
        job = WindowJob.of_run(p, server.base_url, model_name, self.spec.request_timeout_s, server.workers())
        ep = p.variant.endpoint  # an endpoint's cache is flushed only when the experiment allows it
        prep = loads[0].prepare(job, self.spec.warmup_requests, flush_cache=ep is None or ep.flush_cache)
        if not engine.alive():
            raise DiedBeforeWindow("server died before the measured window")
        n = len(loads)
        start = time.time() + 1.0 if n > 1 else None  # shards start their windows together
        telemetry = self.spec.telemetry
        if telemetry.enabled:  # sampling brackets the window: it starts before the first send, stops after the last
            why_not = engine.telemetry_start(telemetry.rate_hz)
            if why_not:
                self.log(f"[{p.variant.name}] no GPU telemetry: {why_not}")
        capture: Optional[TelemetryCapture] = None
        try:
            items = self.evals.items_for(p) if self.evals is not None else ()
            job = replace(job, batch_rows=batch_rows_for(p, self.batch_rows, self.live),
                          eval_max_tokens=self.evals.max_new_tokens if self.evals is not None else 0)
            streams = [a.stream(replace(job.shard(i, n, start), eval_items=items if i == 0 else ()))
                       for i, a in enumerate(loads)]
            shards: list[MeasuredWindow] = []  # each shard's own record, its stream's last message
            summary = WindowSummary()
            for stream in streams:
                for item in stream:
                    if isinstance(item, LoadBatch):
                        writer.write("requests", item.requests)
                        writer.write("chunks", item.chunks)
                        summary.add(item.requests, item.chunks)
                        self.on_event(PointRecords(p, item.requests))
                    else:
                        shards.append(item)
        finally:
            if telemetry.enabled:
                capture = engine.telemetry_stop()
        if items and self.evals is not None:
            self.evals.under_load(p, shards[0].eval_answers, s.seg.correctness)
        return summary.merged(shards, prep.warmup_ok, prep.flushed, capture)

    def run(self, p: RunPlan, s: ServerStart) -> Optional[Death]:
        """Measure one run; if the server died, where and its log tail. A server death is `failed` (retried on
        resubmission), recorded on the run whose window it happened in; a failed load actor is replaced."""
        engine, server, seg = s.engine, s.server, s.seg
        assert engine is not None and server is not None
        if not engine.alive():
            # found dead between runs (its actor was killed, or it crashed after the last window): no warmup or
            # flush retries against a server that is gone
            tail = engine.log_tail()
            self.recorder.failed(p, "server died before this run started" + engine.dead_note(), tail, server, seg)
            return Death(f"found dead before run {p.order_index} started", tail)
        neighbours = self.shared.neighbours(p.variant.name, server.node_id)
        writer = RunWriter(self.store, p)
        self.on_event(PointStarted(p))
        try:
            out = self._stream_window(p, s, server, engine, writer)
        except DiedBeforeWindow:
            writer.abort()
            tail = engine.log_tail()
            self.recorder.failed(p, f"server died{engine.dead_note()} before this run's measured window (during "
                                    "warmup or the cache flush)", tail, server, seg)
            return Death(f"it died before the window of run {p.order_index}", tail)
        except (RayActorError, RayTaskError) as e:
            writer.abort()
            reason, _ = error_text(e)
            alive = engine.alive()
            tail = engine.log_tail()
            if not alive:
                self.recorder.failed(p, f"server died during the measured window{engine.dead_note()}: {reason}", tail,
                                     server, seg)
                return Death(f"it died in the window of run {p.order_index}", tail)
            self.recorder.failed(p, f"load actor failed: {reason}", tail, server, seg)
            kill_actors(s.loads)
            s.loads = [self.new_load_actor(s.pg, p.variant, i) for i in range(len(s.loads))]
            return None
        n_req = out.requests.num_rows
        n_err = n_req - int(pc.sum(pc.is_null(out.requests.column("error"))).as_py() or 0) if n_req else 0
        # failed requests may mean a dying server whose watchdog has not noticed yet: look again before judging
        alive = engine.alive(settle_s=DEATH_SETTLE_S if n_err else 0.0)
        neighbours |= self.shared.neighbours(p.variant.name, server.node_id)
        if not alive and n_err:
            tail = engine.log_tail()
            why = f"server died during the measured window{engine.dead_note()} ({n_err} of {n_req} requests failed)"
            writer.commit(failed_run_row(p, with_decisive_line(why, tail),
                                         tail, server, seg, self.spec, self.recorder.git_sha))
            self.recorder.finish(p, "failed", RunRow(status="failed",
                                                       failure_reason="server died during the measured window"))
            return Death(f"it died in the window of run {p.order_index}", tail)
        # dead with every request answered: it died after this window, whose measurement is whole
        # an endpoint restarted under the run: measured, but not on the server that was checked and gated
        restart = engine.restart_reason() if not server.launched else None
        row = build_run_row(p, out, server, seg, self.spec, sorted(neighbours), self.recorder.git_sha, restart)
        self.recorder.result.attainment[p.run_key] = row.metrics.get("slo_attainment")
        from cluster.loadgen.output_sample import samples_table

        sm, gm = out.server_metrics, out.gpu_metrics
        extra: dict[str, Any] = {"server_metrics": sm} if sm is not None and sm.num_rows else {}
        if gm is not None and gm.num_rows:
            extra["gpu_metrics"] = gm
        if out.samples:  # the output ids of the run's deterministic sample: the evidence of a garbage verdict
            extra["output_samples"] = samples_table(out.samples)
        writer.commit(row, extra or None)
        self.recorder.finish(p, row.status, row)
        if not alive:
            return Death(f"it died after the window of run {p.order_index}", engine.log_tail())
        return None
