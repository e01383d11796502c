"""--api-key end to end: the simulator refuses what SGLang 0.5.23 refuses (401 without the bearer key; /health and
/metrics exempt), and the engine adapter bound to the variant's key makes the load client, the gate, the flush and
the info GETs send it."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Callable

import pytest

from cluster.engines.base import Prompt, api_key_of
from cluster.engines.sglang import SGLangEngine
from cluster.loadgen.gate import collect_gate_answers
from cluster.kernel.window_job import WindowJob
from cluster.loadgen.runner import flush, run_load_point
from cluster.kernel.runs import LoadPoint
from cluster.server.process import http_get_json

from sim_process import SimHandle

KEY = "sk-planted-api-key-4f1c"


def _status(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_the_simulator_enforces_the_key_as_sglang_does(sim_factory: Callable[..., SimHandle]) -> None:
    h = sim_factory(["--enable-metrics", "--api-key", KEY])
    bearer = {"Authorization": f"Bearer {KEY}"}
    for path in ("/server_info", "/model_info", "/v1/models", "/flush_cache"):
        assert _status(h.base + path, {}) == 401, path
        assert _status(h.base + path, {"Authorization": "Bearer wrong"}) == 401, path
        assert _status(h.base + path, {"Authorization": KEY}) == 401, path  # the scheme is required
        assert _status(h.base + path, bearer) == 200, path
    for path in ("/health", "/health_generate", "/metrics"):  # k8s probes and Prometheus need no key
        assert _status(h.base + path, {}) == 200, path
    status, body = h.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})
    assert status == 401 and json.loads(body) == {"error": "Unauthorized"}


def test_the_bound_engine_sends_the_key_everywhere(sim_factory: Callable[..., SimHandle]) -> None:
    h = sim_factory(["--enable-metrics", "--api-key", KEY])
    plain = SGLangEngine()
    engine = plain.with_api_key(api_key_of({"api-key": KEY}))
    assert engine.headers == {"Authorization": f"Bearer {KEY}"} and plain.headers == {}
    assert KEY not in repr(engine)
    prompts = [Prompt(input_ids=(100 + i, 101, 102)) for i in range(4)]
    job = WindowJob(h.base, "native", 4, LoadPoint("concurrency", 2.0), 0, True, 0.0, "m", 30.0)
    ok = run_load_point(engine, job, prompts)
    assert [r["error"] for r in ok.requests.to_pylist()] == [None] * 4
    refused = run_load_point(plain, replace(job, scrape_metrics=False), prompts)
    assert all("401" in (r["error"] or "") for r in refused.requests.to_pylist())
    answers = asyncio.run(collect_gate_answers(engine, h.base, "m", 30.0))
    assert all(o.error is None for o in answers.outputs.values())
    assert all("401" in (o.error or "") for o in asyncio.run(collect_gate_answers(plain, h.base, "m", 30.0))
               .outputs.values())
    assert asyncio.run(flush(engine, h.base, 5.0)) is True
    assert asyncio.run(flush(plain, h.base, 1.0)) is False
    info = http_get_json(h.base + "/server_info", headers=engine.headers)
    assert info["api_key"] == KEY  # SGLang echoes it too: the actor scrubs infos before they are stored


def test_a_variant_without_a_key_sends_no_header() -> None:
    assert SGLangEngine().with_api_key(api_key_of({"max-running-requests": 8})).headers == {}
    assert api_key_of({"api_key": KEY}) == KEY


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_openai_paths_need_the_key(sim_factory: Callable[..., SimHandle], path: str) -> None:
    h = sim_factory(["--api-key", KEY])
    status, _ = h.post(path, {"model": "m", "prompt": "hi", "messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 2})
    assert status == 401
