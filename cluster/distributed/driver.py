"""Ray driver: plans an experiment, places one server per variant segment, drives load, writes the dataset.

Entry point for `ray job submit ... -- python -m cluster.distributed.driver EXPERIMENT.yaml`: run as a program it
hands over to `cluster.commands.job`, which also prints the end-of-run tables (commands sit above this package).
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional

import ray

from cluster.config.experiment import ExperimentSpec
from cluster.config.locations import check_ray_address
from cluster.config.repeats import RepeatsUntil
from cluster.config.secrets import masked_spec_json
from cluster.kernel.run_facts import SegmentFacts
from cluster.dataset.store import DatasetStore
from cluster.distributed.capacity_search import CapacitySearches
from cluster.distributed.cluster_state import gpu_nodes
from cluster.distributed.gate_stage import GateStage
from cluster.distributed.handles import LOAD_ACTOR_CPUS
from cluster.distributed.progress import ProgressEvent, ignore
from cluster.distributed.repeat_stage import RepeatsUntilSure
from cluster.distributed.run_records import ExperimentResult, RunRecorder
from cluster.distributed.segment import SegmentRunner
from cluster.errors import EnvironmentFault, UserError
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.plan.inputs import resolve_output_root
from cluster.plan.runs import expand_variants, make_plan, server_segments
from cluster.plan.deployment import variant_reservation
from cluster.plan.schedule import Reservation, unplaceable
from cluster.probe.checkpoint import ProbeReport
from cluster.tuning.artifacts import TuningArtifact
from cluster.version import __version__

WORKER_NICENESS_ENV = "RAY_worker_niceness"
"""The raylet reads the niceness of the workers it starts from this variable (Ray 2.60 RayConfig worker_niceness)."""


class PlacementError(EnvironmentFault):
    """A variant can never be placed on this cluster."""


def _git_sha(base_dir: Path) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(base_dir), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


class Driver:
    def __init__(self, spec: ExperimentSpec, base_dir: Path, output_root: Optional[str],
                 log: Callable[[str], None], on_run: Callable[[RunPlan, str], None],
                 on_event: Optional[Callable[[ProgressEvent], None]] = None) -> None:
        self.spec = spec
        self.base_dir = base_dir
        self.root = resolve_output_root(output_root or spec.output, base_dir)
        self.store = DatasetStore(self.root, spec.name)
        self.log = log
        self.on_run = on_run
        self.on_event = on_event or ignore
        """Progress events (cluster/distributed/progress.py) for a live view, from the segment threads."""
        self.live = on_event is not None
        self.result = ExperimentResult(dataset_root=self.root)
        self.git_sha = _git_sha(base_dir)
        self.log_dir = Path(os.environ.get("SGLBENCH_LOG_DIR", "/tmp/sglbench-logs")) / spec.name
        self.tuning_failures: dict[str, str] = {}
        self.batch_rows = 4096
        """Finished requests per Arrow batch leaving a load actor."""
        self.preflight: Optional[dict[str, ProbeReport]] = None
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
        from cluster.plan.model_rules import ModelFacts
        from cluster.plan.sweep_collapse import collapse_fp4_duplicates

        facts = {p: ModelFacts.from_report(r) for p, r in (self.preflight or {}).items()}
        kept, notes = collapse_fp4_duplicates(expand_variants(self.spec), facts)
        for line in notes:
            self.log(f"note: {line}")
        names = {v.name for v in kept}
        return make_plan(self.spec, keep=lambda v: v.name in names)

    def _checkpoint_identity(self, variant: ResolvedVariant) -> SegmentFacts:
        """A segment's first facts: the node probe's fingerprint and hub revision of the variant's checkpoint (None
        without a probe)."""
        report = (self.preflight or {}).get(variant.model_path)
        if report is None:
            return SegmentFacts()
        return SegmentFacts(checkpoint_fingerprint=report.fingerprint or None, hub_revision=report.hub_revision or None)

    def run(self) -> ExperimentResult:
        """Run what is left of the experiment while holding its dataset's lock (DatasetLocked naming the holder
        when another driver writes it); the lock is released on return and on an exception."""
        with self.store.exclusive():
            return self._run()

    def _run(self) -> ExperimentResult:
        plans = self._plans()
        nodes = gpu_nodes()
        node_gpus = [n.gpus for n in nodes]
        gpn = max(node_gpus, default=0)
        variants = expand_variants(self.spec)
        res = [variant_reservation(v, self.spec.isolation, gpn, LOAD_ACTOR_CPUS) for v in variants]
        problems = unplaceable(res, node_gpus)
        if problems:
            raise PlacementError("; ".join(problems))
        todo = self.runs_to_do(plans)
        searches = CapacitySearches(self.spec, self.store, self.result, self.log, len(plans))
        until = self.spec.repeats
        repeats = RepeatsUntilSure(self.spec, until, self.store, self.result, self.log, len(plans)) \
            if isinstance(until, RepeatsUntil) else None
        meta: dict[str, Any] = {  # free-form JSON stored as given: experiment.json
            "spec": masked_spec_json(self.spec.model_dump(mode="json")),
            "sglbench_version": __version__,
            "git_sha": self.git_sha,
            "nodes": nodes,
            "planned_runs": len(plans),
            "started_unix_s": time.time(),
            "preflight": None if self.preflight is None else {p: r.to_json() for p, r in self.preflight.items()},
        }
        self.store.write_experiment_meta(meta)
        segments = [(v, runs) for v, runs in server_segments(plans)
                    if any(r.run_key in todo for r in runs) or searches.pending(v, runs)
                    or (repeats is not None and repeats.pending(v, runs))]
        # executed in the planned order (make_plan puts the baseline's first segment first: a plan rule)
        gates = GateStage(self.spec, self.store, self.log)
        gates.baseline_name = next((v.name for v in variants if v.is_baseline), None)
        segments = gates.baseline_answers(variants, segments)
        artifacts: dict[str, TuningArtifact] = {}
        if segments:
            from cluster.distributed.tuning_stage import run_tuning_stage

            needed = [v for v in variants if any(seg[0].name == v.name for seg in segments)]
            artifacts = run_tuning_stage(self.spec, needed, self.root, None, self.log, self.tuning_failures)
        if not segments:
            self.log("every planned run is already in the dataset; nothing to do")
            return self.result
        self.log(f"server logs: {self.log_dir}/<variant>-<unix ms>.log on the node that ran each server "
                 "(SGLBENCH_LOG_DIR)")
        recorder = RunRecorder(self.spec, self.store, self.result, self.git_sha, self.on_run, self.on_event)
        runner = SegmentRunner(self.spec, self.result, recorder, gates, searches, self.log, self.on_event, self.live,
                               self.batch_rows, self.base_dir, self.log_dir, artifacts, self.tuning_failures)
        runner.repeats = repeats
        # node isolation: at most one server per node at a time; gpus: as many as fit (Ray queues the rest)
        workers = max(1, len(nodes)) if self.spec.isolation == "node" else max(1, len(segments))
        with ThreadPoolExecutor(max_workers=min(workers, 64), thread_name_prefix="segment") as pool:
            futs = [pool.submit(runner.run, v, runs, todo, _reservation_of(v, res), self._checkpoint_identity(v))
                    for v, runs in segments]
            for f in futs:
                f.result()
        if repeats is not None:  # where every point's repeats stopped, and why (resumed counts included)
            meta["repeats_until"] = [asdict(f) for f in repeats.facts(variants, plans)]
            self.store.write_experiment_meta(meta)
        return self.result


def _reservation_of(v: ResolvedVariant, res: list[Reservation]) -> Reservation:
    return next(r for r in res if r.variant == v.name)


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
        from cluster.node.preflight import check_endpoints

        check_endpoints(expand_variants(spec))  # where the keys are read: a job's driver as `sglbench run`'s

        drv.preflight = remote_preflight(spec, Path(base_dir), output_root=drv.root)
    return drv.run()


def logical_gpus_for(spec: ExperimentSpec) -> Optional[int]:
    """A local cluster for an experiment whose servers all need no GPU (simulated, or `device: cpu`) gets logical
    GPUs (8, or the largest tp) so the placement logic (isolation, one server per node) runs exactly as on a GPU
    node; otherwise Ray detects the real GPUs."""
    from cluster.engines.registry import get_engine

    variants = expand_variants(spec)
    if variants and all(not v.launched or get_engine(v.engine).runs_on_cpu(v) for v in variants):
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
        # Ray starts worker processes at niceness 15 by default, and the servers and load generators they start
        # inherit it: beside any busy normal-priority process they got a few percent of a core (the demo's
        # simulated steps ran 30x slow beside two CPU burners). A cluster sglbench starts runs them at 0.
        os.environ.setdefault(WORKER_NICENESS_ENV, "0")
        ray.init(address="local", include_dashboard=False, dashboard_host="127.0.0.1", log_to_driver=False,
                 num_gpus=num_gpus, object_store_memory=256 * 1024**2, _node_ip_address="127.0.0.1")


if __name__ == "__main__":
    # job manifests run this module; the job's entry point lives with the commands because it ends with the tables
    # `sglbench run` prints (rendered there, above this package), so hand over to it by name
    import runpy

    runpy.run_module("cluster.commands.job", run_name="__main__", alter_sys=True)
