"""Ray driver: plans an experiment, places one server per variant segment, drives load, writes the dataset.

Entry point for `ray job submit ... -- python -m cluster.distributed.driver EXPERIMENT.yaml`.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import pyarrow.compute as pc
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from cluster.version import __version__
from cluster.analysis.request_metrics import requests_lag
from cluster.dataset.run_facts import GateVerdict, SegmentFacts, ServerFacts, ServerRecord, WindowSummary
from cluster.distributed.actors import EngineActor, LoadActor, LoadBatch, Prepared, ShardSummary, cleanup_task
from cluster.loadgen.gate import GateAnswers
from cluster.distributed.cluster_state import gpu_nodes, resolve_output_root
from cluster.distributed.progress import (PointFinished, PointRecords, PointStarted, ProgressEvent, ServerState,
                                          ignore)
from cluster.plan.capacity import Outcome, answer, clamped, drive, from_spec, replay
from cluster.plan.runs import expand_variants, make_plan, plan_run, search_point, server_segments
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.kernel.run_row import RunRow
from cluster.dataset.run_rows import build_run_row, failed_run_row, reported_cap
from cluster.plan.schedule import reservation, unplaceable
from cluster.dataset.writer import RunWriter
from cluster.tuning.stage import ARTIFACT_KINDS, with_artifact
from cluster.engines.base import api_key_of
from cluster.errors import EngineFault, EnvironmentFault, SglbenchError, UserError, report_error
from cluster.server.process import with_decisive_line
from cluster.config.experiment import ExperimentSpec
from cluster.config.workload import WorkloadSpec
from cluster.config.locations import check_ray_address
from cluster.config.secrets import masked_spec_json
from cluster.config.loader import load_spec
from cluster.telemetry.recorder import TelemetryCapture

LOAD_ACTOR_CPUS = 1.0
PLACEMENT_PROGRESS_S = 10.0
LIVE_UPDATES_PER_WINDOW = 20
"""With a live watcher, a load actor hands out its finished requests about this often per window (batches of at
least LIVE_MIN_BATCH_ROWS), so the view's requests done and running figures move during the window."""
LIVE_MIN_BATCH_ROWS = 8


@dataclass
class ExperimentResult:
    dataset_root: str
    statuses: dict[str, str] = field(default_factory=dict)
    skipped: int = 0
    servers: dict[str, ServerRecord] = field(default_factory=dict)
    """variant → server and segment facts (pid, node, GPU ids, load actors) of its (last) server start."""
    attainment: dict[str, Optional[float]] = field(default_factory=dict)
    """run key → the SLO attainment its committed row recorded (what a capacity search's next probe depends on)."""

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.statuses.values():
            out[s] = out.get(s, 0) + 1
        return out


DEATH_SETTLE_S = 3.0
"""After a window with failed requests, how long a dying server is given to be seen dead."""


@dataclass(frozen=True)
class _Death:
    """A server death seen by one run: where it happened (for the later runs' reason) and the log tail."""

    where: str
    tail: str


class _DiedBeforeWindow(EngineFault):
    """The server was found dead after warmup and flush, before the measured window opened."""


GATE_WAIT_LOG_S = 30.0
"""How often a gate waiting for the baseline's answers says so."""


class GateBoard:
    """Gate answers per variant, shared between segment threads (None: the variant gave none), and whether the
    baseline holds its GPUs yet.

    Every other variant's gate waits for the baseline's answers while its server holds GPUs. Under `isolation: gpus`
    variants that took every GPU first would wait for a baseline that can never be placed (tp 4 + tp 4 on 8 GPUs,
    the baseline third: a stall of health_timeout_s + 600 s, seen in CI). So other variants ask for GPUs only once
    the baseline has its own, or has answers (stored, or none: its segment's end always puts them)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.outputs: dict[str, Optional[GateAnswers]] = {}
        self._placed = False

    def put(self, variant: str, outputs: Optional[GateAnswers]) -> None:
        with self.cond:
            self.outputs[variant] = outputs
            self.cond.notify_all()

    def placed(self) -> None:
        """The baseline holds its GPUs."""
        with self.cond:
            self._placed = True
            self.cond.notify_all()

    def wait_placed(self, baseline: str, timeout_s: float) -> bool:
        """True once the baseline holds its GPUs or has answers; False after timeout_s."""
        with self.cond:
            return self.cond.wait_for(lambda: self._placed or baseline in self.outputs, timeout=timeout_s)

    def has(self, variant: str) -> bool:
        with self.cond:
            return variant in self.outputs

    def wait(self, variant: str, timeout_s: float, on_wait: Callable[[float], None] = lambda waited_s: None,
             every_s: float = GATE_WAIT_LOG_S) -> Optional[GateAnswers]:
        """The variant's answers once put (None after timeout_s); on_wait(seconds waited) every every_s."""
        t0 = time.monotonic()
        with self.cond:
            while variant not in self.outputs:
                left = timeout_s - (time.monotonic() - t0)
                if left <= 0:
                    break
                if not self.cond.wait_for(lambda: variant in self.outputs, timeout=min(every_s, left)):
                    on_wait(time.monotonic() - t0)
            return self.outputs.get(variant)


def gate_key(variant: ResolvedVariant) -> str:
    """The correctness table's file key of a variant's gate answers (one per variant identity)."""
    return "gate-" + hashlib.sha256(json.dumps(variant.identity(), sort_keys=True, default=str).encode()
                                    ).hexdigest()[:16]


