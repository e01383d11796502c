"""sglbench: a Ray-distributed benchmarking cluster for SGLang server variants.

The public surface is `__all__`: load and plan an experiment, probe a checkpoint, read and compare a dataset, and
the exception tree. Ray is never imported from here (only `cluster.distributed` imports it). The dataset and
analysis entries (pyarrow, pandas, DuckDB) are imported on first use, so the simulated server and the load actors,
which import this package, do not pay for them at start.
"""

from __future__ import annotations

from typing import Any

from cluster.errors import (EXIT_BUG, EXIT_ENGINE, EXIT_ENVIRONMENT, EXIT_USER_ERROR, AuthError, EngineFault,
                            EnvironmentFault, PromptSourceError, SglbenchError, UserError)
from cluster.plan.runs import expand_variants, make_plan
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.probe.checkpoint import ProbeReport, probe_checkpoint
from cluster.config.loader import load_spec, parse_spec_text
from cluster.config.experiment import ExperimentSpec
from cluster.config.fields import SpecError
from cluster.version import __version__

_ON_FIRST_USE = {
    "DatasetStore": "cluster.dataset.store",
    "list_experiments": "cluster.dataset.store",
    "compare_table": "cluster.analysis.query",
    "query": "cluster.analysis.query",
    "compare_with_ci": "cluster.analysis.comparison",
    "Results": "cluster.analysis.results",
}
"""Public names whose modules pull in pyarrow/pandas/DuckDB: resolved by `__getattr__` (PEP 562) when first read."""


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        import importlib

        value = getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cluster' has no attribute {name!r}")


__all__ = [
    "EXIT_BUG", "EXIT_ENGINE", "EXIT_ENVIRONMENT", "EXIT_USER_ERROR",
    "AuthError", "DatasetStore", "EngineFault", "EnvironmentFault", "ExperimentSpec", "ProbeReport",
    "PromptSourceError", "ResolvedVariant", "Results", "RunPlan", "SglbenchError", "SpecError", "UserError",
    "__version__", "compare_table", "compare_with_ci", "expand_variants", "list_experiments", "load_spec",
    "make_plan", "parse_spec_text", "probe_checkpoint", "query",
]
