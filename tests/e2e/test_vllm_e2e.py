"""e2e tier: a real vLLM CPU server on a tiny locally built model, driven directly and through the Ray driver."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from cluster.engines.base import Prompt
from cluster.engines.vllm import VLLMEngine, acceptance_from_counters
from cluster.plan.runs import LoadPoint, ResolvedVariant, SpecDecode, make_plan
from cluster.server.process import ServerProcess, ServerStartError, free_port, group_members, wait_group_gone
from cluster.spec.models import EngineLauncher, ExperimentSpec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HEALTH_TIMEOUT_S = 300.0
STOP_GRACE_S = 30.0
OUTPUT_TOKENS = 32
PROMPT_VOCAB = 900
"""Prompt ids stay below the tiny tokenizer's ~980 entries."""
SERVER_ARGS: dict[str, Any] = {"enforce-eager": True, "max-model-len": 2048, "max-running-requests": 8}
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


# ---------------------------------------------------------------- a server started by the test itself


@pytest.fixture
def ngram_server(vllm_python: str, tiny_model: Path, tmp_path: Path) -> Iterator[tuple[str, ServerProcess]]:
    variant = ResolvedVariant(
        name="ngram", engine="vllm", tp=1, model_path=str(tiny_model), args=dict(SERVER_ARGS), env=dict(SERVER_ENV),
        speculative=SpecDecode("NGRAM", 3, 1, 4),
    )
    engine = VLLMEngine()
    port = free_port()
    cmd = engine.launch(variant, "127.0.0.1", port, EngineLauncher(python=vllm_python), vllm_python)
    env = dict(os.environ)
    env.update(cmd.env)
    server = ServerProcess(cmd.argv, env, tmp_path / "vllm-ngram.log", watchdog=False)
    server.start()
    base_url = f"http://127.0.0.1:{port}"
    try:
        waited_s = server.wait_healthy(base_url, engine.health_path, HEALTH_TIMEOUT_S, poll_s=0.5)
        print(f"[e2e] vLLM ngram server healthy in {waited_s:.1f} s (pid {server.pid})")
        yield base_url, server
    except ServerStartError as e:
        pytest.fail(f"vLLM: {e}:\n{e.log_tail[-3000:]}")
    finally:
        pgid = server.pid
        server.stop(STOP_GRACE_S)  # SIGTERM to the group, SIGKILL after the grace period
        assert pgid is not None and wait_group_gone(pgid, 10) == [], "vLLM processes outlived SIGKILL of their group"


def test_ngram_server_direct_load(ngram_server: tuple[str, ServerProcess], tiny_model: Path) -> None:
    from cluster.loadgen.runner import flush, run_load_point

    base_url, server = ngram_server
    engine = VLLMEngine()
    assert asyncio.run(flush(engine, base_url, 30.0)) is True
    rng = np.random.default_rng(7)
    prompts = [Prompt(input_ids=tuple(int(x) for x in rng.integers(3, PROMPT_VOCAB, 24))) for _ in range(8)]
    t0 = time.monotonic()
    res = run_load_point(engine, base_url, "completions", prompts, OUTPUT_TOKENS, LoadPoint("concurrency", 4.0), 7,
                         True, 0.0, str(tiny_model), 120.0)
    print(f"[e2e] 8 requests at concurrency 4 in {time.monotonic() - t0:.1f} s")
    rows = res.requests.to_pylist()
    assert len(rows) == len(prompts)
    for r in rows:
        assert r["error"] is None, r["error"]
        assert r["http_status"] == 200
        ttft_ns = r["first_chunk_ns"] - r["actual_send_ns"]
        e2e_ns = r["last_chunk_ns"] - r["actual_send_ns"]
        assert 0 < ttft_ns < e2e_ns
        assert r["completion_tokens"] == OUTPUT_TOKENS  # ignore_eos: exactly max_tokens
        assert r["client_tokens"] == r["completion_tokens"]
        assert r["prompt_tokens"] == 24
        assert r["finish_reason"] == "length"
    # a speculative chunk carries several tokens: fewer token-carrying chunks than tokens overall
    assert res.chunks.num_rows < len(prompts) * OUTPUT_TOKENS
    assert {"drafts", "draft_tokens", "accepted_tokens", "accepted_pos_0", "accepted_pos_2"} <= set(res.counters_after)
    acc = acceptance_from_counters(res.counters_before, res.counters_after)
    assert 1.0 <= acc["accept_length"] <= 4.0
    assert 0.0 <= acc["acceptance_rate"] <= 1.0
    assert {"accept_rate_pos_0", "accept_rate_pos_1", "accept_rate_pos_2"} <= set(acc)
    assert acc["accept_rate_pos_0"] >= acc["accept_rate_pos_2"]  # a later position is accepted only after earlier ones
    print(f"[e2e] ngram window acceptance: {json.dumps(acc, sort_keys=True)}")
    assert server.alive()


