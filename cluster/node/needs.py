"""What an experiment asks of its serving node (GPUs, SGLang, MTP weights, load concurrency) and where to look."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

from cluster.node.checks import NodeNeeds, NodesNeed
from cluster.node.facts import FactQuery
from cluster.config.experiment import ExperimentSpec
from cluster.kernel.runs import ResolvedVariant

LOG_DIR_DEFAULT = "/tmp/sglbench-logs"
"""Where server logs go unless SGLBENCH_LOG_DIR says otherwise (the driver's default)."""
OPEN_LOOP_INFLIGHT_S = 60.0
"""An open-loop point without max_concurrency keeps about rate × this many requests in flight at worst."""


def default_python() -> Optional[str]:
    """The SGLang interpreter to check without an experiment: $SGLBENCH_SGLANG_VENV/bin/python, else `python` on
    PATH (what a spec without engines.sglang.python runs)."""
    venv = os.environ.get("SGLBENCH_SGLANG_VENV")
    if venv:
        return str(Path(venv) / "bin" / "python")
    return shutil.which("python") or shutil.which("python3")


def node_gpus(v: ResolvedVariant, gpus_per_node: int) -> int:
    """GPUs the variant needs on one node: its processes' total where they are packed on one node (one server, or
    replicas and pools that fit), else its largest process (a rank of a server across nodes holds tp / nodes)."""
    from cluster.kernel.deployment import deployment_processes, placement_strategy

    procs = deployment_processes(v)
    if not procs:  # an endpoint already running
        return 0
    return v.gpus if placement_strategy(v, gpus_per_node) == "STRICT_PACK" else max(p.tp for p in procs)


def needs_for(spec: ExperimentSpec) -> NodeNeeds:
    from cluster.engines.registry import get_engine
    from cluster.engines.sglang import DEFAULT_VERSION
    from cluster.plan.runs import expand_variants

    variants = expand_variants(spec)
    on_gpu = [v for v in variants if not get_engine(v.engine).runs_on_cpu(v)]
    load = spec.load
    peaks = list(load.concurrency) + ([load.max_concurrency] if load.max_concurrency else [])
    if load.search is not None and load.search.over == "concurrency":
        peaks.append(int(load.search.max))
    if load.request_rate and not load.max_concurrency:
        peaks.append(int(max(load.request_rate) * OPEN_LOOP_INFLIGHT_S))
    launcher = spec.engines.get("sglang")
    per_node = [(node_gpus(v, spec.cluster.gpus_per_node), v) for v in on_gpu]
    gpus, widest = max(per_node, key=lambda x: x[0], default=(0, None))
    from cluster.config.deployment import NodesDeployment, PDDeployment
    from cluster.plan.deployment import describe

    # the sim's prefill/decode pair moves no KV: only SGLang's servers import a transfer backend
    pd = [v.deployment for v in variants if isinstance(v.deployment, PDDeployment) and v.engine == "sglang"]
    spans = [(v.name, v.deployment.nodes, v.tp // v.deployment.nodes) for v in on_gpu
             if isinstance(v.deployment, NodesDeployment)]
    return NodeNeeds(from_spec=True, gpus=gpus,
                     gpus_for=f"{widest.name} ({describe(widest)})" if widest is not None else "",
                     gateway=any(v.gateway for v in variants),
                     gateway_variants=tuple(v.name for v in variants if v.gateway),
                     transfer_backends=tuple(sorted({d.transfer_backend for d in pd})),
                     nodes=tuple(NodesNeed(variant=n, nodes=k, gpus_per_node=g) for n, k, g in spans),
                     sglang=any(v.engine == "sglang" for v in variants),
                     sglang_launcher=bool(launcher and launcher.launcher),
                     sglang_version=launcher.version if launcher else None, target_version=DEFAULT_VERSION,
                     speculative=any(v.speculative is not None for v in variants),
                     concurrency_per_actor=max(peaks, default=1) // load.actors_per_server or 1,
                     load_actors=load.actors_per_server)


def query_for(spec: Optional[ExperimentSpec], output: Optional[str], base_dir: Path) -> FactQuery:
    """Where the facts are: the spec's interpreter, SGLang's gateway beside it, the transfer modules it must import,
    the checkpoint and output root (without a spec: the default interpreter and the working directory's results/)."""
    from cluster.plan.inputs import resolve_output_root
    from cluster.plan.runs import expand_variants

    logs = os.environ.get("SGLBENCH_LOG_DIR", LOG_DIR_DEFAULT)
    from cluster.engines.deployment_needs import TRANSFER_MODULES
    from cluster.engines.gateway import gateway_beside

    if spec is None:
        root = resolve_output_root(output or "results", base_dir)
        here = default_python()
        return FactQuery(python=here, disk_paths=tuple(p for p in (root, logs) if "://" not in p),
                         gateway=gateway_beside(here))
    root = resolve_output_root(output or spec.output, base_dir)
    launcher = spec.engines.get("sglang")
    needs = needs_for(spec)
    python: Optional[str] = None
    if needs.sglang and not (launcher and launcher.launcher):
        python = _absolute(launcher.python if launcher and launcher.python else (shutil.which("python") or "python"),
                           base_dir)
    from cluster.engines.registry import is_simulated

    model = spec.model.path if not is_simulated(spec.model.engine) else None
    fronted = [v for v in expand_variants(spec) if v.gateway]
    engine = spec.engines.get(fronted[0].engine) if fronted else launcher  # the gateway sits beside its engine
    declared = _absolute(engine.python, base_dir) if engine and engine.python else None
    return FactQuery(python=python, model_path=model, disk_paths=tuple(p for p in (root, logs) if "://" not in p),
                     gateway=(engine.gateway if engine and engine.gateway else None) or gateway_beside(declared or python),
                     modules=tuple(TRANSFER_MODULES[b][0] for b in needs.transfer_backends))


def _absolute(python: str, base_dir: Path) -> str:
    """A relative interpreter path (with a directory) taken from the experiment's directory; a bare name as is."""
    return str((base_dir / python).absolute()) if not os.path.isabs(python) and os.sep in python else python
