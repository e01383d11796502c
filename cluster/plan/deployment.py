"""A variant's deployment planned (pure): what it reserves on the cluster, the words that describe it, and each of
its processes as launched (the variant with that process's tp, pool args and role flags)."""

from __future__ import annotations

from typing import Literal, Mapping, Optional, Sequence

from cluster.config.deployment import NodesDeployment, PDDeployment, ReplicasDeployment
from cluster.config.engines import EngineLauncher
from cluster.engines.base import LaunchCommand
from cluster.engines.gateway import PrefillWorker, gateway_program, pd_gateway, regular_gateway
from cluster.engines.sglang_dialect import role_args
from cluster.kernel.deployment import Assigned, ProcessRole, deployment_processes, placement_strategy, process_variant
from cluster.kernel.runs import ResolvedVariant
from cluster.plan.schedule import Reservation, deployment_reservation, reservation


def describe(v: ResolvedVariant) -> str:
    """The deployment in words: `one server of tp 8`, `2 replicas of tp 4 behind the gateway (cache_aware)`, ..."""
    d = v.deployment
    if isinstance(d, ReplicasDeployment):
        return f"{d.replicas} replica(s) of tp {v.tp} behind the gateway ({d.policy})"
    if isinstance(d, PDDeployment):
        return (f"{d.prefill.servers} prefill server(s) of tp {d.prefill.tp} + {d.decode.servers} decode server(s) "
                f"of tp {d.decode.tp} behind the gateway in PD mode ({d.transfer_backend})")
    if isinstance(d, NodesDeployment):
        return f"one server of tp {v.tp} across {d.nodes} nodes ({v.tp // d.nodes} GPUs each)"
    if v.endpoint is not None:
        return f"an endpoint already running at {v.endpoint.url}"
    return f"one server of tp {v.tp}"


def variant_reservation(v: ResolvedVariant, isolation: Literal["node", "gpus"], gpus_per_node: int,
                        load_cpus: float = 1.0) -> Reservation:
    """What the variant's segment reserves: one server's bundle as before; a deployment of several processes a
    bundle per process (kernel/deployment.placement_strategy); an endpoint no GPU."""
    if v.deployment is None or v.endpoint is not None:
        return reservation(v.name, v.tp if v.launched else 0, isolation, gpus_per_node, load_cpus)
    procs = deployment_processes(v)
    return deployment_reservation(v.name, [p.tp for p in procs], placement_strategy(v, gpus_per_node), describe(v),
                                  isolation, gpus_per_node, load_cpus)


def launched_process(v: ResolvedVariant, p: ProcessRole, assigned: Optional[Assigned] = None) -> ResolvedVariant:
    """The variant as process `p` of its deployment is launched (engine role flags from SGLang's dialect: the
    engines that serve deployments speak it)."""
    a = assigned or Assigned()
    d = v.deployment
    backend = d.transfer_backend if isinstance(d, PDDeployment) else None
    if isinstance(d, PDDeployment) and d.bootstrap_port is not None and a.bootstrap_port is None:
        a = Assigned(bootstrap_port=d.bootstrap_port, dist_init_addr=a.dist_init_addr)
    flags = role_args(p.role, backend, p.nnodes, p.node_rank, a.bootstrap_port, a.dist_init_addr)
    return process_variant(v, p, flags)


def launched_processes(v: ResolvedVariant, assigned: Mapping[str, Assigned]
                       ) -> list[tuple[ProcessRole, ResolvedVariant]]:
    """Every process of the variant's deployment with the variant it is launched as (`assigned`: process name →
    the ports chosen for it at start)."""
    return [(p, launched_process(v, p, assigned.get(p.name))) for p in deployment_processes(v)]


def worker_names(procs: Sequence[ProcessRole]) -> list[str]:
    """The processes requests may reach (a rank ≥ 1 serves no API)."""
    return [p.name for p in procs if p.serves_http]


PLAN_BOOTSTRAP_PORT = 8998
"""The bootstrap port `plan` shows for a prefill server whose port is assigned at start (SGLang's default)."""
PLAN_DIST_INIT = "rank-0-host:29500"
"""What `plan` shows for --dist-init-addr (a placeholder host and port that parsers accept): rank 0's node address and
a free port there (or the declared dist_init_port) are known only once Ray has placed it."""


def planned_processes(v: ResolvedVariant) -> list[tuple[ProcessRole, ResolvedVariant]]:
    """The processes as `plan` and preflight see them, before any port is chosen: a prefill's bootstrap port as
    declared or PLAN_BOOTSTRAP_PORT, --dist-init-addr rank 0's placeholder; one server as itself."""
    d = v.deployment
    boot = d.bootstrap_port if isinstance(d, PDDeployment) and d.bootstrap_port else PLAN_BOOTSTRAP_PORT
    init = PLAN_DIST_INIT
    if isinstance(d, NodesDeployment) and d.dist_init_port:
        init = f"rank-0-host:{d.dist_init_port}"
    return [(p, launched_process(v, p, Assigned(bootstrap_port=boot if p.role == "prefill" else None,
                                                dist_init_addr=init if p.role == "rank" else None)))
            for p in deployment_processes(v)]


def placement_problems(variants: Sequence[ResolvedVariant], isolation: Literal["node", "gpus"], gpus_per_node: int,
                       nodes: int) -> list[str]:
    """Why a variant can never be placed on `nodes` nodes of `gpus_per_node` GPUs (the cluster the spec declares)."""
    from cluster.plan.schedule import unplaceable

    return unplaceable([variant_reservation(v, isolation, gpus_per_node) for v in variants], [gpus_per_node] * nodes)


def processes_of(v: ResolvedVariant) -> list[ResolvedVariant]:
    """The variants the deployment's processes are launched as (planned ports), or the variant itself."""
    return [pv for _, pv in planned_processes(v)] if v.deployment is not None else [v]


def gateway_command(v: ResolvedVariant, launcher: Optional[EngineLauncher], urls: Sequence[str],
                    prefill: Sequence[PrefillWorker], decode: Sequence[str], port: int,
                    metrics_port: int) -> Optional[LaunchCommand]:
    """The gateway's `smg launch` for the variant's deployment over its servers (`urls` for replicas; `prefill` and
    `decode` for prefill/decode pools), or None when no gateway fronts it."""
    d = v.deployment
    program = gateway_program(launcher, launcher.gateway if launcher is not None else None)
    if isinstance(d, PDDeployment):
        return pd_gateway(program, prefill, decode, d.policy, port, metrics_port, d.prefill_policy, d.decode_policy,
                          d.retries, d.gateway_args)
    if isinstance(d, ReplicasDeployment):
        return regular_gateway(program, urls, d.policy, port, metrics_port, d.retries, d.gateway_args)
    return None
