"""One set of SGLang 0.5.23 wire-format assertions, run over hand-made transcripts and the simulator's responses."""

from __future__ import annotations

import json
from typing import Any, Optional

META_KEYS = ("id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions", "reasoning_tokens",
             "completion_tokens", "cached_tokens")
SPEC_META_KEYS = ("spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
                  "spec_num_proposed_drafts")
MODEL_INFO_KEYS = ("model_path", "served_model_name", "tokenizer_path", "is_generation", "preferred_sampling_params",
                   "weight_version", "load_format", "reasoning_parser", "tool_call_parser", "disaggregation_mode",
                   "has_image_understanding", "has_audio_understanding", "model_type", "architectures")
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
DONE = b"[DONE]"


def split_sse(body: bytes) -> list[bytes]:
    """SSE body → data payloads (without `data: `), asserting the framing; `[DONE]` is checked and dropped."""
    assert body.endswith(b"\n\n"), "an SSE body ends with a blank line"
    events = body[:-2].split(b"\n\n")
    payloads: list[bytes] = []
    for ev in events:
        assert ev.startswith(b"data: "), f"every event is one `data: ` line, got {ev[:40]!r}"
        assert b"\n" not in ev, "one line per event"
        payloads.append(ev[len(b"data: "):])
    assert payloads and payloads[-1] == DONE, "the stream ends with data: [DONE]"
    assert payloads.count(DONE) == 1, "exactly one [DONE]"
    return payloads[:-1]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_meta_info(mi: dict[str, Any], final: bool, speculative: Optional[bool] = None) -> None:
    for k in META_KEYS:
        assert k in mi, f"meta_info lacks {k}"
    assert isinstance(mi["id"], str)
    for k in ("prompt_tokens", "num_retractions", "reasoning_tokens", "completion_tokens", "cached_tokens"):
        assert _is_int(mi[k]) and mi[k] >= 0, f"meta_info.{k} is a non-negative int"
    if not final:
        assert mi["finish_reason"] is None, "finish_reason is null until the last chunk"
        assert "e2e_latency" not in mi
        return
    fr = mi["finish_reason"]
    assert isinstance(fr, dict) and fr.get("type") in ("length", "stop", "abort"), f"bad finish_reason {fr!r}"
    if fr["type"] == "length":
        assert fr["length"] == mi["completion_tokens"]
    assert isinstance(mi["e2e_latency"], float) and mi["e2e_latency"] >= 0
    has_spec = "spec_verify_ct" in mi
    if speculative is False:
        assert not has_spec, "no spec fields without speculative decoding"
    if has_spec:
        for k in SPEC_META_KEYS:
            assert k in mi, f"speculative meta_info lacks {k}"
        assert _is_int(mi["spec_verify_ct"]) and mi["spec_verify_ct"] > 0
        assert abs(mi["spec_accept_length"] - mi["completion_tokens"] / mi["spec_verify_ct"]) < 1e-9
        assert 0.0 <= mi["spec_accept_rate"] <= 1.0
        assert mi["spec_num_correct_drafts"] <= mi["spec_num_proposed_drafts"]


def check_native_response(obj: dict[str, Any], speculative: Optional[bool] = None) -> None:
    assert isinstance(obj["text"], str)
    assert isinstance(obj["output_ids"], list) and all(_is_int(t) for t in obj["output_ids"])
    check_meta_info(obj["meta_info"], final=True, speculative=speculative)
    assert len(obj["output_ids"]) == obj["meta_info"]["completion_tokens"]


