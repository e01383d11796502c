"""Two load actors drive one server as shards of each window; records stream out of the actors in small Arrow
batches and reach the dataset exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cluster.config.loader import parse_spec_text

pytestmark = pytest.mark.ray

SPEC = """
version: 1
name: scaleout
model: {{path: sim://scaleout, engine: sim}}
server: {{args: {{max-running-requests: 16, kv-cache-dtype: bf16, attention-backend: flashinfer}}}}
sim: {{time_scale: 0.01}}
variants:
  - {{name: a, baseline: true}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 12, num_requests: 60}}
load: {{concurrency: [4], request_rate: [200], actors_per_server: 2}}
warmup_requests: 2
max_client_lag_ms: 1000
output: {out}
"""


def test_two_load_actors_stream_small_batches_exactly_once(ray_local: None, tmp_path: Path) -> None:
    from cluster.distributed.driver import Driver

    spec = parse_spec_text(SPEC.format(out=tmp_path / "results"))
    drv = Driver(spec, tmp_path, None, lambda s: None, lambda p, s: None)
    drv.batch_rows = 7
    result = drv.run()
    assert set(result.counts()) == {"ok"}, result.statuses
    root = Path(result.dataset_root) / spec.name
    runs = pd.read_parquet(root / "runs")
    reqs = pd.read_parquet(root / "requests")
    chunks = pd.read_parquet(root / "chunks")
    for r in runs.itertuples():
        mine = reqs[reqs["run_key"] == r.run_key]
        assert sorted(mine["request_index"]) == list(range(60)), "every request exactly once across both shards"
        got = chunks[chunks["run_key"] == r.run_key].groupby("request_index").size()
        expected = mine.set_index("request_index")["num_chunks"]
        assert got.reindex(expected.index, fill_value=0).tolist() == expected.tolist()
        prov = json.loads(r.provenance_json)
        assert prov["load_actors"] == 2
        assert 1 <= prov["load_actor_peak_buffered_rows"] <= 7, "records left the actors in batches of ≤ 7"