class _Shared:
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


def _git_sha(base_dir: Path) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(base_dir), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _error_text(e: BaseException) -> tuple[str, str]:
    """(reason, log tail) from a Ray error wrapping a ServerStartError or anything else."""
    cause = e.cause if isinstance(e, RayTaskError) and getattr(e, "cause", None) is not None else e
    tail = getattr(cause, "log_tail", "") or ""
    msg = str(cause).strip().splitlines()
    return (f"{type(cause).__name__}: {msg[-1] if msg else ''}"[:500], tail)


class Driver:
    def __init__(self, spec: ExperimentSpec, base_dir: Path, output_root: Optional[str],
                 log: Callable[[str], None], on_run: Callable[[RunPlan, str], None],
                 on_event: Optional[Callable[[ProgressEvent], None]] = None) -> None:
        from cluster.dataset.store import DatasetStore

        self.spec = spec
        self.base_dir = base_dir
        self.root = resolve_output_root(output_root or spec.output, base_dir)
        self.store = DatasetStore(self.root, spec.name)
        self.log = log
        self.on_run = on_run
        self.on_event = on_event or ignore
        """Progress events (cluster/distributed/progress.py) for a live view, from the segment threads."""
        self.live = on_event is not None
        self.shared = _Shared()
        self.result = ExperimentResult(dataset_root=self.root)
        self.git_sha = _git_sha(base_dir)
        self.log_dir = Path(os.environ.get("SGLBENCH_LOG_DIR", "/tmp/sglbench-logs")) / spec.name
        self.artifacts: dict[str, Any] = {}
        self.tuning_failures: dict[str, str] = {}
        self.baseline_name: Optional[str] = None
        self.gates = GateBoard()
        self.recorded: dict[str, Outcome] = {}
        self.recorded_caps: dict[str, float] = {}
        """variant → the lowest concurrency cap its recorded runs' servers reported (a resumed search's end)."""
        self.batch_rows = 4096
        """Finished requests per Arrow batch leaving a load actor."""
        self.preflight: Optional[dict[str, Any]] = None
        """The GPU node's checkpoint probe (remote_preflight: model path → report), set before run() when taken."""

    # ------------------------------------------------------------------ planning
    def runs_to_do(self, plans: list[RunPlan]) -> set[str]:
        """Runs not yet finished (ok or invalid); failed runs are retried on resubmission."""
        done = self.store.finished_run_keys()
        todo = {p.run_key for p in plans if p.run_key not in done}
        self.result.skipped = len(plans) - len(todo)
        for p in plans:
            if p.run_key in done:
                self.result.statuses[p.run_key] = "skipped"
        return todo

    def _plans(self) -> list[RunPlan]:
        """The plan without the back-end sweep duplicates the GPU node's probe proves identical (plan/sweep_collapse.py;
        nothing collapses without a probe)."""
        from cluster.plan.model_rules import facts_from_json
        from cluster.plan.sweep_collapse import collapse_fp4_duplicates

        reports = self.preflight or {}
        facts = {p: facts_from_json(r) for p, r in reports.items() if isinstance(r, dict)}
        kept, notes = collapse_fp4_duplicates(expand_variants(self.spec), facts)
        for line in notes:
            self.log(f"note: {line}")
        names = {v.name for v in kept}
        return make_plan(self.spec, keep=lambda v: v.name in names)

    def _checkpoint_identity(self, variant: ResolvedVariant) -> SegmentFacts:
        """A segment's first facts: the node probe's fingerprint and hub revision of the variant's checkpoint (None
        without a probe)."""
        report = (self.preflight or {}).get(variant.model_path)
        ident = report.get("identity") if isinstance(report, dict) else None
        if not isinstance(ident, dict):
            return SegmentFacts()
        return SegmentFacts(checkpoint_fingerprint=ident.get("fingerprint") or None,
                            hub_revision=ident.get("hub_revision") or None)

    def run(self) -> ExperimentResult:
        """Run what is left of the experiment while holding its dataset's lock (DatasetLocked naming the holder
        when another driver writes it); the lock is released on return and on an exception."""
        with self.store.exclusive():
            return self._run()

    def _run(self) -> ExperimentResult:
        plans = self._plans()
        nodes = gpu_nodes()
        node_gpus = [n["gpus"] for n in nodes]
        gpn = max(node_gpus, default=0)
        variants = expand_variants(self.spec)
        res = [reservation(v.name, v.tp, self.spec.isolation, gpn, LOAD_ACTOR_CPUS) for v in variants]
        problems = unplaceable(res, node_gpus)
        if problems:
            raise PlacementError("; ".join(problems))
        todo = self.runs_to_do(plans)
        self.recorded = self._recorded_outcomes()
        self._probe_index = itertools.count(len(plans))
        self.store.write_experiment_meta({
            "spec": masked_spec_json(self.spec.model_dump(mode="json")),
            "sglbench_version": __version__,
            "git_sha": self.git_sha,
            "nodes": nodes,
            "planned_runs": len(plans),
            "started_unix_s": time.time(),
            "preflight": self.preflight,
        })
        segments = [(v, runs) for v, runs in server_segments(plans)
                    if any(r.run_key in todo for r in runs) or self._search_pending(v, runs)]
        # executed in the planned order (make_plan puts the baseline's first segment first: a plan rule)
        self.baseline_name = next((v.name for v in variants if v.is_baseline), None)
        segments = self._baseline_answers(variants, segments)
        if segments:
            from cluster.distributed.tuning_stage import run_tuning_stage

            needed = [v for v in variants if any(seg[0].name == v.name for seg in segments)]
            self.artifacts = run_tuning_stage(self.spec, needed, self.root, None, self.log, self.tuning_failures)
        if not segments:
            self.log("every planned run is already in the dataset; nothing to do")
            return self.result
        self.log(f"server logs: {self.log_dir}/<variant>-<unix ms>.log on the node that ran each server "
                 "(SGLBENCH_LOG_DIR)")
        # node isolation: at most one server per node at a time; gpus: as many as fit (Ray queues the rest)
        workers = max(1, len(nodes)) if self.spec.isolation == "node" else max(1, len(segments))
        with ThreadPoolExecutor(max_workers=min(workers, 64), thread_name_prefix="segment") as pool:
            futs = [pool.submit(self._segment, v, runs, todo, res_for(v, res)) for v, runs in segments]
            for f in futs:
                f.result()
        return self.result

    # ------------------------------------------------------------------ one server start
    def _wait_pg(self, pg: Any, variant: str, gpus: int) -> None:
        t0 = time.monotonic()
        while True:
            ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_PROGRESS_S)
            if ready:
                return
            free = ray.available_resources().get("GPU", 0)
            self.log(f"[{variant}] waiting {time.monotonic() - t0:.0f} s for {gpus} GPU(s) on one node "
                     f"({free:g} GPU free cluster-wide; other variants are still running)")

    def _wait_baseline_placed(self, variant: ResolvedVariant) -> None:
        """Before a variant asks for GPUs: the baseline holds its own, or will never need them (see GateBoard)."""
        baseline = self.baseline_name
        if baseline is None or variant.name == baseline or not self.spec.correctness.enabled:
            return  # no gate of this variant waits on a baseline's answers
        t0 = time.monotonic()
        while not self.gates.wait_placed(baseline, PLACEMENT_PROGRESS_S):
            self.log(f"[{variant.name}] waiting {time.monotonic() - t0:.0f} s for the baseline {baseline!r} to "
                     "get its GPUs first (every gate compares with its answers)")

    def _segment(self, variant: ResolvedVariant, runs: list[RunPlan], todo: set[str], r: Any) -> None:
        planned = runs  # a capacity search goes on in a segment whose planned runs are all done
        runs = [p for p in runs if p.run_key in todo]
        first = runs[0] if runs else planned[0]
        n_load = self.spec.load.actors_per_server
        self._wait_baseline_placed(variant)
        bundles = [{"GPU": float(r.gpus)}] + [{"CPU": float(r.cpus_for_load)}] * n_load
        pg = placement_group(bundles, strategy="STRICT_PACK", name=f"sglbench-{self.spec.name}-{variant.name}")
        engine = None
        loads: list[Any] = []
        server: Optional[ServerFacts] = None
        seg = self._checkpoint_identity(variant)
        try:
            art = self.artifacts.get(variant.name)
            if variant.tuning is not None and variant.tuning.kind in ARTIFACT_KINDS and art is None:
                reason = self.tuning_failures.get(variant.name, "no tuning artifact was produced")
                for p in runs:
                    self._record_failed(p, f"tuning stage failed: {reason}", "", None, None)
                self.gates.put(variant.name, None)
                return
            self.on_event(ServerState(variant.name, "placing", f"{r.gpus} GPU(s)"))
            self._wait_pg(pg, variant.name, r.gpus)
            self.on_event(ServerState(variant.name, "starting"))
            if variant.name == self.baseline_name:
                self.gates.placed()
            launcher = self.spec.engines.get(variant.engine)
            launch_variant = with_artifact(variant, art)
            engine = EngineActor.options(
                name=actor_name("engine", self.spec.name, variant.name),
                num_gpus=variant.tp,
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
            ).remote(launch_variant, launcher, str(self.log_dir), "127.0.0.1", None)
            try:
                port = variant.args.get("port")
                server = ray.get(engine.start.remote(self.spec.health_timeout_s,
                                                     int(port) if isinstance(port, (int, str)) else None))
            except (RayTaskError, RayActorError) as e:
                reason, tail = _error_text(e)
                self.log(f"[{variant.name}] server failed to start: {reason}")
                self.on_event(ServerState(variant.name, "failed", reason))
                for p in runs:
                    self._record_failed(p, f"server start failed: {reason}", tail, None, None)
                self.gates.put(variant.name, None)
                return
            assert server is not None
            if art is not None:
                seg = replace(seg, tuning_artifact=art.hash)
            self.result.servers[variant.name] = ServerRecord(server, seg)
            self.shared.enter(variant.name, server.node_id)
            self.log(f"[{variant.name}] server healthy in {server.startup_s:.1f} s on GPUs "
                     f"{server.cuda_visible_devices or '-'} (pid {server.pid}, port {server.port}, log "
                     f"{server.hostname}:{server.log_path})")
            self.on_event(ServerState(variant.name, "healthy", f"in {server.startup_s:.1f} s"))
            loads = [self._new_load_actor(pg, variant, i) for i in range(n_load)]
            seg = replace(seg, load_actor_cuda_visible_devices=ray.get(loads[0].visible_gpus.remote()),
                          load_actor_node_id=ray.get(loads[0].node_id.remote()), load_actors=n_load)
            self.result.servers[variant.name] = ServerRecord(server, seg)
            if self.spec.correctness.enabled:
                self.on_event(ServerState(variant.name, "gate"))
            gate = self._gate(variant, loads[0], server, first) if self.spec.correctness.enabled \
                else GateVerdict(True, ("correctness gate disabled in the spec",), skipped=True)
            seg = replace(seg, correctness=gate)
            self.result.servers[variant.name] = ServerRecord(server, seg)
            if not gate.passed:
                self.log(f"[{variant.name}] correctness gate FAILED: {'; '.join(gate.reasons)}")
                self.on_event(ServerState(variant.name, "failed", "correctness gate failed"))
                for p in runs:
                    self._record_invalid(p, "correctness gate failed: " + "; ".join(gate.reasons), server, seg)
                return
            self.on_event(ServerState(variant.name, "measuring"))
            death: Optional[_Death] = None
            for p in runs:
                if death is not None:
                    self._record_failed(p, f"server died during an earlier run of this variant ({death.where})",
                                        death.tail, server, seg)
                    continue
                loads, death = self._one_run(p, engine, loads, pg, server, seg)
            if death is None and self.spec.load.search is not None:
                loads, death = self._searches(variant, planned, engine, loads, pg, server, seg)
            if variant.profile is not None and death is None and runs:
                self._profile(variant, engine, loads[0], server, runs[0])
        finally:
            if not self.gates.has(variant.name):
                # whatever ended this segment (an unexpected error included), no other variant's gate may wait
                # health_timeout_s + 600 s for answers this one will never give
                self.gates.put(variant.name, None)
            self.shared.leave(variant.name)
            self._teardown(engine, loads, pg, server)
            self.on_event(ServerState(variant.name, "stopped"))
            if server is not None:
                self.result.servers[variant.name] = ServerRecord(server, replace(seg, stopped_unix_s=time.time()))

    def _new_load_actor(self, pg: Any, variant: ResolvedVariant, index: int) -> Any:
        return LoadActor.options(
            name=actor_name("load", self.spec.name, variant.name),
            num_cpus=LOAD_ACTOR_CPUS,
            num_gpus=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=1 + index),
            runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}},
        ).remote(variant.engine, str(self.base_dir), variant.model_path, api_key_of(variant.args))

    def _stream_window(self, p: RunPlan, loads: list[Any], server: ServerFacts, writer: RunWriter, engine: Any
                       ) -> WindowSummary:
        """Warmup and flush (first load actor), then every load actor runs its shard of the window; record batches
        are written as they arrive, so neither the actors nor the driver hold a whole long window."""
        model_name = self.spec.model.served_name or self.spec.model.path
        prep: Prepared = ray.get(loads[0].prepare.remote(server.base_url, p.workload, p.load, p.seed,
                                                         self.spec.warmup_requests, model_name,
                                                         self.spec.request_timeout_s))
        if not self._engine_alive(engine):
            raise _DiedBeforeWindow("server died before the measured window")
        n = len(loads)
        start = time.time() + 1.0 if n > 1 else None  # shards start their windows together
        telemetry = self.spec.telemetry
        if telemetry.enabled:  # sampling brackets the window: it starts before the first send, stops after the last
            why_not = ray.get(engine.telemetry_start.remote(telemetry.rate_hz), timeout=60)
            if why_not:
                self.log(f"[{p.variant.name}] no GPU telemetry: {why_not}")
        capture: Optional[TelemetryCapture] = None
        try:
            gens = [a.run_point_stream.options(num_returns="streaming").remote(
                server.base_url, p.workload, p.load, p.seed, model_name, self.spec.request_timeout_s, i, n, start,
                batch_rows=self._batch_rows(p))
                for i, a in enumerate(loads)]
            summaries: list[ShardSummary] = []
            for gen in gens:
                for ref in gen:
                    item = ray.get(ref)
                    if isinstance(item, LoadBatch):
                        writer.write("requests", item.requests)
                        writer.write("chunks", item.chunks)
                        self.on_event(PointRecords(p, item.requests))
                    else:
                        summaries.append(item)
        finally:
            if telemetry.enabled:
                capture = self._telemetry_stop(engine)
        first = summaries[0]
        t0 = min(s.window_start_unix_s for s in summaries)
        t0_mono = min(summaries, key=lambda s: s.window_start_unix_s).window_start_monotonic_ns
        gpu = capture.aligned(t0_mono) if capture is not None and capture.samples.num_rows else None
        requests = writer.read("requests")
        lag = requests_lag(requests)  # over every shard's rows: the figure the runs row stores and is judged on
        lag_p50_ns, lag_p99_ns = (round(lag.p50_ns), round(lag.p99_ns)) if lag else (0, 0)
        return WindowSummary(
            requests=requests,
            chunks=writer.read("chunks"),
            window_start_unix_s=t0,
            duration_s=max(s.window_start_unix_s + s.duration_s for s in summaries) - t0,
            lag_p50_ns=lag_p50_ns,
            lag_p99_ns=lag_p99_ns,
            counters_before=first.counters_before,
            counters_after=first.counters_after,
            warmup_ok=prep.warmup_ok,
            flushed=prep.flushed,
            load_actor_peak_buffered_rows=max(s.peak_buffered_rows for s in summaries),
            server_metrics=first.server_metrics,
            gpu_metrics=gpu,
            telemetry=capture,
            samples=tuple(sorted((x for s in summaries for x in s.samples), key=lambda x: x.request_index)),
            selection=first.selection,
        )

    def _telemetry_stop(self, engine: Any) -> Optional[TelemetryCapture]:
        """The window's GPU samples from the EngineActor (None when it is gone: the run's other evidence decides)."""
        try:
            got: Optional[TelemetryCapture] = ray.get(engine.telemetry_stop.remote(), timeout=60)
        except (RayActorError, RayTaskError, GetTimeoutError):
            return None
        return got

    def _one_run(self, p: RunPlan, engine: Any, loads: list[Any], pg: Any, server: ServerFacts,
                 seg: SegmentFacts) -> tuple[list[Any], Optional[_Death]]:
        """Measure one run; returns the load actors to go on with and, if the server died, where and its log tail.
        A server death is `failed` (retried on resubmission), recorded on the run whose window it happened in."""
        if not self._engine_alive(engine):
            # found dead between runs (its actor was killed, or it crashed after the last window): no warmup or
            # flush retries against a server that is gone
            tail = self._engine_tail(engine)
            self._record_failed(p, "server died before this run started", tail, server, seg)
            return loads, _Death(f"found dead before run {p.order_index} started", tail)
        neighbours = self.shared.neighbours(p.variant.name, server.node_id)
        writer = RunWriter(self.store, p)
        self.on_event(PointStarted(p))
        try:
            out = self._stream_window(p, loads, server, writer, engine)
        except _DiedBeforeWindow:
            writer.abort()
            tail = self._engine_tail(engine)
            self._record_failed(p, "server died before this run's measured window (during warmup or the cache "
                                   "flush)", tail, server, seg)
            return loads, _Death(f"it died before the window of run {p.order_index}", tail)
        except (RayActorError, RayTaskError) as e:
            writer.abort()
            reason, _ = _error_text(e)
            alive = self._engine_alive(engine)
            tail = self._engine_tail(engine)
            if not alive:
                self._record_failed(p, f"server died during the measured window: {reason}", tail, server, seg)
                return loads, _Death(f"it died in the window of run {p.order_index}", tail)
            self._record_failed(p, f"load actor failed: {reason}", tail, server, seg)
            for a in loads:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001
                    pass
            return [self._new_load_actor(pg, p.variant, i) for i in range(len(loads))], None
        n_req = out.requests.num_rows
        n_err = n_req - int(pc.sum(pc.is_null(out.requests.column("error"))).as_py() or 0) if n_req else 0
        # failed requests may mean a dying server whose watchdog has not noticed yet: look again before judging
        alive = self._engine_alive(engine, settle_s=DEATH_SETTLE_S if n_err else 0.0)
        neighbours |= self.shared.neighbours(p.variant.name, server.node_id)
        if not alive and n_err:
            tail = self._engine_tail(engine)
            writer.commit(failed_run_row(p, with_decisive_line(f"server died during the measured window ({n_err} of "
                                                               f"{n_req} requests failed)", tail),
                                         tail, server, seg, self.spec, self.git_sha))
            self._finish(p, "failed", RunRow(status="failed",
                                             failure_reason="server died during the measured window"))
            return loads, _Death(f"it died in the window of run {p.order_index}", tail)
        # dead with every request answered: it died after this window, whose measurement is whole
        row = build_run_row(p, out, server, seg, self.spec, sorted(neighbours), self.git_sha)
        self.result.attainment[p.run_key] = row.metrics.get("slo_attainment")
        from cluster.loadgen.output_sample import samples_table

        sm, gm = out.server_metrics, out.gpu_metrics
        extra: dict[str, Any] = {"server_metrics": sm} if sm is not None and sm.num_rows else {}
        if gm is not None and gm.num_rows:
            extra["gpu_metrics"] = gm
        if out.samples:  # the output ids of the run's deterministic sample: the evidence of a garbage verdict
            extra["output_samples"] = samples_table(out.samples)
        writer.commit(row, extra or None)
        self._finish(p, row.status, row)
        if not alive:
            return loads, _Death(f"it died after the window of run {p.order_index}", self._engine_tail(engine))
        return loads, None

    # ------------------------------------------------------------------ capacity at an SLO
    def _recorded_outcomes(self) -> dict[str, Outcome]:
        """run key → (status, SLO attainment) of every committed run: where a resumed capacity search stands."""
        if self.spec.load.search is None:
            return {}
        t = self.store.read_table("runs", columns=["run_key", "variant", "status", "m_slo_attainment",
                                                   "provenance_json"]).to_pandas()
        if t.empty:
            return {}
        for v, g in t.groupby("variant"):
            cap = reported_cap(g["provenance_json"])
            if cap is not None:
                self.recorded_caps[str(v)] = cap
        att = t["m_slo_attainment"].astype(object).where(t["m_slo_attainment"].notna(), None)
        return {k: Outcome(st, a) for k, st, a in zip(t["run_key"], t["status"], att)}

    def _search_cells(self, planned: list[RunPlan]) -> list[tuple[WorkloadSpec, int]]:
        """(workload, repeat) of each search a segment carries (one per planned first probe)."""
        cells: dict[tuple[str, int], tuple[WorkloadSpec, int]] = {}
        for p in planned:
            cells.setdefault((p.workload.name, p.repeat), (p.workload, p.repeat))
        return list(cells.values())

    def _outcome_of(self, v: ResolvedVariant, w: WorkloadSpec, r: int) -> Callable[[float], Optional[Outcome]]:
        def get(load: float) -> Optional[Outcome]:
            return self.recorded.get(plan_run(self.spec, v, w, search_point(self.spec.load, load), r, 0).run_key)

        return get

    def _search_pending(self, v: ResolvedVariant, planned: list[RunPlan]) -> bool:
        s = self.spec.load.search
        if s is None:
            return False
        search = clamped(from_spec(s), self.recorded_caps.get(v.name))  # the cap its server reported before
        return any(replay(search, self._outcome_of(v, w, r)).next_load is not None
                   for w, r in self._search_cells(planned))

    def _searches(self, variant: ResolvedVariant, planned: list[RunPlan], engine: Any, loads: list[Any], pg: Any,
                  server: ServerFacts, seg: SegmentFacts) -> tuple[list[Any], Optional[_Death]]:
        """Every capacity search of this segment, on its server: each probe a normal recorded run."""
        from cluster.engines.registry import get_engine

        assert self.spec.load.search is not None
        cap = get_engine(variant.engine).concurrency_cap(server.infos, server.cap_log_lines)
        search = clamped(from_spec(self.spec.load.search), cap.value if cap else None)
        state: dict[str, Any] = {"loads": loads, "death": None}
        for w, r in self._search_cells(planned):
            def measure(load: float, w: WorkloadSpec = w, r: int = r) -> None:
                if state["death"] is not None:
                    return
                p = plan_run(self.spec, variant, w, search_point(self.spec.load, load), r, next(self._probe_index))
                self.log(f"[{variant.name}] capacity search {w.name} repeat {r}: probe {p.load.label}")
                state["loads"], state["death"] = self._one_run(p, engine, state["loads"], pg, server, seg)
                self.recorded[p.run_key] = Outcome(self.result.statuses.get(p.run_key, "failed"),
                                                   self.result.attainment.get(p.run_key))

            rp = drive(search, self._outcome_of(variant, w, r), measure)
            got = answer(search, rp.probes)
            self.log(f"[{variant.name}] capacity search {w.name} repeat {r}: {got.status}"
                     + (f" at {got.value:g}" if got.value is not None else "")
                     + (f" ({rp.stopped})" if rp.stopped else "")
                     + (f" (probe {rp.next_load:g} not measured)" if rp.next_load is not None else ""))
            if state["death"] is not None:
                break
        return state["loads"], state["death"]

    def _profile(self, variant: ResolvedVariant, engine: Any, load: Any, server: ServerFacts, first: RunPlan) -> None:
        """After the variant's measured windows: a kernel profile of `profile.steps` forward steps driven by
        `profile.requests` requests of its first workload; the trace archive goes to `_artifacts/profiles/`, the top
        kernels to the `kernel_profile` table. A failed profile is logged, never a failed run."""
        from cluster.analysis.kernel_profile import kernel_profile_rows

        prof = variant.profile
        assert prof is not None
        model_name = self.spec.model.served_name or self.spec.model.path
        try:
            why_not = ray.get(engine.profile_start.remote(prof.steps), timeout=120)
            if why_not:
                self.log(f"[{variant.name}] no kernel profile: {why_not}")
                return
            ray.get(load.prepare.remote(server.base_url, first.workload, first.load, first.seed, prof.requests,
                                        model_name, self.spec.request_timeout_s), timeout=self.spec.request_timeout_s)
            cap = ray.get(engine.profile_collect.remote(120.0, prof.max_archive_bytes), timeout=600)
        except (RayActorError, RayTaskError, GetTimeoutError) as e:
            self.log(f"[{variant.name}] kernel profile failed: {_error_text(e)[0]}")
            return
        artifact = None
        if cap.archive is not None and cap.archive_sha256:
            artifact = self.store.write_artifact(f"profiles/{variant.name}-{cap.archive_sha256[:16]}.tar.gz",
                                                 cap.archive)
        if cap.note:
            self.log(f"[{variant.name}] kernel profile: {cap.note}")
        if cap.summary is None or not cap.summary.top:
            return
        rows = kernel_profile_rows(self.spec.name, variant.engine, prof.steps, cap.summary, artifact)
        self.store.write_variant_table("kernel_profile", variant.name, "profile-" + gate_key(variant)[5:], rows)
        self.log(f"[{variant.name}] kernel profile of {prof.steps} steps: {len(cap.files)} trace file(s), top "
                 f"{cap.summary.top[0].kernel} ({cap.summary.top[0].share:.0%}); archive {artifact or 'not kept'}")

    def _gate(self, variant: ResolvedVariant, load: Any, server: ServerFacts, first: RunPlan) -> GateVerdict:
        """Ask the fixed gate prompts greedily; judge against the baseline's answers; store the evidence."""
        from cluster.analysis.correctness import correctness_rows, evaluate_gate

        model_name = self.spec.model.served_name or self.spec.model.path
        try:
            answers: GateAnswers = ray.get(load.run_gate.remote(server.base_url, model_name,
                                                                self.spec.request_timeout_s, gate_filler(self.spec),
                                                                self.spec.correctness.max_new_tokens))
        except (RayActorError, RayTaskError) as e:
            answers = GateAnswers.failed(_error_text(e)[0])
        self.gates.put(variant.name, answers)
        base = None
        if self.baseline_name and self.baseline_name != variant.name:
            baseline = self.baseline_name
            base = self.gates.wait(baseline, self.spec.health_timeout_s + 600, lambda waited_s: self.log(
                f"[{variant.name}] gate waiting {waited_s:.0f} s for the gate answers of the baseline {baseline!r} "
                "(its server is starting or answering the gate prompts)"))
        is_nextn = variant.speculative is not None and variant.speculative.uses_builtin_mtp_head
        result = evaluate_gate(answers.outputs, base.outputs if base is not None else None, answers.accept_length,
                               is_nextn, min_prefix_tokens=self.spec.correctness.min_prefix_tokens,
                               check_answers=self.spec.correctness.check_answers)
        reasons = list(result.reasons)
        under_load = answers.loaded_problems()
        reasons.extend(under_load)
        if base is None and self.baseline_name and self.baseline_name != variant.name:
            reasons.append("note: the baseline gave no gate answers, so no prefix comparison was made")
        elif base is not None and base.stored:
            reasons.append("note: prefix compared with the baseline's gate answers stored in the dataset")
        passed = result.passed and not under_load
        table = correctness_rows(self.spec.name, variant.name, variant.engine, result, answers.outputs,
                                 (passed, reasons), answers.loaded, answers.filler)
        self.store.write_variant_table("correctness", variant.name, gate_key(variant), table)
        return GateVerdict(passed, tuple(reasons), result.accept_length)

    def _baseline_answers(self, variants: list[ResolvedVariant], segments: list[tuple[ResolvedVariant, list[RunPlan]]]
                          ) -> list[tuple[ResolvedVariant, list[RunPlan]]]:
        """Make sure no gate waits on baseline answers that cannot come: on resume the baseline's stored answers
        (correctness table) are put on the board; without any, a baseline that runs now runs first, and one that
        does not run means no answers (and no wait)."""
        from cluster.loadgen.gate import answers_from_correctness_rows

        base = next((v for v in variants if v.is_baseline), None)
        if base is None or not self.spec.correctness.enabled:
            return segments
        stored = self.store.read_variant_table("correctness", base.name, gate_key(base))
        if stored is not None and stored.num_rows:
            self.gates.put(base.name, answers_from_correctness_rows(stored))
            self.log(f"[{base.name}] gate: using the baseline's {stored.num_rows} stored gate answers")
            return segments
        first = next((i for i, (v, _) in enumerate(segments) if v.name == base.name), None)
        if first is None:
            if segments:
                self.log(f"[{base.name}] gate: the baseline runs nothing now and has no stored gate answers; "
                         "other variants' gates make no prefix comparison")
            self.gates.put(base.name, None)
            return segments
        if first:
            self.log(f"[{base.name}] gate: no stored baseline answers; the baseline's remaining segment runs first")
            return [segments[first]] + segments[:first] + segments[first + 1:]
        return segments

    def _record_invalid(self, p: RunPlan, reason: str, server: ServerFacts, seg: SegmentFacts) -> None:
        row = failed_run_row(p, reason, "", server, seg, self.spec, self.git_sha)
        row = replace(row, status="invalid", failure_reason=None, invalid_reasons=reason)
        self.store.write_run(p, row, None, None)
        self._finish(p, "invalid", row)

    def _engine_alive(self, engine: Any, settle_s: float = 0.0) -> bool:
        """Whether the server runs; with settle_s, keep looking that long for a death in progress."""
        deadline = time.monotonic() + settle_s
        while True:
            try:
                alive = bool(ray.get(engine.alive.remote(), timeout=30))
            except (RayActorError, RayTaskError, GetTimeoutError):
                return False
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.2)

    def _engine_tail(self, engine: Any) -> str:
        try:
            return str(ray.get(engine.log_tail.remote(), timeout=30))
        except (RayActorError, RayTaskError, GetTimeoutError) as e:
            # the server's log is on its node, out of reach with its actor: say why (the decisive line)
            return f"[sglbench driver] the EngineActor is unreachable ({type(e).__name__}); its watchdog stops the " \
                   "server's process group"

    def _record_failed(self, p: RunPlan, reason: str, tail: str, server: Optional[ServerFacts],
                       seg: Optional[SegmentFacts]) -> None:
        if reason.startswith("server died"):
            reason = with_decisive_line(reason, tail)
        row = failed_run_row(p, reason, tail, server, seg, self.spec, self.git_sha)
        self.store.write_run(p, row, None, None)
        self._finish(p, "failed", row)

    def _finish(self, p: RunPlan, status: str, row: Optional[RunRow] = None) -> None:
        self.result.statuses[p.run_key] = status
        self.on_run(p, status)
        self.on_event(PointFinished.from_row(p, status, row))

    def _batch_rows(self, p: RunPlan) -> int:
        """Requests per batch out of a load actor: self.batch_rows, or smaller with a live watcher."""
        if not self.live:
            return self.batch_rows
        per_update = -(-p.workload.num_requests // LIVE_UPDATES_PER_WINDOW)
        return min(self.batch_rows, max(LIVE_MIN_BATCH_ROWS, per_update))

    def _teardown(self, engine: Any, loads: list[Any], pg: Any, server: Optional[ServerFacts]) -> None:
        if engine is not None:
            stopped = False
            try:
                ray.get(engine.stop.remote(), timeout=60)
                stopped = True
            except (RayActorError, RayTaskError, GetTimeoutError):
                pass
            if not stopped and server is not None:
                # the actor is gone: kill its server's process group on that node so nothing outlives it
                try:
                    ray.get(cleanup_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                        server.node_id, soft=False)).remote(server.pgid), timeout=60)
                except Exception as e:  # noqa: BLE001
                    self.log(f"cleanup of server pgid {server.pgid} failed: {e}")
        for a in [engine, *loads]:
            if a is not None:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001
                    pass
        try:
            remove_placement_group(pg)
        except Exception:  # noqa: BLE001
            pass


