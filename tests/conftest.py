"""Shared test fixtures: a local Ray cluster with 8 logical GPUs, and tier switches."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Tests talk to loopback only. Ray on Linux takes the machine's first interface as a node's address and rewrites a
# 127.0.0.1 address given to ray.init to it (services.resolve_ip_for_localhost), so a head bound to 127.0.0.1 could not
# be joined by a second driver (`sglbench doctor --address`, a job's driver). With this switch off, Ray's node address
# is 127.0.0.1, as on a laptop (services.get_node_ip_address); it gates nothing else that the tests use (only
# `ray start`'s worker nodes, which no test starts). Set before any test imports Ray; subprocesses inherit it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The CLI's module-level rich consoles fix their width from COLUMNS when they are created: made first inside a test's
# CliRunner(env={"COLUMNS": "80"}), every later test in that worker got 80 columns whatever its own env said (the
# GPUs compare test failed in the full suite only). Created here, with COLUMNS as the session has it, they read each
# test's COLUMNS at print time.
if "COLUMNS" not in os.environ:
    import cluster.commands.result_tables  # noqa: E402,F401
    import cluster.commands.run  # noqa: E402,F401


KNOWN_TIERS = ("vllm", "sglang", "browser", "tmux")
"""Every optional tier a test skips without (vLLM's and SGLang's venvs, Debian's chromium, tmux): .ci/run requires
them all (tests/unit/test_ci_tiers.py keeps that list equal to this one)."""


def required_tiers() -> set[str]:
    return {t.strip() for t in os.environ.get("SGLBENCH_REQUIRE_TIERS", "").split(",") if t.strip()}


def tier_required(name: str) -> bool:
    """CI sets SGLBENCH_REQUIRE_TIERS (e.g. "vllm,sglang") so a missing tier fails instead of skipping."""
    return name in required_tiers()


def pytest_configure(config: pytest.Config) -> None:
    """A misspelt tier in SGLBENCH_REQUIRE_TIERS would require nothing and let its skip pass: refuse it."""
    unknown = required_tiers() - set(KNOWN_TIERS)
    if unknown:
        raise pytest.UsageError(f"SGLBENCH_REQUIRE_TIERS names unknown tier(s) {', '.join(sorted(unknown))}; "
                                f"known: {', '.join(KNOWN_TIERS)}")


RAY_GPUS = 8


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    """A local Ray cluster (8 logical GPUs, no dashboard, small object store), shared by consecutive modules that ask
    for it: starting one costs 5-25 s on a 2-core machine. `pytest_runtest_teardown` below shuts it down before a
    module whose first test does not use it (those start clusters of their own) and whenever a module left a GPU
    reserved or a named actor alive, so no module sees another's leftovers."""
    import ray

    if not ray.is_initialized():
        from cluster.distributed.driver import WORKER_NICENESS_ENV

        os.environ.setdefault(WORKER_NICENESS_ENV, "0")  # as a cluster sglbench starts (driver.init_ray)
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


REAL_ENGINE_DIRS = ("sglang_cpu", "e2e", "gpu")
"""Tiers whose tests start real engine servers (SGLang, vLLM on the CPU) or load the machine's GPU (NVML sampling under
a GEMM load, kernel tuning): they share one work unit, so they run one after another on one worker — never two real
servers at once on a 2-core machine, never two GPU tests measuring each other."""
REAL_ENGINE_GROUP = "real-engine"


def _real_engine(item: pytest.Item) -> bool:
    return os.path.basename(os.path.dirname(str(item.fspath))) in REAL_ENGINE_DIRS


def _scope(nodeid: str) -> str:
    """The work unit a test belongs to: the real-engine group, or its own module."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return REAL_ENGINE_GROUP if len(parts) > 2 and parts[1] in REAL_ENGINE_DIRS else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`-n 2` (pyproject's addopts) schedules whole work units: the real-engine tiers as one unit on one worker, every
    other module as its own, so a module's tests stay on one worker with its module- and session-scoped fixtures
    (one local Ray cluster per run of Ray modules, see pytest_runtest_teardown). xdist's own `loadgroup` marks do
    nothing under pytest 9 (xdist 3.8 rewrites a node id attribute pytest 9 no longer reads), hence this hook."""
    from xdist.scheduler import LoadScopeScheduling

    class RealEngineTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return RealEngineTogether(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-engine group first (with --no-loadscope-reorder the first worker takes it at once: it is the longest,
    ~1000 s of CI's tests); then, within each test directory, the modules that use `ray_local` first and back to
    back, so one local Ray cluster serves them all (see pytest_runtest_teardown); the order inside a module is
    unchanged."""
    def directory(it: pytest.Item) -> str:
        return os.path.dirname(str(it.fspath))

    uses_ray = {directory(it) + "|" + str(it.fspath) for it in items if "ray_local" in getattr(it, "fixturenames", ())}
    first_seen: dict[str, int] = {}
    for i, it in enumerate(items):
        first_seen.setdefault(directory(it), i)
    items.sort(key=lambda it: (not _real_engine(it), first_seen[directory(it)],
                               0 if directory(it) + "|" + str(it.fspath) in uses_ray else 1))


LOOPBACK = "127.0.0.1"


@contextmanager
def loopback_cluster(**head_args: Any) -> Iterator[Any]:
    """A Ray cluster of the test's own (ray.cluster_utils.Cluster): every node on 127.0.0.1 (tests talk to loopback
    only; Ray's default is the machine's first interface) and one temp dir of its own, removed after, whose
    `ray_current_cluster` names this head: Ray's job supervisor resolves a job driver's RAY_ADDRESS ("auto") from it.
    In the shared /tmp/ray a cluster another xdist worker started later overwrote it, and a CI run's job driver joined
    that other cluster (refused for its token, then gone when it shut down). Add nodes with
    `cluster.add_node(**LOOPBACK_NODE)`. Shut down by its handle."""
    import shutil
    import tempfile

    import ray
    from ray._private.utils import write_ray_address
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    # short: Ray puts Unix sockets under it (108 bytes at most for a socket path)
    temp_dir = tempfile.mkdtemp(prefix="sgb-ray-", dir="/tmp")
    cluster = Cluster(initialize_head=True, head_node_args={"node_ip_address": LOOPBACK, "temp_dir": temp_dir,
                                                            **head_args})
    try:
        # Cluster writes its address to the default temp dir's ray_current_cluster only; without one in its own, the
        # supervisor's "auto" falls back to any raylet it finds running on the machine (services.py
        # get_ray_address_from_environment), which with two xdist workers may be the other's cluster
        write_ray_address(cluster.head_node.gcs_address, temp_dir)
        yield cluster
    finally:
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


LOOPBACK_NODE: dict[str, Any] = {"node_ip_address": LOOPBACK}
"""What every node a test adds to a `loopback_cluster` is given besides its resources."""


@contextmanager
def joined_loopback_cluster(head_args: dict[str, Any],
                            nodes_args: list[dict[str, Any]]) -> Iterator[tuple[Any, list[Any]]]:
    """A `loopback_cluster` with one node added per entry of `nodes_args`, every node up, and this process its driver
    (ray.init joined to it); yields the cluster and the added nodes. The driver disconnects, then the cluster shuts
    down (its nodes with it)."""
    import ray

    with loopback_cluster(**head_args) as cluster:
        nodes = [cluster.add_node(**args, **LOOPBACK_NODE) for args in nodes_args]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            yield cluster, nodes
        finally:
            ray.shutdown()


@contextmanager
def token_auth_head(token: str) -> Iterator[Any]:
    """A one-node Ray head (8 logical GPUs, the dashboard and job API on 127.0.0.1) with token auth on `token`, set
    in RAY_AUTH_TOKEN for this process and so for every process the head starts; shut down by its handle, and the
    environment and Ray's cached auth config restored after."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    from cluster.server.process import free_port

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0")
    reset_auth_token_state()  # this process reads Ray's auth config at import: refresh it (Ray's own tests do)
    try:
        with loopback_cluster(num_cpus=2, num_gpus=8, include_dashboard=True, dashboard_host=LOOPBACK,
                              dashboard_port=free_port(), dashboard_agent_listen_port=free_port(),
                              object_store_memory=100 * 1024**2) as cluster:
            assert cluster.head_node is not None and cluster.head_node.webui_url, "the head started without a dashboard"
            yield cluster
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_auth_token_state()
