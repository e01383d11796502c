"""Shared test fixtures: a local Ray cluster with 8 logical GPUs, and tier switches."""

from __future__ import annotations

import os
import sys
from typing import Iterator, Optional

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tier_required(name: str) -> bool:
    """CI sets SGLBENCH_REQUIRE_TIERS (e.g. "vllm,sglang") so a missing tier fails instead of skipping."""
    return name in {t.strip() for t in os.environ.get("SGLBENCH_REQUIRE_TIERS", "").split(",")}


RAY_GPUS = 8


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    """A local Ray cluster (8 logical GPUs, no dashboard, small object store), shared by consecutive modules that ask
    for it: starting one costs 5-25 s on a 2-core machine. `pytest_runtest_teardown` below shuts it down before a
    module whose first test does not use it (those start clusters of their own) and whenever a module left a GPU
    reserved or a named actor alive, so no module sees another's leftovers."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_gpus=RAY_GPUS, num_cpus=8, include_dashboard=False,
                 object_store_memory=100 * 1024**2, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield


def _ray_left_clean(timeout_s: float = 3.0) -> bool:
    """Every logical GPU free again and no named actor alive: the next module may reuse the cluster."""
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        free = ray.available_resources().get("GPU", 0.0) == RAY_GPUS
        named = ray.util.list_named_actors(all_namespaces=True)
        if free and not named:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]) -> Iterator[None]:
    yield
    if "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
        return
    import ray

    if nextitem is not None and getattr(nextitem, "module", None) is getattr(item, "module", None):
        return  # within a module the cluster lives on, as a module-scoped fixture's would
    next_uses = nextitem is not None and "ray_local" in getattr(nextitem, "fixturenames", ())
    if not next_uses or not _ray_left_clean():
        ray.shutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Within each test directory, the modules that use `ray_local` run first and back to back, so one local Ray
    cluster serves them all (see pytest_runtest_teardown); the order inside a module is unchanged."""
    def directory(it: pytest.Item) -> str:
        return os.path.dirname(str(it.fspath))

    uses_ray = {directory(it) + "|" + str(it.fspath) for it in items if "ray_local" in getattr(it, "fixturenames", ())}
    first_seen: dict[str, int] = {}
    for i, it in enumerate(items):
        first_seen.setdefault(directory(it), i)
    items.sort(key=lambda it: (first_seen[directory(it)],
                               0 if directory(it) + "|" + str(it.fspath) in uses_ray else 1))
