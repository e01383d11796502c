"""Two nodes of 8 logical GPUs: TP=8 variants one per node, TP=4 variants two per node, load actors co-located."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from cluster.server.process import pid_alive
from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[None]:
    from tests.conftest import joined_loopback_cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    head = {"num_cpus": 2, "num_gpus": 0, "include_dashboard": False, "object_store_memory": 100 * 1024**2}
    gpu_node = {"num_cpus": 4, "num_gpus": 8, "object_store_memory": 100 * 1024**2}
    with joined_loopback_cluster(head, [gpu_node, gpu_node]):
        yield


def _spec(tmp: Path, variants: str, name: str, extra: str = "") -> str:
    return f"""
version: 1
name: {name}
model: {{path: sim://tiny, engine: sim}}
server: {{args: {{max-running-requests: 8, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.02}}
variants:
{variants}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 16, num_requests: 6}}
load: {{concurrency: [2]}}
warmup_requests: 0
isolation: gpus
max_client_lag_ms: 1000  # placement test: four servers and two Ray nodes share a 2-core CI box
output: {tmp / 'results'}
{extra}
"""


def test_tp8_one_per_node_and_tp4_two_per_node(two_nodes: None, tmp_path: Path) -> None:
    from cluster.distributed.driver import run_experiment

    variants = "\n".join([
        "  - {name: big-a, tp: 8, baseline: true}",
        "  - {name: big-b, tp: 8}",
    ])
    spec = parse_spec_text(_spec(tmp_path, variants, "two-tp8"))
    result = run_experiment(spec, base_dir=tmp_path)
    assert set(result.counts()) == {"ok"}, result.statuses
    nodes = {v: i["node_id"] for v, i in result.servers.items()}
    assert nodes["big-a"] != nodes["big-b"], "two TP=8 variants must land on different nodes"
    a, b = result.servers["big-a"], result.servers["big-b"]
    assert max(a["started_unix_s"], b["started_unix_s"]) < min(a["stopped_unix_s"], b["stopped_unix_s"])

    variants = "\n".join(f"  - {{name: v{i}, tp: 4{', baseline: true' if i == 0 else ''}}}" for i in range(4))
    spec = parse_spec_text(_spec(tmp_path, variants, "four-tp4"))
    result = run_experiment(spec, base_dir=tmp_path)
    assert set(result.counts()) == {"ok"}, result.statuses
    per_node: dict[str, list[set[str]]] = {}
    for v, info in result.servers.items():
        assert info["load_actor_node_id"] == info["node_id"], f"{v}: load actor not on its server's node"
        per_node.setdefault(info["node_id"], []).append(set(info["gpu_ids"]))
        assert not pid_alive(info["pid"])
    assert sorted(len(x) for x in per_node.values()) == [2, 2]
    for sets in per_node.values():
        assert sets[0].isdisjoint(sets[1])


def test_unplaceable_fails_fast(two_nodes: None, tmp_path: Path) -> None:
    import time

    from cluster.distributed.driver import PlacementError, run_experiment

    # the spec's own bound (cluster.gpus_per_node) allows it; the cluster's largest node does not
    spec = parse_spec_text(_spec(tmp_path, "  - {name: huge, tp: 16}", "too-big", "cluster: {gpus_per_node: 16}"))
    t0 = time.monotonic()
    with pytest.raises(PlacementError, match="tp=16.*largest node has 8 GPUs"):
        run_experiment(spec, base_dir=tmp_path, preflight=False)
    assert time.monotonic() - t0 < 10


def test_one_server_across_two_nodes_one_rank_per_raylet_and_both_torn_down(two_nodes: None,
                                                                             tmp_path: Path) -> None:
    """`deployment: {kind: nodes, nodes: 2}` (the simulator speaking SGLang's --nnodes/--node-rank/--dist-init-addr):
    tp 16 as two ranks of 8 GPUs, each on its own raylet (STRICT_SPREAD), served through rank 0; rank 1 killed
    mid-window fails the run naming it, rank 0 exits with it (as SGLang's does) and no process group survives."""
    import json
    import signal

    from cluster.distributed.driver import Driver
    from cluster.distributed.progress import PointRecords, ProgressEvent
    from cluster.server.process import wait_group_gone

    variants = "  - {name: n2, tp: 16, deployment: {kind: nodes, nodes: 2}}"
    spec = parse_spec_text(_spec(tmp_path, variants, "two-nodes", "cluster: {gpus_per_node: 8, nodes: 2}\n"
                                 "repeats: 2").replace("num_requests: 6", "num_requests: 40"))
    killed: list[int] = []
    holder: dict[str, Driver] = {}

    def on_event(e: ProgressEvent) -> None:
        # rank 1 is killed during the second run's window (the first run measures the two-node server whole)
        if isinstance(e, PointRecords) and e.plan.repeat == 1 and not killed:
            facts = holder["drv"].result.servers["n2"].facts
            rank1 = next(p for p in facts.processes if p.name == "rank-1").facts
            os.kill(rank1.server_pid or rank1.pid, signal.SIGKILL)
            killed.append(rank1.server_pid or rank1.pid)

    drv = Driver(spec, tmp_path, None, lambda s: None, lambda p, s: None, on_event)
    holder["drv"] = drv
    result = drv.run()
    assert killed, "the second window never streamed a record"
    facts = result.servers["n2"].facts
    ranks = {p.name: p.facts for p in facts.processes}
    assert set(ranks) == {"rank-0", "rank-1"}
    assert ranks["rank-0"].node_id != ranks["rank-1"].node_id, "each rank on its own raylet"
    assert len(ranks["rank-0"].gpu_ids) == 8 and len(ranks["rank-1"].gpu_ids) == 8
    argv0, argv1 = ranks["rank-0"].argv, ranks["rank-1"].argv
    assert argv0[argv0.index("--node-rank") + 1] == "0" and argv1[argv1.index("--node-rank") + 1] == "1"
    assert argv0[argv0.index("--dist-init-addr") + 1] == argv1[argv1.index("--dist-init-addr") + 1]
    assert facts.base_url == ranks["rank-0"].base_url  # requests go to rank 0
    statuses = dict(result.statuses)
    ok = [k for k, s in statuses.items() if s == "ok"]
    failed = [k for k, s in statuses.items() if s == "failed"]
    assert len(ok) == 1 and len(failed) == 1, statuses
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "results" / "two-nodes" / "runs").to_pylist()
    bad = next(r for r in rows if r["status"] == "failed")
    assert "rank-1" in (bad["failure_reason"] or ""), bad["failure_reason"]  # "(dead: rank-1" or both ranks
    good = next(r for r in rows if r["status"] == "ok")
    assert json.loads(good["provenance_json"])["gpus"] == 16
    for name, f in ranks.items():
        assert wait_group_gone(f.pgid, 20, poll_s=0.2) == [], f"{name} group {f.pgid} survived"
