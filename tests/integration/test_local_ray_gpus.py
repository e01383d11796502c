"""Variants with tp 1, 2 and 4 side by side on 8 logical GPUs: pinning, disjoint sets, no orphans, complete data."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from cluster.plan.runs import make_plan
from cluster.server.process import pid_alive
from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

SPEC = """
version: 1
name: gpus-side-by-side
model: {path: sim://tiny, engine: sim, tp: 1}
server: {args: {max-running-requests: 16, kv-cache-dtype: bf16, attention-backend: flashinfer}}
sim: {time_scale: 0.02}
variants:
  - {name: a, tp: 1, baseline: true}
  - {name: b, tp: 2, speculative: {algorithm: NEXTN, num_steps: 2}}
  - {name: c, tp: 4}
workloads:
  - {name: w, input_tokens: 32, output_tokens: 24, num_requests: 12}
load: {concurrency: [2], request_rate: [40]}
warmup_requests: 1
isolation: gpus
seed: 7
max_client_lag_ms: 500  # this test is about placement; the 2-core CI machine is loaded
output: OUT
"""


def test_side_by_side_tp_1_2_4(ray_local: None, tmp_path: Path) -> None:
    from cluster.distributed.driver import run_experiment

    spec = parse_spec_text(SPEC.replace("OUT", str(tmp_path / "results")))
    result = run_experiment(spec, base_dir=tmp_path)
    assert set(result.counts()) == {"ok"}, result.statuses

    servers = result.servers
    assert set(servers) == {"a", "b", "c"}
    sets = {}
    for name, info in servers.items():
        gpu_ids = [str(g) for g in info["gpu_ids"]]
        assert len(gpu_ids) == {"a": 1, "b": 2, "c": 4}[name]
        # what the server process itself saw (read from /proc/<pid>/environ right after it started)
        assert info["server_saw_cuda_visible_devices"] == ",".join(gpu_ids)
        assert info["load_actor_cuda_visible_devices"] == ""
        sets[name] = set(gpu_ids)
        assert not pid_alive(info["pid"]), f"server {name} pid {info['pid']} outlived its actor"
    assert sets["a"].isdisjoint(sets["b"]) and sets["a"].isdisjoint(sets["c"]) and sets["b"].isdisjoint(sets["c"])
    # they really ran at the same time
    starts = [i["started_unix_s"] for i in servers.values()]
    stops = [i["stopped_unix_s"] for i in servers.values()]
    assert max(starts) < min(stops)

    root = Path(result.dataset_root) / spec.name
    runs = pd.read_parquet(root / "runs")  # plain pandas reads the hive-partitioned dataset
    requests = pq.read_table(root / "requests").to_pandas()
    assert set(requests["variant"].astype(str)) == {"a", "b", "c"}
    plans = make_plan(spec)
    assert len(runs) == len(plans)
    assert sorted(runs["run_key"]) == sorted(p.run_key for p in plans)
    assert len(requests) == sum(p.workload.num_requests for p in plans)
    assert requests.groupby("run_key").size().eq(12).all()
    assert not requests.duplicated(["run_key", "request_index"]).any()
    shared = {str(r.variant): r.shared_node_with for r in runs.itertuples()}
    assert any(shared.values()), "side-by-side runs must record who shared their node"
    prov = json.loads(runs.iloc[0]["provenance_json"])
    assert prov["engine"] == "sim" and prov["seed"] == runs.iloc[0]["seed"]