def gate_filler(spec: ExperimentSpec) -> int:
    """Filler requests around the gate's concurrent pass: the experiment's highest offered concurrency (closed-loop
    value, or an open loop's max_concurrency) less the gate prompts, never below 0."""
    from cluster.kernel.gate import GATE_PROMPTS
    from cluster.plan.runs import load_points

    peak = 0
    for lp in load_points(spec):
        bound = lp.value if lp.kind == "concurrency" else (lp.max_concurrency or 0)
        peak = max(peak, int(bound))
    return max(0, peak - len(GATE_PROMPTS))


def actor_name(role: str, experiment: str, variant: str) -> str:
    """Named actors let an operator (or a fault test) find a variant's actors: sglbench-<role>-<exp>-<variant>-<id>."""
    return f"sglbench-{role}-{experiment}-{variant}-{uuid.uuid4().hex[:8]}"


def res_for(v: ResolvedVariant, res: list[Any]) -> Any:
    return next(r for r in res if r.variant == v.name)


class PlacementError(EnvironmentFault):
    """A variant can never be placed on this cluster."""


def run_experiment(spec: ExperimentSpec, *, base_dir: Path, output_root: Optional[str] = None,
                   log: Optional[Callable[[str], None]] = None,
                   on_run: Optional[Callable[[RunPlan, str], None]] = None,
                   preflight: bool = True,
                   on_event: Optional[Callable[[ProgressEvent], None]] = None) -> ExperimentResult:
    """Run every planned run not already in the dataset. Ray must be initialised by the caller."""
    drv = Driver(spec, Path(base_dir), output_root, log or (lambda s: print(s, flush=True)),
                 on_run or (lambda p, s: None), on_event)
    if preflight:
        from cluster.distributed.cluster_state import remote_preflight

        drv.preflight = remote_preflight(spec, Path(base_dir))
    return drv.run()


