"""The simulator's live responses pass the same SGLang 0.5.23 wire assertions as the hand-made transcripts."""

from __future__ import annotations

import json
import threading
import time

from sglang_wire_contract import (
    check_error_event,
    check_metrics,
    check_metrics_window,
    check_flush,
    check_model_info,
    check_native_error,
    check_native_response,
    check_native_stream,
    check_openai_stream,
    check_server_info,
    split_sse,
)
from sim_process import SimHandle

from cluster.engines.base import Prompt, StreamRequest
from cluster.engines.prometheus import parse_prometheus, sum_metric
from cluster.engines.sglang_dialect import build_sglang_request
from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser

IDS = list(range(1000, 1032))


def _native(h: SimHandle, n: int = 40, stream: bool = True, **extra: object) -> tuple[int, bytes]:
    body = {"input_ids": IDS, "sampling_params": {"max_new_tokens": n, "ignore_eos": True}, "stream": stream}
    body.update(extra)
    return h.post("/generate", body)


def test_native_stream_cumulative(sim_base: SimHandle, sim_spec: SimHandle) -> None:
    finals = []
    for h, spec in ((sim_base, False), (sim_spec, True)):
        status, body = _native(h)
        assert status == 200
        payloads = split_sse(body)
        chunks = check_native_stream(payloads, speculative=spec, spec_steps=3 if spec else None, metrics=True)
        final = chunks[-1]
        assert final["meta_info"]["completion_tokens"] == 40
        assert final["meta_info"]["finish_reason"] == {"type": "length", "length": 40}
        if spec:
            assert len(chunks) < 40, "speculative chunks carry several tokens"
            assert final["meta_info"]["spec_verify_ct"] >= 13
        else:
            assert len(chunks) == 40
        parser = SGLangNativeParser()
        assert sum(parser.feed(p) for p in payloads) == 40
        assert parser.meta().completion_tokens == 40
        finals.append(final)
    assert finals[0]["output_ids"] == finals[1]["output_ids"], "speculative decoding is lossless"
    assert finals[0]["text"] == finals[1]["text"]


def test_native_non_stream_and_batch(sim_spec: SimHandle) -> None:
    status, body = _native(sim_spec, n=12, stream=False)
    assert status == 200
    check_native_response(json.loads(body), speculative=True, spec_steps=3, metrics=True)
    status, body = sim_spec.post("/generate", {"text": ["Reply with OK", "what is 17*19"],
                                               "sampling_params": {"max_new_tokens": 8}})
    out = json.loads(body)
    assert [o["text"] for o in out] == ["OK", "323"]
    assert all(o["meta_info"]["finish_reason"]["type"] == "stop" for o in out)


def test_request_builder_bodies_roundtrip(sim_spec: SimHandle) -> None:
    for api, parser in (("native", SGLangNativeParser()), ("completions", OpenAIStreamParser()),
                        ("chat", OpenAIStreamParser())):
        req = build_sglang_request(StreamRequest(api, Prompt(input_ids=tuple(IDS)), 30, True, 0.0, "sim-model"))
        status, body = sim_spec.post(req.path, json.loads(req.body))
        assert status == 200
        payloads = split_sse(body)
        if api == "native":
            check_native_stream(payloads, speculative=True, spec_steps=3, metrics=True)
        else:
            check_openai_stream(payloads, chat=api == "chat", include_usage=True, continuous_usage=True)
        counted = sum(parser.feed(p) for p in payloads)
        meta = parser.meta()
        assert counted == meta.completion_tokens == 30, api
        assert meta.spec_verify_ct is not None and meta.spec_verify_ct > 0


def test_openai_usage_only_at_end(sim_base: SimHandle) -> None:
    status, body = sim_base.post("/v1/completions", {"prompt": "hello there", "max_tokens": 5, "stream": True,
                                                     "stream_options": {"include_usage": True}})
    payloads = split_sse(body)
    chunks = check_openai_stream(payloads, chat=False, include_usage=True)
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert all(c["usage"] is None for c in chunks[:-1])
    p = OpenAIStreamParser()
    assert sum(p.feed(x) for x in payloads) == 5
    status, body = sim_base.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Reply with OK"}],
                                                          "max_tokens": 5})
    out = json.loads(body)
    assert out["choices"][0]["message"]["content"] == "OK" and out["choices"][0]["finish_reason"] == "stop"


