"""The niceness the launched server runs at: 0 on a cluster sglbench starts (Ray's default worker niceness is 15,
which the server and the load generator inherit), recorded per server, and a warning naming it when a cluster runs
its workers niced (here a local cluster started with RAY_worker_niceness=5, as a joined cluster may be)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

SPEC = """
version: 1
name: nice
model: {{path: sim://nice, engine: sim}}
sim: {{time_scale: 0.01}}
variants: [{{name: base, baseline: true}}]
workloads: [{{name: w, input_tokens: 16, output_tokens: 4, num_requests: 2}}]
load: {{concurrency: [1]}}
warmup_requests: 0
correctness: {{enabled: false}}
output: {out}
"""


def test_driver_starts_its_local_cluster_with_workers_at_niceness_0(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from cluster.distributed import driver

    seen: dict[str, object] = {}
    monkeypatch.delenv(driver.WORKER_NICENESS_ENV, raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(env=os.environ.get(driver.WORKER_NICENESS_ENV)))
    driver.init_ray(None, 8)
    assert seen == {"env": "0"}


def test_a_niced_server_is_recorded_and_warned_about(tmp_path: Path) -> None:
    import ray

    from cluster.distributed.driver import WORKER_NICENESS_ENV, Driver

    if ray.is_initialized():
        ray.shutdown()
    old = os.environ.get(WORKER_NICENESS_ENV)
    os.environ[WORKER_NICENESS_ENV] = "5"
    try:
        ray.init(address="local", num_gpus=8, num_cpus=4, include_dashboard=False, log_to_driver=False,
                 object_store_memory=100 * 1024**2, _node_ip_address="127.0.0.1")
        logs: list[str] = []
        spec = parse_spec_text(SPEC.format(out=tmp_path / "out"))
        result = Driver(spec, tmp_path, None, logs.append, lambda p, s: None).run()
        assert set(result.counts()) == {"ok"}, result.statuses
        env = result.servers["base"].facts.environment
        assert env["server_niceness"] == 5, env
        warned = [line for line in logs if "runs at niceness 5" in line]
        assert len(warned) == 1 and warned[0].startswith("[base] warning:"), logs
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop(WORKER_NICENESS_ENV, None)
        else:
            os.environ[WORKER_NICENESS_ENV] = old
