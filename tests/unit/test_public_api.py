"""The package face: `cluster.__all__` is exactly the public names below, each importable; `import cluster` is light."""

from __future__ import annotations

import subprocess
import sys

import cluster

PUBLIC = {
    "EXIT_BUG", "EXIT_ENGINE", "EXIT_ENVIRONMENT", "EXIT_USER_ERROR",
    "AuthError", "DatasetStore", "EngineFault", "EnvironmentFault", "ExperimentSpec", "ProbeReport",
    "PromptSourceError", "ResolvedVariant", "Results", "RunPlan", "SglbenchError", "SpecError", "UserError",
    "__version__", "compare_table", "compare_with_ci", "expand_variants", "list_experiments", "load_spec",
    "make_plan", "parse_spec_text", "probe_checkpoint", "query",
}


def test_all_is_the_public_surface() -> None:
    assert set(cluster.__all__) == PUBLIC
    assert len(cluster.__all__) == len(PUBLIC)  # no name listed twice


def test_every_public_name_is_importable_from_the_root() -> None:
    for name in sorted(PUBLIC):
        assert getattr(cluster, name) is not None, name
    ns: dict[str, object] = {}
    exec("from cluster import *", ns)
    assert PUBLIC <= set(ns)


def test_root_names_are_the_defining_modules_objects() -> None:
    from cluster.dataset.store import DatasetStore
    from cluster.errors import SglbenchError
    from cluster.plan.runs import make_plan
    from cluster.version import __version__

    assert cluster.DatasetStore is DatasetStore and cluster.make_plan is make_plan
    assert cluster.SglbenchError is SglbenchError and cluster.__version__ == __version__


def test_import_cluster_does_not_import_ray_or_the_analysis_stack() -> None:
    code = "import sys, cluster; print(sorted(m for m in ('ray', 'pandas', 'duckdb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