# ---------------------------------------------------------------- the whole pipeline through the Ray driver


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_gpus=8, num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2)
    try:
        yield
    finally:
        ray.shutdown()


def _spec(model: Path, python: str, out: Path, n_requests: int) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "vllm-e2e",
        "model": {"path": str(model), "engine": "vllm", "tp": 1},
        "engines": {"vllm": {"python": python}},
        "server": {"args": dict(SERVER_ARGS), "env": dict(SERVER_ENV)},
        "variants": [
            {"name": "baseline", "engine": "vllm", "baseline": True},
            {"name": "ngram", "engine": "vllm", "speculative": {"algorithm": "NGRAM", "num_steps": 3}},
        ],
        "workloads": [{
            "name": "short", "input_tokens": 24, "output_tokens": OUTPUT_TOKENS, "num_requests": n_requests,
            "api": "completions", "prompts": {"source": "random_ids", "vocab_size": PROMPT_VOCAB},
        }],
        "load": {"concurrency": [1, 4]},
        "warmup_requests": 2,
        "output": str(out),
        "health_timeout_s": HEALTH_TIMEOUT_S,
        "request_timeout_s": 120.0,
        # two shared CPU cores run the server and the client: judge the server, not the machine's neighbours
        "max_client_lag_ms": 500.0,
        # random weights cannot answer the gate's questions (the gate rightly fails them): measure anyway
        "correctness": {"enabled": False},
    })


@pytest.mark.ray
def test_experiment_through_driver(local_ray: None, vllm_python: str, tiny_model: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.distributed.driver import run_experiment
    from cluster.dataset.store import DatasetStore

    monkeypatch.setenv("SGLBENCH_LOG_DIR", str(tmp_path / "logs"))
    n_requests = 12
    spec = _spec(tiny_model, vllm_python, tmp_path / "results", n_requests)
    plans = make_plan(spec)
    t0 = time.monotonic()
    result = run_experiment(spec, base_dir=tmp_path, output_root=str(tmp_path / "results"))
    print(f"[e2e] driver ran {len(plans)} runs in {time.monotonic() - t0:.1f} s; servers: "
          + ", ".join(f"{v}: healthy in {s.get('startup_s', float('nan')):.1f} s" for v, s in result.servers.items()))

    store = DatasetStore(result.dataset_root, spec.name)
    runs = store.read_table("runs").to_pylist()
    reasons = {r["variant"] + "/" + str(r["load_value"]): (r["status"], r["failure_reason"], r["invalid_reasons"],
                                                          (r["log_tail"] or "")[-1500:]) for r in runs}
    assert {p.run_key for p in plans} == set(result.statuses), result.statuses
    assert all(s == "ok" for s in result.statuses.values()), reasons
    assert len(runs) == len(plans) and {r["run_key"] for r in runs} == {p.run_key for p in plans}

    reqs = store.read_table("requests").to_pylist()
    per_run: dict[str, int] = {}
    for r in reqs:
        per_run[r["run_key"]] = per_run.get(r["run_key"], 0) + 1
        assert r["engine"] == "vllm"
        assert r["error"] is None, r["error"]
        assert r["first_chunk_ns"] - r["actual_send_ns"] < r["last_chunk_ns"] - r["actual_send_ns"]  # TTFT < E2E
        assert r["completion_tokens"] == OUTPUT_TOKENS
        assert r["client_tokens"] == r["completion_tokens"]
    assert per_run == {p.run_key: n_requests for p in plans}

    for r in runs:
        metrics = json.loads(r["metrics_json"])
        counters = json.loads(r["server_counters_json"])
        accept = metrics.get("accept_length")
        if accept is None:
            accept = metrics.get("accept_length_server_counters")
        if r["variant"] == "ngram":
            assert accept is not None and 1.0 < accept <= 4.0, metrics
            acc = acceptance_from_counters(counters["before"], counters["after"])
            assert acc["accept_length"] == pytest.approx(accept)
            assert "accept_rate_pos_2" in acc
        else:
            assert accept is None, metrics
            assert "drafts" not in counters.get("after", {})

    assert set(result.servers) == {"baseline", "ngram"}
    for variant, info in result.servers.items():
        assert group_members(int(info["pgid"])) == [], f"{variant}: server processes still alive after the run"
