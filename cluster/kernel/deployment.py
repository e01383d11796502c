"""The server processes a variant's deployment is made of (pure): their roles, GPUs and placement, and the
variant each one is launched as."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Mapping, Optional

from cluster.config.server import ArgValue
from cluster.config.deployment import EndpointDeployment, NodesDeployment, PDDeployment, ReplicasDeployment
from cluster.kernel.runs import ResolvedVariant

Role = Literal["server", "replica", "prefill", "decode", "rank"]


@dataclass(frozen=True)
class ProcessRole:
    """One server process of a deployment (the gateway is not one: it holds no GPU and runs beside the load)."""

    role: Role
    index: int
    """Its index among the processes of its role (replica, prefill, decode server, node rank)."""
    tp: int
    """GPUs it holds (its --tp-size, or tp / nodes for a rank)."""
    name: str
    """`server`, `replica-0`, `prefill-1`, `decode-0`, `rank-1`: how logs, facts and errors name it."""
    nnodes: int = 1
    node_rank: int = 0

    @property
    def serves_http(self) -> bool:
        """Whether requests may go to it: every process but a rank ≥ 1 (SGLang runs no API there, only a health
        server)."""
        return not (self.role == "rank" and self.node_rank > 0)


def deployment_processes(v: ResolvedVariant) -> tuple[ProcessRole, ...]:
    """Every server process sglbench launches for the variant, in start order (none for an endpoint)."""
    d = v.deployment
    if isinstance(d, EndpointDeployment):
        return ()
    if isinstance(d, ReplicasDeployment):
        return tuple(ProcessRole("replica", i, v.tp, f"replica-{i}") for i in range(d.replicas))
    if isinstance(d, PDDeployment):
        return (tuple(ProcessRole("prefill", i, d.prefill.tp, f"prefill-{i}") for i in range(d.prefill.servers))
                + tuple(ProcessRole("decode", i, d.decode.tp, f"decode-{i}") for i in range(d.decode.servers)))
    if isinstance(d, NodesDeployment):
        return tuple(ProcessRole("rank", r, v.tp // d.nodes, f"rank-{r}", nnodes=d.nodes, node_rank=r)
                     for r in range(d.nodes))
    return (ProcessRole("server", 0, v.tp, "server"),)


@dataclass(frozen=True)
class Assigned:
    """What is chosen at start for one process: the ports the roles need (a free one on its node unless the
    deployment declares it)."""

    bootstrap_port: Optional[int] = None
    """A prefill server's --disaggregation-bootstrap-port."""
    dist_init_addr: Optional[str] = None
    """host:port of rank 0's rendezvous (--dist-init-addr), the same for every rank."""


def process_variant(v: ResolvedVariant, p: ProcessRole, role_args: Mapping[str, ArgValue]) -> ResolvedVariant:
    """The variant as process `p` is launched: its tp, its pool's args and env over the variant's, plus the
    engine's role flags (`role_args`, from cluster/engines); one server launches as the variant itself. A rank
    keeps the whole server's tp: SGLang's --tp-size counts every node's GPUs and each node runs tp / nnodes of them
    (0.5.23 validation_hook.py:179 refuses tp % nnodes != 0; engine.py _calculate_rank_ranges)."""
    if p.role == "server":
        return v
    d = v.deployment
    args, env = dict(v.args), dict(v.env)
    if isinstance(d, PDDeployment):
        pool = d.prefill if p.role == "prefill" else d.decode
        args.update(pool.args)
        env.update(pool.env)
    args.update(role_args)
    tp = v.tp if p.role == "rank" else p.tp
    return replace(v, name=f"{v.name}.{p.name}", tp=tp, args=args, env=env, deployment=None)


def placement_strategy(v: ResolvedVariant, gpus_per_node: int) -> str:
    """Ray's strategy for the deployment's placement group (a bundle per process): a server across nodes puts each
    rank on its own node (STRICT_SPREAD); the others pack on one node when they fit (STRICT_PACK), and spread only
    when they must (PACK: as few nodes as Ray can)."""
    if isinstance(v.deployment, NodesDeployment):
        return "STRICT_SPREAD"
    return "STRICT_PACK" if v.gpus <= gpus_per_node else "PACK"