def check_native_stream(payloads: list[bytes], incremental: bool = False,
                        speculative: Optional[bool] = None) -> list[dict[str, Any]]:
    """Native /generate stream: cumulative (default) or incremental bodies, cumulative completion_tokens."""
    chunks = [json.loads(p) for p in payloads]
    assert chunks, "at least one chunk"
    prev_ct, prev_text, ids_total = 0, "", 0
    for i, c in enumerate(chunks):
        final = i == len(chunks) - 1
        assert set(c) >= {"text", "output_ids", "meta_info"}
        mi = c["meta_info"]
        check_meta_info(mi, final=final, speculative=speculative)
        ct = mi["completion_tokens"]
        assert ct >= prev_ct, "completion_tokens is cumulative and non-decreasing"
        if incremental:
            ids_total += len(c["output_ids"])
            assert ids_total == ct, "incremental output_ids add up to completion_tokens"
        else:
            assert len(c["output_ids"]) == ct, "cumulative output_ids has completion_tokens ids"
            assert c["text"].startswith(prev_text), "cumulative text grows"
            prev_text = c["text"]
        prev_ct = ct
        assert len({x["meta_info"]["id"] for x in chunks}) == 1, "one request id per stream"
    return chunks


def check_openai_stream(payloads: list[bytes], chat: bool, include_usage: bool,
                        continuous_usage: bool = False) -> list[dict[str, Any]]:
    """OpenAI-compatible stream; usage chunk (choices == []) just before [DONE]; finish_reason only on the last
    content chunk."""
    chunks = [json.loads(p) for p in payloads]
    obj = "chat.completion.chunk" if chat else "text_completion"
    content = [c for c in chunks if c["choices"]]
    extra = [c for c in chunks if not c["choices"]]
    for c in chunks:
        for k in ("id", "object", "created", "model", "choices"):
            assert k in c, f"chunk lacks {k}"
        assert c["object"] == obj
        assert _is_int(c["created"])
    assert content, "at least one content chunk"
    last_content_idx = chunks.index(content[-1])
    assert all(not c["choices"] for c in chunks[last_content_idx + 1:]), "no content after the finishing chunk"
    prev_ct = -1
    for i, c in enumerate(content):
        (ch,) = c["choices"]
        assert ch["index"] == 0
        if chat:
            assert isinstance(ch["delta"], dict)
        else:
            assert isinstance(ch["text"], str)
        if i < len(content) - 1:
            assert ch["finish_reason"] is None, "finish_reason null except on the last content chunk"
        else:
            assert ch["finish_reason"] in ("length", "stop")
        if continuous_usage:
            u = c["usage"]
            assert isinstance(u, dict) and u["completion_tokens"] >= prev_ct, "continuous usage is cumulative"
            prev_ct = u["completion_tokens"]
    for c in extra:
        assert c.get("usage") or c.get("sglext"), "a choices-less chunk carries usage or sglext"
        if c.get("sglext"):
            d = c["sglext"]["spec_tokens_details"]
            assert _is_int(d["spec_verify_ct"]) and d["spec_verify_ct"] > 0
    if include_usage:
        last = chunks[-1]
        assert last["choices"] == [], "the usage chunk has choices == [] and comes just before [DONE]"
        u = last["usage"]
        for k in USAGE_KEYS:
            assert _is_int(u[k])
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        if continuous_usage:
            assert u["completion_tokens"] == prev_ct
    return chunks


def check_server_info(info: dict[str, Any]) -> None:
    for k in ("model_path", "tp_size", "max_running_requests", "served_model_name", "launch_command", "version",
              "internal_states"):
        assert k in info, f"server_info lacks {k}"
    assert isinstance(info["version"], str) and isinstance(info["launch_command"], str)
    states = info["internal_states"]
    assert isinstance(states, list) and states and all(isinstance(s, dict) for s in states)
    st = states[0]
    assert "last_gen_throughput" in st
    if not info.get("speculative_algorithm"):
        assert "avg_spec_accept_length" not in st
    elif "avg_spec_accept_length" in st:
        assert st["avg_spec_accept_length"] >= 1.0


def check_model_info(info: dict[str, Any]) -> None:
    for k in MODEL_INFO_KEYS:
        assert k in info, f"model_info lacks {k}"
    assert info["is_generation"] is True and isinstance(info["architectures"], list)


def check_flush(status: int, text: str, busy: bool) -> None:
    if busy:
        assert status == 400 and "not flushed" in text.lower()
    else:
        assert status == 200 and text.startswith("Cache flushed")
