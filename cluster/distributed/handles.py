"""Typed handles on the driver's actors: each method makes the remote call and returns the actor's typed answer."""

from __future__ import annotations

import os
import time
import uuid
from typing import TYPE_CHECKING, Any, Iterator, Optional, cast

import ray
from ray.actor import ActorHandle
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cluster.kernel.run_facts import ServerFacts
from cluster.distributed.actors import (EngineActor, EngineActorImpl, LoadActor, LoadActorImpl, LoadMessage, Prepared,
                                        StopResult)
from cluster.engines.base import api_key_of
from cluster.kernel.runs import ResolvedVariant
from cluster.kernel.window_job import WindowJob
from cluster.kernel.eval_task import EvalAnswer, EvalItem
from cluster.loadgen.gate import GateAnswers
from cluster.telemetry.profile import ProfileCapture
from cluster.kernel.telemetry_capture import TelemetryCapture

if TYPE_CHECKING:
    from ray import ObjectRefGenerator

    from cluster.config.engines import EngineLauncher

LOAD_ACTOR_CPUS = 1.0


def actor_name(role: str, experiment: str, variant: str) -> str:
    """Named actors let an operator (or a fault test) find a variant's actors: sglbench-<role>-<exp>-<variant>-<id>."""
    return f"sglbench-{role}-{experiment}-{variant}-{uuid.uuid4().hex[:8]}"


class EngineHandle:
    """The EngineActor of one server start (its server subprocess, telemetry and profiler)."""

    def __init__(self, actor: "ActorHandle[EngineActorImpl]") -> None:
        self.actor = actor
        self._m: Any = actor  # Ray 2.60 types `.method.remote()` as list[Never]: this class's methods give the types

    def start(self, health_timeout_s: float, port: Optional[int]) -> ServerFacts:
        got: ServerFacts = ray.get(self._m.start.remote(health_timeout_s, port))
        return got

    def actors(self) -> list[Any]:
        """Every Ray actor behind this handle (one; a deployment's: one per process and its gateway)."""
        return [self.actor]

    def dead_note(self) -> str:
        """What a failure reason adds to "server died" to name what died: nothing for one server; a deployment's
        dead processes (DeploymentHandle)."""
        return ""

    def alive(self, settle_s: float = 0.0) -> bool:
        """Whether the server runs (False when its actor is unreachable); with settle_s, keep looking that long for
        a death in progress."""
        deadline = time.monotonic() + settle_s
        while True:
            try:
                alive = bool(ray.get(self._m.alive.remote(), timeout=30))
            except (RayActorError, RayTaskError, GetTimeoutError):
                return False
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.2)

    def log_tail(self) -> str:
        """The server log's tail, or why it is out of reach."""
        try:
            return str(ray.get(self._m.log_tail.remote(), timeout=30))
        except (RayActorError, RayTaskError, GetTimeoutError) as e:
            # the server's log is on its node, out of reach with its actor: say why (the decisive line)
            return f"[sglbench driver] the EngineActor is unreachable ({type(e).__name__}); its watchdog stops the " \
                   "server's process group"

    def restart_reason(self) -> Optional[str]:
        """An endpoint's restart since it was first checked (None: none seen, or not an endpoint)."""
        got: Optional[str] = ray.get(self._m.restart_reason.remote(), timeout=60)
        return got

    def stop(self, timeout_s: float = 60) -> StopResult:
        got: StopResult = ray.get(self._m.stop.remote(), timeout=timeout_s)
        return got

    def telemetry_start(self, rate_hz: float) -> Optional[str]:
        """Start sampling the server's GPUs; why not, when there is nothing to sample."""
        got: Optional[str] = ray.get(self._m.telemetry_start.remote(rate_hz), timeout=60)
        return got

    def telemetry_stop(self) -> Optional[TelemetryCapture]:
        """The window's GPU samples (None when the actor is gone: the run's other evidence decides)."""
        try:
            got: Optional[TelemetryCapture] = ray.get(self._m.telemetry_stop.remote(), timeout=60)
        except (RayActorError, RayTaskError, GetTimeoutError):
            return None
        return got

    def profile_start(self, steps: int) -> Optional[str]:
        got: Optional[str] = ray.get(self._m.profile_start.remote(steps), timeout=120)
        return got

    def profile_collect(self, wait_s: float, max_archive_bytes: int) -> ProfileCapture:
        got: ProfileCapture = ray.get(self._m.profile_collect.remote(wait_s, max_archive_bytes), timeout=600)
        return got


