"""What an experiment asks of its serving node (GPUs, SGLang, MTP weights, load concurrency) and where to look."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

from cluster.node.checks import NodeNeeds
from cluster.node.facts import FactQuery
from cluster.config.experiment import ExperimentSpec

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
    return NodeNeeds(from_spec=True, gpus=max((v.tp for v in on_gpu), default=0),
                     sglang=any(v.engine == "sglang" for v in variants),
                     sglang_launcher=bool(launcher and launcher.launcher),
                     sglang_version=launcher.version if launcher else None, target_version=DEFAULT_VERSION,
                     speculative=any(v.speculative is not None for v in variants),
                     concurrency_per_actor=max(peaks, default=1) // load.actors_per_server or 1,
                     load_actors=load.actors_per_server)


def query_for(spec: Optional[ExperimentSpec], output: Optional[str], base_dir: Path) -> FactQuery:
    """Where the facts are: the spec's interpreter, checkpoint and output root (without a spec: the default
    interpreter and the working directory's results/)."""
    from cluster.plan.inputs import resolve_output_root

    logs = os.environ.get("SGLBENCH_LOG_DIR", LOG_DIR_DEFAULT)
    if spec is None:
        root = resolve_output_root(output or "results", base_dir)
        return FactQuery(python=default_python(), disk_paths=tuple(p for p in (root, logs) if "://" not in p))
    root = resolve_output_root(output or spec.output, base_dir)
    launcher = spec.engines.get("sglang")
    python: Optional[str] = None
    if needs_for(spec).sglang and not (launcher and launcher.launcher):
        python = launcher.python if launcher and launcher.python else (shutil.which("python") or "python")
        if not os.path.isabs(python) and os.sep in python:
            python = str((base_dir / python).absolute())
    from cluster.engines.registry import is_simulated

    model = spec.model.path if not is_simulated(spec.model.engine) else None
    return FactQuery(python=python, model_path=model, disk_paths=tuple(p for p in (root, logs) if "://" not in p))
