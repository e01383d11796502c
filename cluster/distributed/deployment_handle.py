"""A deployment of several processes driven as one server: an EngineActor per server process (each on its own
bundle of the deployment's placement group) and the gateway in front, started, health-checked, watched and torn
down together; one process failing fails the deployment, named, with its log tail."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Optional, Sequence

import ray
from ray.actor import ActorHandle
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cluster.config.deployment import NodesDeployment, PDDeployment
from cluster.config.engines import EngineLauncher
from cluster.engines.gateway import PrefillWorker
from cluster.kernel.deployment import Assigned, ProcessRole, deployment_processes
from cluster.kernel.run_facts import ProcessFacts, ServerFacts
from cluster.kernel.runs import ResolvedVariant
from cluster.kernel.telemetry_capture import TelemetryCapture
from cluster.plan.deployment import launched_process
from cluster.server.process import ServerStartError
from cluster.telemetry.profile import ProfileCapture
from cluster.distributed.actors import EngineActor, EngineActorImpl, StopResult
from cluster.distributed.gateway_actor import GATEWAY_NAME, GatewayActor, GatewayActorImpl, GatewayWorkers
from cluster.distributed.handles import EngineHandle, actor_name


START_MARGIN_S = 120.0
"""How much longer than its own health timeout a process's start may take before the driver gives up on its actor
(reading infos and the environment after health)."""


class DeploymentStartError(ServerStartError):
    """A process of a deployment did not start (its name first in the message, its log tail attached); every
    process already started has been stopped."""


class DeploymentHandle(EngineHandle):
    """The EngineHandle of a deployment: the same calls, made on every process (alive: all alive; log tail: the
    dead ones', named; stop: gateway first, then every server)."""

    def __init__(self, variant: ResolvedVariant, engines: Sequence[tuple[ProcessRole, EngineHandle]],
                 gateway: "Optional[ActorHandle[GatewayActorImpl]]") -> None:
        super().__init__(engines[0][1].actor)
        self.variant = variant
        self.engines = list(engines)
        self.gateway = gateway
        self._g: Any = gateway
        self._boot: dict[str, Optional[int]] = {}
        """A prefill server's bootstrap port as assigned at start, by process name (what the gateway is told)."""

    def actors(self) -> list[Any]:
        return [h.actor for _, h in self.engines] + ([self.gateway] if self.gateway is not None else [])

    def _assign(self) -> None:
        """Choose each process's ports and host: its servers listen on loopback when the whole deployment is on one
        node, else on each node's IP so the gateway and the other ranks reach them."""
        nodes = [ray.get(h._m.node.remote(), timeout=60) for _, h in self.engines]
        one_node = len({n for n, _ in nodes}) == 1
        d = self.variant.deployment
        rank0_ip = nodes[0][1]
        init: Optional[str] = None
        if isinstance(d, NodesDeployment):  # rank 0 listens for the others on its node's address
            port = d.dist_init_port or int(ray.get(self.engines[0][1]._m.free_port_on.remote(rank0_ip), timeout=60))
            init = f"{rank0_ip}:{port}"
        for (p, h), (_, ip) in zip(self.engines, nodes):
            host = "127.0.0.1" if one_node else ip
            boot: Optional[int] = None
            if p.role == "prefill" and isinstance(d, PDDeployment):
                boot = d.bootstrap_port or int(ray.get(h._m.free_port_on.remote(host), timeout=60))
            self._boot[p.name] = boot
            pv = launched_process(self.variant, p, Assigned(bootstrap_port=boot, dist_init_addr=init))
            ray.get(h._m.relaunch_as.remote(pv, host), timeout=60)

    def start(self, health_timeout_s: float, port: Optional[int]) -> ServerFacts:
        """Start every server process at once (the ranks of one server must, to meet), then the gateway over
        them; the deployment's facts: the front door's, with each process's in `processes`."""
        self._assign()
        futs = [(p, h._m.start.remote(health_timeout_s, None)) for p, h in self.engines]
        started: list[tuple[ProcessRole, ServerFacts]] = []
        first_err: Optional[tuple[ProcessRole, BaseException]] = None
        for p, f in futs:
            try:  # each start waits for its own health up to health_timeout_s (then raises): the margin is Ray's
                started.append((p, ray.get(f, timeout=health_timeout_s + START_MARGIN_S)))
            except (RayTaskError, RayActorError, GetTimeoutError) as e:
                first_err = first_err or (p, e)
        if first_err is not None:
            self._stop_all()
            p, err = first_err
            cause = getattr(err, "cause", None) or err
            tail = getattr(cause, "log_tail", "") or self._tail_of(p)
            raise DeploymentStartError(f"{self.variant.name} {p.name} failed to start: {_one_line(cause)}", tail, None)
        gateway_facts: Optional[ServerFacts] = None
        if self.gateway is not None:
            try:
                gateway_facts = ray.get(self._g.start.remote(self._workers(started), health_timeout_s),
                                        timeout=health_timeout_s + START_MARGIN_S)
            except (RayTaskError, RayActorError, GetTimeoutError) as e:
                self._stop_all()
                cause = getattr(e, "cause", None) or e
                raise DeploymentStartError(f"{self.variant.name} {GATEWAY_NAME} failed to start: {_one_line(cause)}",
                                           getattr(cause, "log_tail", ""), None) from None
        procs = tuple(ProcessFacts(p.name, p.role, f) for p, f in started)
        if gateway_facts is not None:
            procs += (ProcessFacts(GATEWAY_NAME, GATEWAY_NAME, gateway_facts),)
        front = next(f for p, f in started if p.serves_http)
        door = gateway_facts or front
        return replace(front, base_url=door.base_url, port=door.port, startup_s=max(
            f.startup_s for f in (*[f for _, f in started], door)), processes=procs)

    def _workers(self, started: Sequence[tuple[ProcessRole, ServerFacts]]) -> GatewayWorkers:
        if isinstance(self.variant.deployment, PDDeployment):
            prefill = tuple(PrefillWorker(f.base_url, self._boot.get(p.name)) for p, f in started
                            if p.role == "prefill")
            return GatewayWorkers(prefill=prefill, decode=tuple(f.base_url for p, f in started if p.role == "decode"))
        return GatewayWorkers(urls=tuple(f.base_url for _, f in started))

    def dead(self) -> list[str]:
        """The processes not running now (their actor unreachable counts as dead), by name."""
        out = [p.name for p, h in self.engines if not EngineHandle.alive(h)]
        if self.gateway is not None:
            try:
                if not ray.get(self._g.alive.remote(), timeout=30):
                    out.append(GATEWAY_NAME)
            except (RayActorError, RayTaskError, GetTimeoutError):
                out.append(GATEWAY_NAME)
        return out

    def dead_note(self) -> str:
        """` (dead: replica-1)`: the processes of this deployment found not running, for a failure reason."""
        dead = self.dead()
        return f" (dead: {', '.join(dead)})" if dead else ""

    def alive(self, settle_s: float = 0.0) -> bool:
        deadline = time.monotonic() + settle_s
        while True:
            if self.dead():
                return False
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.2)

    def _tail_of(self, p: ProcessRole) -> str:
        h = next(h for q, h in self.engines if q.name == p.name)
        return EngineHandle.log_tail(h)

    def log_tail(self) -> str:
        """The dead processes' log tails, each under its name (every process's last lines when none is dead)."""
        dead = set(self.dead())
        parts: list[str] = []
        for p, h in self.engines:
            if not dead or p.name in dead:
                parts.append(f"[{self.variant.name} {p.name}] " + ("died: " if p.name in dead else "") +
                             EngineHandle.log_tail(h)[-4000:])
        if self.gateway is not None and (not dead or GATEWAY_NAME in dead):
            try:
                tail = str(ray.get(self._g.log_tail.remote(), timeout=30))
            except (RayActorError, RayTaskError, GetTimeoutError) as e:
                tail = f"[sglbench driver] the GatewayActor is unreachable ({type(e).__name__})"
            parts.append(f"[{self.variant.name} {GATEWAY_NAME}] " + tail[-4000:])
        return "\n".join(parts)

    def restart_reason(self) -> Optional[str]:
        return None  # launched by sglbench: its processes are watched, not marked

    def _stop_all(self) -> StopResult:
        if self.gateway is not None:
            try:
                ray.get(self._g.stop.remote(), timeout=60)
            except (RayActorError, RayTaskError, GetTimeoutError):
                pass
        with ThreadPoolExecutor(max_workers=max(1, len(self.engines))) as pool:
            results = list(pool.map(lambda ph: _stop_one(ph[1]), self.engines))
        first = next((r for r in results if r is not None), StopResult(False))
        return replace(first, stopped=any(r is not None and r.stopped for r in results))

    def stop(self, timeout_s: float = 60) -> StopResult:
        return self._stop_all()

    def telemetry_start(self, rate_hz: float) -> Optional[str]:
        whys = [w for _, h in self.engines if (w := EngineHandle.telemetry_start(h, rate_hz))]
        return "; ".join(sorted(set(whys))) or None

    def telemetry_stop(self) -> Optional[TelemetryCapture]:
        """Every process's GPU samples in one capture (their GPU ids tell them apart)."""
        import pyarrow as pa

        caps = [c for _, h in self.engines if (c := EngineHandle.telemetry_stop(h)) is not None]
        if not caps:
            return None
        tables = [c.samples for c in caps if c.samples.num_rows]
        samples = pa.concat_tables(tables) if tables else caps[0].samples
        return replace(caps[0], samples=samples, errors=sum(c.errors for c in caps),
                       error=next((c.error for c in caps if c.error), None))

    def profile_start(self, steps: int) -> Optional[str]:
        return EngineHandle.profile_start(self.engines[0][1], steps)  # the first server's kernels stand for all

    def profile_collect(self, wait_s: float, max_archive_bytes: int) -> ProfileCapture:
        return EngineHandle.profile_collect(self.engines[0][1], wait_s, max_archive_bytes)


