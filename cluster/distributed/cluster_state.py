"""What the Ray cluster looks like (GPU nodes), the dataset root, and the preflight probe run on a GPU node."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.spec.models import ExperimentSpec


def gpu_nodes() -> list[dict[str, Any]]:
    """Alive nodes with at least one GPU: node id, address, GPU and CPU counts."""
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        gpus = int(res.get("GPU", 0))
        if gpus <= 0:
            continue
        out.append({"node_id": n["NodeID"], "address": n.get("NodeManagerAddress"), "gpus": gpus,
                    "cpus": res.get("CPU", 0)})
    return out


def resolve_output_root(output: str, base_dir: Path) -> str:
    """A URI (scheme://...) stays as is; a relative local path is taken relative to the experiment's base dir."""
    if "://" in output:
        return output
    p = Path(output)
    return str(p if p.is_absolute() else (base_dir / p).resolve())


def _probe_on_node(spec_json: dict[str, Any], base_dir: str) -> dict[str, Any]:
    from cluster.plan.runs import expand_variants
    from cluster.plan.preflight import check_speculative_support
    from cluster.spec.models import ExperimentSpec as _Spec

    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    spec = _Spec.model_validate(spec_json)
    reports = check_speculative_support(spec, expand_variants(spec))
    return {path: r.to_json() for path, r in reports.items()}


def remote_preflight(spec: ExperimentSpec, base_dir: Path) -> Optional[dict[str, Any]]:
    """Probe every checkpoint on a GPU node (weights often live only there) before any GPU is reserved.
    Raises the probe's PreflightError (a ValueError) unchanged."""
    try:
        import cluster.plan.preflight  # noqa: F401
    except ModuleNotFoundError:
        return None
    nodes = gpu_nodes()
    task = ray.remote(num_cpus=0, max_retries=0)(_probe_on_node)
    opts: dict[str, Any] = {"runtime_env": {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}}
    if nodes:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(nodes[0]["node_id"], soft=False)
    try:
        return ray.get(task.options(**opts).remote(spec.model_dump(mode="json"), str(base_dir)))
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, ValueError):
            raise cause from None
        raise