def test_info_endpoints(sim_base: SimHandle, sim_spec: SimHandle) -> None:
    for path in ("/server_info", "/get_server_info"):
        info = json.loads(sim_spec.get(path)[1])
        check_server_info(info)
        assert info["version"] == "0.5.23" and info["speculative_algorithm"] == "EAGLE"
        assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) \
            == (3, 1, 4)
    base = json.loads(sim_base.get("/server_info")[1])
    check_server_info(base)
    assert base["max_running_requests"] == 8 and base["speculative_algorithm"] is None
    for path in ("/model_info", "/get_model_info"):
        check_model_info(json.loads(sim_base.get(path)[1]))
    models = json.loads(sim_base.get("/v1/models")[1])
    assert models["data"][0]["id"] == "sim-model"


def test_flush_busy_then_idle_and_spec_counters_reset(sim_spec: SimHandle) -> None:
    _native(sim_spec, n=20)
    st = json.loads(sim_spec.get("/server_info")[1])["internal_states"][0]
    assert st["avg_spec_accept_length"] > 1.0
    done = threading.Event()
    t = threading.Thread(target=lambda: (_native(sim_spec, n=3000), done.set()))
    t.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            m = parse_prometheus(sim_spec.get("/metrics")[1].decode())
            if sum_metric(m, "sglang:num_running_reqs"):
                break
            time.sleep(0.01)
        status, text = sim_spec.post("/flush_cache")
        check_flush(status, text.decode(), busy=True)
        status, text = sim_spec.post("/flush_cache?timeout=20")
        check_flush(status, text.decode(), busy=False)
    finally:
        t.join(30)
    st = json.loads(sim_spec.get("/server_info")[1])["internal_states"][0]
    assert "avg_spec_accept_length" not in st, "flush resets the speculative counters"
    status, text = sim_spec.get("/flush_cache")
    check_flush(status, text.decode(), busy=False)


def test_metrics_names(sim_spec: SimHandle, sim_base: SimHandle) -> None:
    _native(sim_spec, n=10)
    text = sim_spec.get("/metrics")[1].decode()
    samples = parse_prometheus(text)
    names = {n for n, _, _ in samples}
    for n in ("num_running_reqs", "num_queue_reqs", "gen_throughput", "token_usage", "spec_accept_length",
              "spec_verify_calls_total", "generation_tokens_total", "prompt_tokens_total", "num_requests_total"):
        assert "sglang:" + n in names, n
    assert (sum_metric(samples, "sglang:generation_tokens_total") or 0) >= 10
    assert "sglang:spec_verify_calls_total" not in {n for n, _, _ in parse_prometheus(sim_base.get("/metrics")[1].decode())}


def test_incremental_and_stream_interval(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory(["--incremental-streaming-output", "--stream-interval", "4"])
    status, body = _native(h, n=18)
    payloads = split_sse(body)
    chunks = check_native_stream(payloads, incremental=True, metrics=False)
    assert [len(c["output_ids"]) for c in chunks] == [1, 4, 4, 4, 4, 1], \
        "18 tokens at stream interval 4: the first token at once, then every 4 unsent, then the final one"
    assert "".join(c["text"] for c in chunks).count("tok") == 18
    p = SGLangNativeParser(keep_text=True)
    assert sum(p.feed(x) for x in payloads) == 18
    status, _ = h.get("/metrics")
    assert status == 404, "/metrics needs --enable-metrics"


def test_bad_request_is_400(sim_base: SimHandle) -> None:
    status, body = sim_base.post("/generate", {"sampling_params": {}})
    assert status == 400 and "error" in json.loads(body)


def test_negative_max_new_tokens_is_rejected_as_sglang_does(sim_base: SimHandle) -> None:
    """Real SGLang 0.5.23: 400 {"error": {"message"}}; streamed, one error event and [DONE] (the old sim: 200)."""
    status, body = _native(sim_base, n=-1, stream=False)
    check_native_error(status, json.loads(body), "max_new_tokens must be at least 0, got -1.")
    status, body = _native(sim_base, n=-1, stream=True)
    assert status == 200
    err = check_error_event(split_sse(body))
    assert err["message"] == "max_new_tokens must be at least 0, got -1."
    p = SGLangNativeParser()
    assert sum(p.feed(x) for x in split_sse(body)) == 0 and p.meta().error == err["message"]


def test_metrics_counters_match_requests_like_sglang(sim_spec: SimHandle, sim_base: SimHandle) -> None:
    """SGLang's label sets (is_streaming on the counters, no rank labels on spec_verify_calls_total) and the
    window identity the tier asserts on the real server: counter deltas = per-request sums."""
    for h, spec in ((sim_spec, True), (sim_base, False)):
        before = h.get("/metrics")[1].decode()
        finals = [json.loads(_native(h, n=12, stream=False)[1])["meta_info"]]
        finals.append(json.loads(split_sse(_native(h, n=9)[1])[-1])["meta_info"])
        after = h.get("/metrics")[1].decode()
        check_metrics(after, speculative=spec)
        check_metrics_window(before, after, finals)
