"""One segment: a variant's server started once on its placement group, its gate, its planned runs and capacity
searches measured on it in order, its kernel profile, then teardown."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, placement_group

from cluster.analysis.correctness import gate_failed_reason, only_acceptance_floor
from cluster.config.experiment import ExperimentSpec
from cluster.kernel.run_facts import GateVerdict, SegmentFacts, ServerRecord
from cluster.distributed.capacity_search import CapacitySearches
from cluster.distributed.eval_stage import EvalStage
from cluster.distributed.gate_stage import GateStage
from cluster.distributed.deployment_handle import DeploymentStartError, new_deployment
from cluster.distributed.handles import LoadHandle, new_engine_actor, new_load_actor
from cluster.distributed.point_run import PointRunner, ServerStart, SharedNodes
from cluster.distributed.profile_stage import profile_variant
from cluster.distributed.progress import ProgressEvent, ServerState
from cluster.distributed.repeat_stage import RepeatsUntilSure
from cluster.distributed.run_records import Death, ExperimentResult, RunRecorder, error_text
from cluster.distributed.saturation_stop import SaturationStop
from cluster.distributed.teardown import teardown
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.plan.runs import launch_form
from cluster.plan.schedule import Reservation
from cluster.tuning.artifacts import TuningArtifact
from cluster.tuning.stage import ARTIFACT_KINDS, with_artifact

PLACEMENT_PROGRESS_S = 10.0


class SegmentRunner:
    """Runs segments, one per call of `run` (from the driver's segment threads)."""

    def __init__(self, spec: ExperimentSpec, result: ExperimentResult, recorder: RunRecorder, gates: GateStage,
                 searches: CapacitySearches, log: Callable[[str], None],
                 on_event: Callable[[ProgressEvent], None], live: bool, batch_rows: int, base_dir: Path,
                 log_dir: Path, artifacts: dict[str, TuningArtifact], tuning_failures: dict[str, str]) -> None:
        self.spec = spec
        self.result = result
        self.recorder = recorder
        self.gates = gates
        self.searches = searches
        self.log = log
        self.on_event = on_event
        self.base_dir = base_dir
        self.log_dir = log_dir
        self.artifacts = artifacts
        """variant → its tuning artifact (tuning/stage.py), from the tuning stage."""
        self.tuning_failures = tuning_failures
        self.shared = SharedNodes()
        self.load_places: dict[str, tuple[PlacementGroup, int]] = {}
        """A deployment's variant → the group and first bundle of its load actors (its gateway's is the first)."""
        self.repeats: Optional[RepeatsUntilSure] = None
        """Repeats until sure (repeats: {until}): more repeats of each point after the planned runs."""
        self.points = PointRunner(spec, recorder.store, recorder, self.shared, log, on_event, live, batch_rows,
                                  self.new_load_actor)
        self.saturation = SaturationStop(recorder.store, log) if spec.load.stop_when_saturated else None
        self.evals = self.points.evals = EvalStage(spec, recorder.store, base_dir, log)

    def wait_pg(self, pg: PlacementGroup, variant: str, gpus: int) -> None:
        t0 = time.monotonic()
        while True:
            ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_PROGRESS_S)
            if ready:
                return
            free = ray.available_resources().get("GPU", 0)
            self.log(f"[{variant}] waiting {time.monotonic() - t0:.0f} s for {gpus} GPU(s) on one node "
                     f"({free:g} GPU free cluster-wide; other variants are still running)")

    def new_load_actor(self, pg: PlacementGroup, variant: ResolvedVariant, index: int) -> LoadHandle:
        place = self.load_places.get(variant.name)
        if place is not None:  # a deployment's load bundles: after its servers', or a group of their own
            return new_load_actor(place[0], self.spec.name, variant, index, str(self.base_dir), place[1])
        return new_load_actor(pg, self.spec.name, variant, index, str(self.base_dir))

    def _deployment_groups(self, variant: ResolvedVariant, r: Reservation, n_load: int
                           ) -> tuple[PlacementGroup, Optional[PlacementGroup], int]:
        """A deployment's placement: one group with a bundle per server process (Ray pins each one's GPUs); packed
        on one node, the gateway's and load actors' CPU bundles join it (first load bundle index returned); spread
        (a server across nodes, or one that does not fit a node), they get a group of their own."""
        gpu = [{"GPU": float(g)} for g in r.bundles]
        load = [{"CPU": float(r.cpus_for_load)}] * n_load
        name = f"sglbench-{self.spec.name}-{variant.name}"
        if r.strategy == "STRICT_PACK":
            return placement_group(gpu + load, strategy="STRICT_PACK", name=name), None, len(gpu)
        return (placement_group(gpu, strategy=r.strategy, name=name),
                placement_group(load, strategy="STRICT_PACK", name=name + "-load"), 0)

    def _record_all_failed(self, runs: list[RunPlan], reason: str, tail: str) -> None:
        for p in runs:
            self.recorder.failed(p, reason, tail, None, None)

    def run(self, variant: ResolvedVariant, runs: list[RunPlan], todo: set[str], r: Reservation,
            seg: SegmentFacts) -> None:
        """Start the variant's server, gate it, measure its runs still to do (and its searches), tear it down."""
        planned = runs  # a capacity search goes on in a segment whose planned runs are all done
        runs = [p for p in runs if p.run_key in todo]
        n_load = self.spec.load.actors_per_server
        self.gates.wait_baseline_placed(variant)
        load_pg: Optional[PlacementGroup] = None
        if r.bundles:
            pg, load_pg, first = self._deployment_groups(variant, r, n_load)
            self.load_places[variant.name] = (load_pg or pg, first)
        else:  # an endpoint reserves no GPU: its group is its load actors' alone (handles.load_bundle)
            bundles = ([{"GPU": float(r.gpus)}] if r.gpus else []) + [{"CPU": float(r.cpus_for_load)}] * n_load
            pg = placement_group(bundles, strategy="STRICT_PACK", name=f"sglbench-{self.spec.name}-{variant.name}")
        s = ServerStart(variant, pg, seg, load_pg=load_pg)
        try:
            self._serve(s, planned, runs, r.gpus, n_load)
        finally:
            if not self.gates.board.has(variant.name):
                # whatever ended this segment (an unexpected error included), no other variant's gate may wait
                # health_timeout_s + 600 s for answers this one will never give
                self.gates.board.put(variant.name, None)
            self.shared.leave(variant.name)
            teardown(s.engine, s.loads, s.pg, s.server, self.log)
            if s.load_pg is not None:
                teardown(None, [], s.load_pg, None, self.log)
            self.on_event(ServerState(variant.name, "stopped"))
            if s.server is not None:
                self.result.servers[variant.name] = ServerRecord(s.server, replace(s.seg, stopped_unix_s=time.time()))

    def _serve(self, s: ServerStart, planned: list[RunPlan], runs: list[RunPlan], gpus: int, n_load: int) -> None:
        variant = s.variant
        art = self.artifacts.get(variant.name)
        if variant.tuning is not None and variant.tuning.kind in ARTIFACT_KINDS and art is None:
            reason = self.tuning_failures.get(variant.name, "no tuning artifact was produced")
            self._record_all_failed(runs, f"tuning stage failed: {reason}", "")
            self.gates.board.put(variant.name, None)
            return
        self.on_event(ServerState(variant.name, "placing", f"{gpus} GPU(s)"))
        self.wait_pg(s.pg, variant.name, gpus)
        if s.load_pg is not None:
            self.wait_pg(s.load_pg, variant.name, 0)
        self.on_event(ServerState(variant.name, "starting"))
        self.gates.placed(variant)
        launched = launch_form(self.spec, variant, self.result.dataset_root, self.base_dir)  # absolute config path
        if variant.launched and variant.deployment is not None:  # a deployment: an EngineActor per process
            place = self.load_places[variant.name]
            s.engine = new_deployment(s.pg, self.spec.name, with_artifact(launched, art),
                                      self.spec.engines.get(variant.engine), str(self.log_dir), place[1], place[0])
        else:
            s.engine = new_engine_actor(s.pg, self.spec.name, with_artifact(launched, art),
                                        self.spec.engines.get(variant.engine), str(self.log_dir))
        # created now, not once the server is healthy: a load actor's worker process starts while the server does
        # (1.5 s per server start on a 2-core machine; teardown kills them whether or not the server came up)
        s.loads = [self.new_load_actor(s.pg, variant, i) for i in range(n_load)]
        try:
            port = variant.args.get("port")
            s.server = server = s.engine.start(self.spec.health_timeout_s,
                                               int(port) if isinstance(port, (int, str)) else None)
        except (RayTaskError, RayActorError, DeploymentStartError) as e:
            reason, tail = error_text(e)
            self.log(f"[{variant.name}] server failed to start: {reason}")
            self.on_event(ServerState(variant.name, "failed", reason))
            self._record_all_failed(runs, f"server start failed: {reason}", tail)
            self.gates.board.put(variant.name, None)
            return
        if art is not None:
            s.seg = replace(s.seg, tuning_artifact=art.hash)
        self.result.servers[variant.name] = ServerRecord(server, s.seg)
        self.shared.enter(variant.name, server.node_id)
        for proc in server.processes:  # a deployment: each process where it runs, then its front door below
            f = proc.facts
            self.log(f"[{variant.name}] {proc.name} healthy in {f.startup_s:.1f} s on GPUs "
                     f"{f.cuda_visible_devices or '-'} (pid {f.pid}, {f.base_url}, log {f.hostname}:{f.log_path})")
        if server.processes:
            self.log(f"[{variant.name}] serves at {server.base_url} ({len(server.processes)} processes)")
        elif server.launched:
            self.log(f"[{variant.name}] server healthy in {server.startup_s:.1f} s on GPUs "
                     f"{server.cuda_visible_devices or '-'} (pid {server.pid}, port {server.port}, log "
                     f"{server.hostname}:{server.log_path})")
        else:
            self.log(f"[{variant.name}] endpoint {server.base_url} answers (already running, not launched by "
                     f"sglbench; cache flush {'allowed' if variant.endpoint and variant.endpoint.flush_cache else 'not allowed'})")
        self.on_event(ServerState(variant.name, "healthy", f"in {server.startup_s:.1f} s"))
        niceness = server.environment.get("server_niceness")
        if isinstance(niceness, int) and niceness > 0:
            self.log(f"[{variant.name}] warning: the server runs at niceness {niceness} (Ray's worker niceness on "
                     f"{server.hostname}): any normal-priority process on that node takes the CPU first, so its "
                     f"figures may not be the server's alone; start that cluster with RAY_worker_niceness=0")
        s.seg = replace(s.seg, load_actor_cuda_visible_devices=s.loads[0].visible_gpus(),
                        load_actor_node_id=s.loads[0].node_id(), load_actors=n_load)
        self.result.servers[variant.name] = ServerRecord(server, s.seg)
        if self.spec.correctness.enabled:
            self.on_event(ServerState(variant.name, "gate"))
        # the eval alone first: the gate's loaded pass leaves requests running, which would batch with it
        alone = self.evals.ask_alone(s.loads[0], server)
        gate = self.gates.run(variant, s.loads[0], server) if self.spec.correctness.enabled \
            else GateVerdict(True, ("correctness gate disabled in the spec",), skipped=True)
        s.seg = replace(s.seg, correctness=gate)
        self.evals.record_alone(variant, alone, gate)  # whatever the gate's verdict: its evidence
        self.result.servers[variant.name] = ServerRecord(server, s.seg)
        if not gate.passed:
            self.log(f"[{variant.name}] correctness gate FAILED: {'; '.join(gate.reasons)}")
            if not only_acceptance_floor(gate_failed_reason(gate.reasons)):
                self.on_event(ServerState(variant.name, "failed", "correctness gate failed"))
                for p in runs:
                    self.recorder.invalid(p, gate_failed_reason(gate.reasons), server, s.seg)
                return
            # the floor alone (a head that drafts but is rejected): measured for its acceptance health, every run
            # invalid by build_run_row (docs/acceptance-health.md)
            self.log(f"[{variant.name}] measured anyway for its acceptance health; its runs are invalid")
        self.on_event(ServerState(variant.name, "measuring"))
        death: Optional[Death] = None
        for p in runs:
            if death is not None:
                self.recorder.failed(p, f"server died during an earlier run of this variant ({death.where})",
                                     death.tail, server, s.seg)
                continue
            why = self.saturation.skip(p) if self.saturation is not None else None
            if why is not None:  # recorded as not measured, with the reason (a resubmission does not retry it)
                self.recorder.invalid(p, why, server, s.seg)
                continue
            death = self.points.run(p, s)
        # a variant measured only for its acceptance health (gate failed on the floor) gets its planned runs alone
        if death is None and self.repeats is not None and gate.passed:
            death = self.repeats.run(variant, planned, lambda p: self.points.run(p, s))
        if death is None and self.spec.load.search is not None and gate.passed:
            death = self.searches.run(variant, planned, server, lambda p: self.points.run(p, s))
        if variant.profile is not None and death is None and runs and gate.passed:
            profile_variant(self.spec, self.recorder.store, self.log, variant, s.engine, s.loads[0], server, runs[0])