def _one_line(e: BaseException) -> str:
    """An error as one line (a run's failure reason keeps only its last line): its type and its words."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:400]


def _stop_one(h: EngineHandle) -> Optional[StopResult]:
    try:
        return EngineHandle.stop(h, timeout_s=60)
    except (RayActorError, RayTaskError, GetTimeoutError):
        return None


def new_deployment(pg: PlacementGroup, experiment: str, variant: ResolvedVariant,
                   launcher: Optional[EngineLauncher], log_dir: str, gateway_bundle: int,
                   gateway_pg: PlacementGroup) -> DeploymentHandle:
    """An EngineActor per server process, each on its bundle (bundle i holds process i's GPUs), and the gateway's
    actor on `gateway_bundle` (a CPU bundle beside the load actors); nothing started yet."""
    engines: list[tuple[ProcessRole, EngineHandle]] = []
    for i, p in enumerate(deployment_processes(variant)):
        pv = launched_process(variant, p)  # ports are assigned at start (relaunch_as)
        actor: "ActorHandle[EngineActorImpl]" = EngineActor.options(
            name=actor_name("engine", experiment, pv.name), num_gpus=p.tp,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
        ).remote(pv, launcher, log_dir, "127.0.0.1", None)
        engines.append((p, EngineHandle(actor)))
    gateway = None
    if variant.gateway:
        gateway = GatewayActor.options(
            name=actor_name("gateway", experiment, variant.name), num_cpus=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(gateway_pg, placement_group_bundle_index=gateway_bundle),
            runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}},
        ).remote(variant, launcher, log_dir)
    return DeploymentHandle(variant, engines, gateway)


__all__ = ["DeploymentHandle", "DeploymentStartError", "new_deployment"]
