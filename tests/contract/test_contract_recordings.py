"""The wire assertions run over real SGLang 0.5.23 CPU-server recordings (tests/sglang_cpu/record_transcripts.py)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from sglang_wire_contract import (
    check_error_event,
    check_flush,
    check_metrics,
    check_metrics_window,
    check_model_info,
    check_native_error,
    check_native_response,
    check_native_stream,
    check_openai_stream,
    check_server_info,
    split_sse,
)

from cluster.engines.sglang import SGLangEngine
from cluster.engines.sglang_server_info import server_info_summary
from cluster.engines.streams import OpenAIStreamParser, SGLangNativeParser

FIXTURES = Path(__file__).with_name("fixtures") / "sglang-0.5.23-cpu"
SERVERS = ("baseline", "nextn3")
NEG_MESSAGE = "max_new_tokens must be at least 0, got -1."


def load(tag: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{tag}.json").read_text())


def exchanges(tag: str) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in load(tag)["exchanges"]}


def spec_steps(tag: str) -> int | None:
    return int(tag.removeprefix("nextn")) if tag.startswith("nextn") else None


def _sse(e: dict[str, Any]) -> list[bytes]:
    return split_sse(e["sse"].encode())


def final_metas(ex: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """meta_info of every request finished between metrics_before and metrics_after (from /generate answers)."""
    out: list[dict[str, Any]] = []
    for name in ("generate_nonstream", "generate_gate"):
        out.append(ex[name]["json"]["meta_info"])
    out += [o["meta_info"] for o in ex["generate_batch"]["json"]]
    for name in ("generate_stream", "generate_stream_adapter"):
        out.append(json.loads(_sse(ex[name])[-1])["meta_info"])
    return out


def test_fixtures_are_small_and_redacted() -> None:
    total = sum(p.stat().st_size for p in FIXTURES.glob("*.json"))
    assert {p.stem for p in FIXTURES.glob("*.json")} >= set(SERVERS)
    assert total < 300_000, total
    for p in FIXTURES.glob("*.json"):
        text = p.read_text()
        for marker in ("/tmp/", "/work/", "/root/", socket.gethostname()):
            assert marker not in text, (p.name, marker)
        assert not re.search(r'pid=\\"[1-9]', text), "pids are normalised"
        assert load(p.stem)["sglang_version"] == "0.5.23"


@pytest.mark.parametrize("tag", SERVERS)
def test_recorded_native_generate(tag: str) -> None:
    ex = exchanges(tag)
    spec, steps = tag != "baseline", spec_steps(tag)
    for name in ("generate_nonstream", "generate_gate"):
        assert ex[name]["status"] == 200 and ex[name]["content_type"] == "application/json"
        check_native_response(ex[name]["json"], speculative=spec, spec_steps=steps, metrics=True)
    batch = ex["generate_batch"]["json"]
    assert isinstance(batch, list) and len(batch) == 2
    for obj in batch:
        check_native_response(obj, speculative=spec, spec_steps=steps, metrics=True)
    for name in ("generate_stream", "generate_stream_adapter"):
        e = ex[name]
        assert e["status"] == 200 and e["content_type"] == "text/event-stream"
        payloads = _sse(e)
        chunks = check_native_stream(payloads, speculative=spec, spec_steps=steps, metrics=True)
        parser = SGLangNativeParser()
        assert sum(parser.feed(p) for p in payloads) == chunks[-1]["meta_info"]["completion_tokens"]
        meta = parser.meta()
        assert meta.spec_verify_ct == chunks[-1]["meta_info"].get("spec_verify_ct")
        assert meta.finish_reason == "length"


def test_recorded_nextn_is_lossless_and_multi_token() -> None:
    base, spec = exchanges("baseline"), exchanges("nextn3")
    for name in ("generate_nonstream", "generate_stream_adapter"):
        b = base[name]["json"] if "json" in base[name] else json.loads(_sse(base[name])[-1])
        s = spec[name]["json"] if "json" in spec[name] else json.loads(_sse(spec[name])[-1])
        assert b["output_ids"] == s["output_ids"], f"{name}: NEXTN changed greedy tokens"
    assert len(_sse(spec["generate_stream"])) < len(_sse(base["generate_stream"])), \
        "NEXTN events carry several tokens each"


@pytest.mark.parametrize("tag", SERVERS)
def test_recorded_openai_endpoints(tag: str) -> None:
    ex = exchanges(tag)
    for name, chat in (("completions_stream_adapter", False), ("chat_stream_adapter", True)):
        e = ex[name]
        assert e["status"] == 200 and e["content_type"] == "text/event-stream"
        payloads = _sse(e)
        chunks = check_openai_stream(payloads, chat=chat, include_usage=True, continuous_usage=True)
        parser = OpenAIStreamParser()
        counted = sum(parser.feed(p) for p in payloads)
        assert counted == parser.meta().completion_tokens == chunks[-1]["usage"]["completion_tokens"]
        if tag != "baseline":
            assert parser.meta().spec_verify_ct, f"{name}: return_spec_tokens_details gives spec_verify_ct"
    for name, obj in (("completions_nonstream", "text_completion"), ("chat_nonstream", "chat.completion")):
        e = ex[name]
        assert e["status"] == 200
        doc = e["json"]
        assert doc["object"] == obj and len(doc["choices"]) == 1
        u = doc["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


@pytest.mark.parametrize("tag", SERVERS)
def test_recorded_errors(tag: str) -> None:
    ex = exchanges(tag)
    e = ex["error_negative_max_new_tokens"]
    check_native_error(e["status"], e["json"], NEG_MESSAGE)
    e = ex["error_negative_max_new_tokens_stream"]
    assert e["status"] == 200 and e["content_type"] == "text/event-stream"
    payloads = _sse(e)
    assert check_error_event(payloads)["message"] == NEG_MESSAGE
    p = SGLangNativeParser()
    assert sum(p.feed(x) for x in payloads) == 0 and p.meta().error == NEG_MESSAGE
    assert ex["error_no_prompt"]["status"] == 400
    assert ex["error_completions_negative_max_tokens"]["status"] == 400


@pytest.mark.parametrize("tag", SERVERS)
def test_recorded_info_metrics_flush(tag: str) -> None:
    ex = exchanges(tag)
    info = ex["server_info"]["json"]
    check_server_info(info)
    summary = server_info_summary(info)
    if tag == "baseline":
        assert summary["speculative_algorithm"] is None
    else:
        assert summary["speculative_algorithm"] == "EAGLE" and summary["speculative_num_steps"] == 3
        assert summary["max_running_requests"] == summary["effective_max_running_requests_per_dp"] == 48
    assert "internal_states" not in SGLangEngine().resolved_args({"server_info": info})
    check_model_info(ex["model_info"]["json"])
    assert ex["v1_models"]["json"]["data"][0]["id"] == "tiny"
    check_metrics(ex["metrics_after"]["text"], speculative=tag != "baseline")
    check_metrics_window(ex["metrics_before"]["text"], ex["metrics_after"]["text"], final_metas(ex))
    e = ex["flush_cache_idle"]
    check_flush(e["status"], e.get("text", ""), busy=False)
    e = ex["flush_cache_busy"]
    if e["busy_seen_in_metrics"]:
        check_flush(e["status"], e.get("text", ""), busy=True)
    assert ex["health"]["status"] == 200