class LoadStream:
    """One shard's window, already running on its load actor: iterating it yields its messages as they come."""

    def __init__(self, gen: "ObjectRefGenerator[LoadMessage]") -> None:
        self._gen = gen

    def __iter__(self) -> Iterator[LoadMessage]:
        for ref in self._gen:
            item: LoadMessage = ray.get(ref)
            yield item


class LoadHandle:
    """A LoadActor co-located with its server: warmup and flush, the gate's prompts, one shard of each window."""

    def __init__(self, actor: "ActorHandle[LoadActorImpl]") -> None:
        self.actor = actor
        self._m: Any = actor  # as in EngineHandle

    def prepare(self, job: WindowJob, warmup_requests: int, timeout_s: Optional[float] = None,
                flush_cache: bool = True) -> Prepared:
        got: Prepared = ray.get(self._m.prepare.remote(job, warmup_requests, 60.0, flush_cache), timeout=timeout_s)
        return got

    def run_gate(self, base_url: str, model_name: str, timeout_s: float, filler: Optional[int],
                 cap: Optional[int]) -> GateAnswers:
        got: GateAnswers = ray.get(self._m.run_gate.remote(base_url, model_name, timeout_s, filler, cap))
        return got

    def run_eval_alone(self, base_url: str, model_name: str, items: tuple[EvalItem, ...], max_tokens: int,
                       timeout_s: float) -> tuple[EvalAnswer, ...]:
        got: tuple[EvalAnswer, ...] = ray.get(self._m.run_eval_alone.remote(base_url, model_name, items, max_tokens,
                                                                           timeout_s))
        return got

    def visible_gpus(self) -> str:
        return str(ray.get(self._m.visible_gpus.remote()))

    def node_id(self) -> str:
        return str(ray.get(self._m.node_id.remote()))

    def stream(self, job: WindowJob) -> LoadStream:
        """Start this shard's window now (streaming its record batches); read it by iterating the result."""
        gen: "ObjectRefGenerator[LoadMessage]" = self._m.run_point_stream.options(num_returns="streaming").remote(job)
        return LoadStream(gen)


def new_engine_actor(pg: PlacementGroup, experiment: str, variant: ResolvedVariant,
                     launcher: "Optional[EngineLauncher]", log_dir: str) -> EngineHandle:
    """The variant's EngineActor on the placement group's GPU bundle (its server not started yet)."""
    if variant.endpoint is not None:  # nothing to launch: no GPU, no bundle (the placement group is the load's)
        actor: "ActorHandle[EngineActorImpl]" = EngineActor.options(
            name=actor_name("engine", experiment, variant.name), num_gpus=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
            runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}},
        ).remote(variant, launcher, log_dir, "127.0.0.1", None, api_key_for(variant))
        return EngineHandle(actor)
    actor = EngineActor.options(
        name=actor_name("engine", experiment, variant.name),
        num_gpus=variant.tp,
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
    ).remote(variant, launcher, log_dir, "127.0.0.1", None)
    return EngineHandle(actor)


def api_key_for(variant: ResolvedVariant) -> Optional[str]:
    """The key the variant's requests carry: an endpoint's from its named environment variable (read here, on the
    driver), else the variant's --api-key."""
    ep = variant.endpoint
    if ep is not None:
        return os.environ.get(ep.api_key_env) if ep.api_key_env else None
    return api_key_of(variant.args)


def load_bundle(variant: ResolvedVariant, index: int) -> int:
    """The placement group bundle of load actor `index`: after the server's GPU bundle, or first for an endpoint
    (whose group holds no GPU bundle)."""
    return index if variant.endpoint is not None else 1 + index


def new_load_actor(pg: PlacementGroup, experiment: str, variant: ResolvedVariant, index: int,
                   base_dir: str, first_bundle: Optional[int] = None) -> LoadHandle:
    """Load actor `index` of a server, on the placement group's CPU bundle 1 + index (`first_bundle` + index for a
    deployment), seeing no GPU."""
    actor = cast("ActorHandle[LoadActorImpl]", LoadActor.options(
        name=actor_name("load", experiment, variant.name),
        num_cpus=LOAD_ACTOR_CPUS,
        num_gpus=0,
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=(
            load_bundle(variant, index) if first_bundle is None else first_bundle + index)),
        runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}},
    ).remote(variant.engine, base_dir, variant.model_path, api_key_for(variant)))
    return LoadHandle(actor)
