"""Shared test fixtures: a local Ray cluster with 8 logical GPUs, and tier switches."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tier_required(name: str) -> bool:
    """CI sets SGLBENCH_REQUIRE_TIERS (e.g. "vllm,sglang") so a missing tier fails instead of skipping."""
    return name in {t.strip() for t in os.environ.get("SGLBENCH_REQUIRE_TIERS", "").split(",")}


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    """One local Ray cluster per test module (8 logical GPUs, no dashboard, small object store)."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_gpus=8, num_cpus=8, include_dashboard=False,
                 object_store_memory=100 * 1024**2, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()
