"""The node checks on the serving node: a Ray task pinned to the first GPU node (as the preflight probe is), or this
process when the driver already runs there; `sglbench run` prints their failures before it reserves any GPU."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.node.checks import CheckResult, NodeNeeds, run_checks
from cluster.node.collect import collect
from cluster.node.facts import FactQuery, NodeFacts
from cluster.config.experiment import ExperimentSpec

if TYPE_CHECKING:
    from cluster.distributed.cluster_state import GpuNode


def _collect_json(query_json: str) -> str:
    """JSON text both ways: strict records read tuples back only from JSON (a dict's lists would be refused)."""
    facts = collect(FactQuery.model_validate_json(query_json))
    return facts.model_copy(update={"ray_node_id": ray.get_runtime_context().get_node_id()}).model_dump_json()


def _serving_node() -> Optional[GpuNode]:
    from cluster.distributed.cluster_state import gpu_nodes

    nodes = gpu_nodes()
    return nodes[0] if nodes else None


def facts_on_cluster(query: FactQuery, timeout_s: float = 120.0) -> NodeFacts:
    """The facts of the node that will serve (the first GPU node; the driver's own node on a GPU-less cluster), with
    that node's Ray CPU figures. Ray must be initialised."""
    from cluster.errors import EnvironmentFault

    node = _serving_node()
    here = ray.get_runtime_context().get_node_id()
    if node is None or node.node_id == here:
        facts = collect(query).model_copy(update={"ray_node_id": here})
        node_id = here
    else:
        task = ray.remote(num_cpus=0, max_retries=0)(_collect_json)
        ref = task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)
                           ).remote(query.model_dump_json())
        try:
            facts = NodeFacts.model_validate_json(ray.get(ref, timeout=timeout_s))
        except (ray.exceptions.RayError, TimeoutError) as e:
            raise EnvironmentFault(f"the node checks did not run on node {node.address}: "
                                   f"{(str(e).strip().splitlines() or [type(e).__name__])[0]}") from None
        node_id = facts.ray_node_id or node.node_id
    cpus = next((float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes()  # type: ignore[no-untyped-call]
                 if n.get("NodeID") == node_id), None)
    available = ray.available_resources().get("CPU")  # type: ignore[no-untyped-call]
    from cluster.distributed.cluster_state import gpu_nodes

    return facts.model_copy(update={"ray_node_cpus": cpus,
                                    "ray_available_cpus": None if available is None else float(available),
                                    "cluster_gpus": tuple(n.gpus for n in gpu_nodes())})


def facts_at(address: str, query: FactQuery) -> NodeFacts:
    """Join the cluster at `address` (its token rules as `sglbench run`'s), collect the serving node's facts, leave."""
    from cluster.distributed.cluster_state import join_cluster

    join_cluster(address)
    try:
        return facts_on_cluster(query)
    finally:
        ray.shutdown()


def run_time_failures(spec: ExperimentSpec, output: Optional[str], base_dir: Path,
                      log: Callable[[str], object]) -> list[CheckResult]:
    """The doctor's warnings and failures for this experiment on its serving node, each logged as one line
    (`doctor: warning gpus ...`); Ray must be initialised. A check that cannot run is itself reported, never raised."""
    from cluster.errors import EnvironmentFault
    from cluster.node.needs import needs_for, query_for

    needs: NodeNeeds = needs_for(spec)
    try:
        facts = facts_on_cluster(query_for(spec, output, base_dir))
    except EnvironmentFault as e:
        log(f"doctor: {e}")
        return []
    bad = [r for r in run_checks(facts, needs) if r.level in ("warning", "fail")]
    for r in bad:
        log(f"doctor: {r.line()}")
    return bad