def logical_gpus_for(spec: ExperimentSpec) -> Optional[int]:
    """A local cluster for an experiment whose servers all need no GPU (simulated, or `device: cpu`) gets logical
    GPUs (8, or the largest tp) so the placement logic (isolation, one server per node) runs exactly as on a GPU
    node; otherwise Ray detects the real GPUs."""
    from cluster.engines.registry import get_engine

    variants = expand_variants(spec)
    if variants and all(v.engine == "sim" or get_engine(v.engine).runs_on_cpu(v) for v in variants):
        return max([8] + [v.tp for v in variants])
    return None


def init_ray(address: Optional[str] = None, num_gpus: Optional[int] = None) -> None:
    """Join a running cluster (RAY_ADDRESS / --address) or start a local one bound to 127.0.0.1."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return
    addr = address or os.environ.get("RAY_ADDRESS")
    if addr:
        try:  # before Ray parses it: its parser raises bare RuntimeError/ValueError on a malformed address
            check_ray_address(addr, "--address" if address else "RAY_ADDRESS")
        except ValueError as e:
            raise UserError(str(e), field="--address" if address else "RAY_ADDRESS",
                            expected="auto, host:port or ray://host:port") from None
        from cluster.distributed.cluster_state import join_cluster

        join_cluster(addr)  # token auth: RAY_AUTH_MODE=token when only RAY_AUTH_TOKEN is set; AuthError otherwise
    else:
        if "RAY_AUTH_MODE" not in os.environ:
            # Ray 2.60 turns token auth on for every new local cluster when the mode is unset, and warns about it on
            # every run (ray/_private/authentication/authentication_token_setup.py, enable_token_auth_by_default);
            # choosing the same mode explicitly keeps the secure default and drops the warning.
            from cluster.distributed.cluster_state import reload_ray_auth_config

            os.environ["RAY_AUTH_MODE"] = "token"
            reload_ray_auth_config()
        ray.init(address="local", include_dashboard=False, dashboard_host="127.0.0.1", log_to_driver=False,
                 num_gpus=num_gpus, object_store_memory=256 * 1024**2, _node_ip_address="127.0.0.1")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cluster.distributed.driver",
                                 description="Run an sglbench experiment on the current Ray cluster.")
    ap.add_argument("experiment", help="experiment YAML")
    ap.add_argument("--address", default=None, help="Ray address (default: RAY_ADDRESS or a local cluster)")
    ap.add_argument("--output", default=None, help="dataset root (overrides the spec's output)")
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.experiment)
        init_ray(args.address, logical_gpus_for(spec))
        result = run_experiment(spec, base_dir=Path.cwd(), output_root=args.output)
    except Exception as e:  # noqa: BLE001 - the error tree maps to exit codes; anything else is reported as a bug
        return report_error(e, sys.stderr)
    counts = result.counts()
    # a Ray job's log (what `sglbench submit` follows) ends with the same tables `sglbench run` prints, then one
    # machine-readable line
    from cluster.commands.results import print_run_summary

    print(f"dataset: {result.dataset_root}/{spec.name}  runs: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())),
          flush=True)
    try:
        print_run_summary(result.dataset_root, spec, counts)  # False: no run recorded (said on stderr)
    except SglbenchError as e:  # the tables could not be read: said, and the job's JSON line still follows
        report_error(e, sys.stderr)
    print(json.dumps({"dataset_root": result.dataset_root, "counts": counts, "skipped": result.skipped}), flush=True)
    return 0 if counts.get("failed", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
