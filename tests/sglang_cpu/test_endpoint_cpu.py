"""A real SGLang 0.5.23 CPU server started here, outside sglbench, measured as `deployment: {kind: endpoint}` through
the driver on local Ray: nothing launched or stopped by sglbench, its /server_info (which lists its api_key) and
/v1/models recorded with the key masked, and a restart between the two repeats (its /server_info startup_time
changes) makes the second run invalid, naming that. CPU numbers with stand-in kernels, never GPU numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cpu_pipeline import load, run, table
from sglang_cpu_server import SGLangCPUServer

pytestmark = pytest.mark.ray

KEY = "planted-sglang-endpoint-key-3b9f"
KEY_ENV = "SGLBENCH_TEST_SGLANG_ENDPOINT_KEY"


def _spec(url: str, model: Path, out: Path) -> str:
    return f"""
version: 1
name: endpoint-cpu
model: {{path: {model}, engine: sglang, tp: 1, served_name: tiny}}
variants:
  - name: outside
    deployment: {{kind: endpoint, url: "{url}", api_key_env: {KEY_ENV}, flush_cache: true}}
workloads:
  - {{name: w, input_tokens: 16, output_tokens: 16, num_requests: 4, prompts: {{source: random_ids, vocab_size: 900}}}}
load: {{concurrency: [2]}}
repeats: 2
warmup_requests: 1
correctness: {{enabled: true, check_answers: false, max_new_tokens: 16}}
request_timeout_s: 300
max_client_lag_ms: 1000
output: {out}
"""


def test_real_sglang_started_outside_measured_as_an_endpoint_and_its_restart_seen(
        ray_local: None, sglang_cpu_python: Path, mimo_models: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = SGLangCPUServer(python=sglang_cpu_python, model=mimo_models / "echo", log_path=tmp_path / "server.log",
                             extra_args=["--attention-backend", "intel_amx", "--disable-cuda-graph",
                                         "--disable-overlap-schedule", "--kv-cache-dtype", "bf16",
                                         "--max-running-requests", "16", "--api-key", KEY])
    monkeypatch.setenv(KEY_ENV, KEY)
    spec = load(_spec(server.url, mimo_models / "echo", tmp_path / "results"))
    restarted: list[str] = []

    def restart_after_first(drv: Any, plan: Any, status: str) -> None:
        if not restarted:  # under the experiment, on the same port, by this test's own handle
            server.stop()
            server.start()
            restarted.append(plan.run_key)

    server.start()
    try:
        result = run(spec, tmp_path, on_run=restart_after_first)
        assert server.proc is not None and server.proc.poll() is None, "sglbench stopped a server it did not launch"
    finally:
        server.stop()
    runs = table(result, spec, "runs").sort_values("order_index")
    assert list(runs["status"]) == ["ok", "invalid"], runs[["status", "invalid_reasons", "failure_reason"]]
    assert list(runs["launched_by_sglbench"]) == [False, False]
    reason = runs.iloc[1]["invalid_reasons"]
    assert f"endpoint {server.url} restarted under the run" in reason and "server_info.startup_time" in reason
    prov = json.loads(runs.iloc[0]["provenance_json"])
    ep = prov["endpoint"]
    startup = json.loads(ep["start_mark"])
    assert {"load_weight", "scheduler_e2e", "tokenizer_e2e"} <= set(startup), startup  # SGLang's own durations
    assert ep["server_info"]["version"] == "0.5.23" and ep["server_info"]["api_key"] != KEY
    assert [m["id"] for m in ep["models"]["data"]] == ["tiny"]
    assert prov["correctness"]["passed"] is True
    files = [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    leaked = [str(p) for p in files if KEY in p.read_bytes().decode("utf-8", "replace")
              or (p.suffix == ".parquet" and KEY in str(table_rows(p)))]
    assert not leaked


def table_rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows
