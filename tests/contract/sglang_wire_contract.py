"""One set of SGLang 0.5.23 wire-format assertions, run over hand-made transcripts and the simulator's responses."""

from __future__ import annotations

import json
from typing import Any, Optional

META_HEAD_KEYS = ("id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions", "storage_prefetch_wait",
                  "storage_staging_wait", "forward_entry_time", "prefill_finished_time", "queue_time",
                  "reasoning_tokens", "completion_tokens", "cached_tokens")
"""meta_info keys of every /generate event, in SGLang 0.5.23's order (recorded: fixtures/sglang-0.5.23-cpu)."""
META_KEYS = META_HEAD_KEYS
SPEC_META_KEYS = ("spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts",
                  "spec_verify_ct", "spec_correct_drafts_histogram")
"""The speculative keys, final event only, right after e2e_latency, in this order (tokenizer_manager
_calculate_spec_decoding_metrics); the histogram is left out while it is empty."""
METRICS_META_KEYS = ("request_received_ts", "first_token_latency", "api_server_dispatch_finish_ts",
                     "response_sent_to_client_ts", "request_finished_ts", "decode_throughput")
"""Final-event request timestamps SGLang adds with --enable-metrics (first_token_latency and decode_throughput
only when defined; response_sent_to_client_ts here only once an earlier event set it)."""
OPTIONAL_METRICS_KEYS = ("first_token_latency", "decode_throughput")
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


def _is_float(x: Any) -> bool:
    return isinstance(x, float)


def expected_meta_keys(mi: dict[str, Any], final: bool, first: bool, stream: bool) -> list[str]:
    """The key sequence SGLang 0.5.23 gives this meta_info (spec and metrics blocks as present in `mi`)."""
    keys = list(META_HEAD_KEYS)
    if not final:
        return keys + ["cached_tokens_details", "dp_rank"] + (["response_sent_to_client_ts"] if first else [])
    keys += ["weight_versions", "cached_tokens_details", "dp_rank", "e2e_latency"]
    if "spec_verify_ct" in mi:
        keys += [k for k in SPEC_META_KEYS if k != "spec_correct_drafts_histogram" or k in mi]
    if "request_received_ts" in mi:
        for k in METRICS_META_KEYS:
            if k == "response_sent_to_client_ts" and not (stream and not first):
                continue
            if k in OPTIONAL_METRICS_KEYS and k not in mi:
                continue
            keys.append(k)
    if not (stream and not first):
        keys.append("response_sent_to_client_ts")
    return keys


def check_meta_info(mi: dict[str, Any], final: bool, speculative: Optional[bool] = None, first: bool = True,
                    stream: bool = False, spec_steps: Optional[int] = None, metrics: Optional[bool] = None) -> None:
    """One /generate meta_info: SGLang 0.5.23's keys in its order, their types, and the speculative arithmetic."""
    assert list(mi) == expected_meta_keys(mi, final, first, stream), \
        f"meta_info keys {list(mi)} != SGLang's {expected_meta_keys(mi, final, first, stream)}"
    assert isinstance(mi["id"], str)
    for k in ("prompt_tokens", "num_retractions", "reasoning_tokens", "completion_tokens", "cached_tokens"):
        assert _is_int(mi[k]) and mi[k] >= 0, f"meta_info.{k} is a non-negative int"
    for k in ("storage_prefetch_wait", "storage_staging_wait", "forward_entry_time", "prefill_finished_time",
              "queue_time"):
        assert _is_float(mi[k]) and mi[k] >= 0, f"meta_info.{k} is a float"
    assert mi["weight_version"] == "default" and mi["dp_rank"] is None
    det = mi["cached_tokens_details"]
    if mi["cached_tokens"] == 0:
        assert det is None, "cached_tokens_details is null without a cache hit (recorded)"
    else:
        assert list(det) == ["device", "host"] and det["device"] + det["host"] == mi["cached_tokens"]
    if "response_sent_to_client_ts" in mi:
        assert _is_float(mi["response_sent_to_client_ts"])
    if not final:
        assert mi["finish_reason"] is None, "finish_reason is null until the last chunk"
        return
    fr = mi["finish_reason"]
    assert isinstance(fr, dict) and fr.get("type") in ("length", "stop", "abort"), f"bad finish_reason {fr!r}"
    if fr["type"] == "length":
        assert fr["length"] == mi["completion_tokens"]
    assert mi["weight_versions"] == [{"version": "default", "start": 0, "end": mi["completion_tokens"]}]
    assert _is_float(mi["e2e_latency"]) and mi["e2e_latency"] >= 0
    if metrics is not None:
        assert ("request_received_ts" in mi) == metrics, "request timestamps exactly with --enable-metrics"
    for k in METRICS_META_KEYS:
        if k in mi:
            assert _is_float(mi[k]) and mi[k] >= 0, f"meta_info.{k} is a float"
    if "request_received_ts" in mi:
        assert mi["request_received_ts"] <= mi["request_finished_ts"]
    has_spec = "spec_verify_ct" in mi
    if speculative is False:
        assert not has_spec, "no spec fields without speculative decoding"
    if speculative and mi["completion_tokens"] > 1:
        assert has_spec, "a speculative request past its prefill token has the spec fields"
    if has_spec:
        check_spec_fields(mi, spec_steps)


def check_spec_fields(mi: dict[str, Any], spec_steps: Optional[int] = None) -> None:
    """SGLang 0.5.23's per-request speculative arithmetic (topk 1: spec_steps + 1 draft tokens per verify step)."""
    ct, verify = mi["completion_tokens"], mi["spec_verify_ct"]
    correct, proposed = mi["spec_num_correct_drafts"], mi["spec_num_proposed_drafts"]
    assert _is_int(verify) and verify > 0 and _is_int(correct) and _is_int(proposed)
    assert abs(mi["spec_accept_length"] - ct / verify) < 1e-9, "spec_accept_length = completion_tokens / verify_ct"
    assert 0 <= correct <= proposed
    assert abs(mi["spec_accept_rate"] - correct / proposed) < 1e-9, "spec_accept_rate = correct / proposed drafts"
    if spec_steps is not None:
        assert proposed == verify * spec_steps, "proposed drafts = verify steps x (num_draft_tokens - 1)"
    # the first token comes from prefill; each verify step adds its accepted drafts + 1 (the last may be cut off)
    assert verify + 1 <= ct <= 1 + verify + correct, (ct, verify, correct)
    hist = mi["spec_correct_drafts_histogram"]
    assert isinstance(hist, list) and hist and all(_is_int(h) and h >= 0 for h in hist)
    assert hist[-1] > 0, "the histogram grows to the most drafts accepted + 1, no trailing zeros"
    assert sum(hist) == verify, "one histogram count per verify step"
    assert sum(i * h for i, h in enumerate(hist)) == correct, "histogram index = drafts accepted in that step"
    if spec_steps is not None:
        assert len(hist) <= spec_steps + 1


def check_native_response(obj: dict[str, Any], speculative: Optional[bool] = None,
                          spec_steps: Optional[int] = None, metrics: Optional[bool] = None) -> None:
    assert list(obj) == ["text", "output_ids", "meta_info"]
    assert isinstance(obj["text"], str)
    assert isinstance(obj["output_ids"], list) and all(_is_int(t) for t in obj["output_ids"])
    check_meta_info(obj["meta_info"], final=True, speculative=speculative, spec_steps=spec_steps, metrics=metrics)
    assert len(obj["output_ids"]) == obj["meta_info"]["completion_tokens"]


def check_native_stream(payloads: list[bytes], incremental: bool = False, speculative: Optional[bool] = None,
                        spec_steps: Optional[int] = None, metrics: Optional[bool] = None) -> list[dict[str, Any]]:
    """Native /generate stream: cumulative (default) or incremental bodies, cumulative completion_tokens; the spec
    fields come only on the final event. (The first event is sent at once but may carry 2 tokens: recorded on a
    baseline with overlap scheduling.)"""
    chunks = [json.loads(p) for p in payloads]
    assert chunks, "at least one chunk"
    prev_ct, prev_text, ids_total = 0, "", 0
    for i, c in enumerate(chunks):
        final = i == len(chunks) - 1
        assert list(c) == ["text", "output_ids", "meta_info"]
        mi = c["meta_info"]
        check_meta_info(mi, final=final, speculative=speculative, first=i == 0, stream=True, spec_steps=spec_steps,
                        metrics=metrics)
        ct = mi["completion_tokens"]
        assert ct > prev_ct or (final and ct == prev_ct), "completion_tokens is cumulative and grows per event"
        if incremental:
            ids_total += len(c["output_ids"])
            assert ids_total == ct, "incremental output_ids add up to completion_tokens"
        else:
            assert len(c["output_ids"]) == ct, "cumulative output_ids has completion_tokens ids"
            assert c["text"].startswith(prev_text), "cumulative text grows"
            prev_text = c["text"]
        prev_ct = ct
    assert len({x["meta_info"]["id"] for x in chunks}) == 1, "one request id per stream"
    final_mi = chunks[-1]["meta_info"]
    if final_mi.get("spec_num_correct_drafts") and not incremental:
        steps = [b["meta_info"]["completion_tokens"] - a["meta_info"]["completion_tokens"]
                 for a, b in zip(chunks, chunks[1:])]
        assert max(steps) > 1, "with drafts accepted, an event carries several tokens"
    return chunks


def check_error_event(payloads: list[bytes]) -> dict[str, Any]:
    """A /generate stream that failed validation: one error event (message, type, code, retryable), then [DONE]."""
    assert len(payloads) == 1, "one error event before [DONE]"
    obj = json.loads(payloads[0])
    assert list(obj) == ["error"]
    err = obj["error"]
    assert list(err) == ["message", "type", "code", "retryable"]
    assert err["type"] == "invalid_request_error" and err["code"] == 400 and err["retryable"] is False
    return err


def check_native_error(status: int, obj: Any, message: Optional[str] = None) -> None:
    """A non-streamed /generate ValueError: 400 with {"error": {"message": ...}} and nothing else."""
    assert status == 400
    assert isinstance(obj, dict) and list(obj) == ["error"] and list(obj["error"]) == ["message"], obj
    if message is not None:
        assert obj["error"]["message"] == message


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
        carried = ch["delta"].get("content") if chat else ch["text"]
        if continuous_usage and (carried or c.get("usage") is not None):
            # SGLang: every chunk carrying text has cumulative usage; the chat role chunk and the chat
            # finishing chunk (no content) have no usage key at all (recorded)
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
        assert status == 400 and text.startswith("Flush cache failed"), (status, text)
    else:
        assert status == 200 and text.startswith("Cache flushed")


METRIC_NAMES = ("num_running_reqs", "num_queue_reqs", "gen_throughput", "token_usage", "generation_tokens_total",
                "prompt_tokens_total", "num_requests_total")
SPEC_METRIC_NAMES = ("spec_accept_length", "spec_accept_rate", "spec_num_steps", "spec_num_draft_tokens",
                     "spec_verify_calls_total")
"""`sglang:` families the pipeline scrapes (and the speculative ones a NEXTN server adds), as recorded."""
COUNTER_LABELS = ("engine_type", "is_streaming", "model_name")
"""Labels of the token and request counters (no rank labels; is_streaming splits them)."""


def metric_families(text: str) -> dict[str, str]:
    """`# TYPE` lines of a Prometheus text: family name → type."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out[name] = kind
    return out


def metric_sum(text: str, name: str) -> Optional[float]:
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def metric_label_keys(text: str, name: str) -> list[list[str]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = line[len(name) + 1:line.index("}")]
            out.append(sorted(kv.split("=", 1)[0] for kv in labels.split(",") if kv))
    return out


def check_metrics(text: str, speculative: bool) -> dict[str, str]:
    fams = metric_families(text)
    for n in METRIC_NAMES + (SPEC_METRIC_NAMES if speculative else ()):
        assert "sglang:" + n in fams, f"/metrics lacks sglang:{n}"
    if not speculative:
        assert "sglang:spec_verify_calls_total" not in fams
    for n in ("generation_tokens_total", "prompt_tokens_total", "num_requests_total"):
        assert fams["sglang:" + n] == "counter"
        for keys in metric_label_keys(text, "sglang:" + n):
            assert keys == sorted(COUNTER_LABELS), f"sglang:{n} labels {keys}"
    if speculative:
        assert fams["sglang:spec_verify_calls_total"] == "counter"
        assert fams["sglang:spec_accept_length"] == "gauge"
    return fams


def check_metrics_window(before: str, after: str, finals: list[dict[str, Any]]) -> None:
    """Counters diffed around a window equal the per-request sums (SGLang: generation tokens, verify calls)."""
    gen = (metric_sum(after, "sglang:generation_tokens_total") or 0) - (metric_sum(before, "sglang:generation_tokens_total") or 0)
    assert gen == sum(m["completion_tokens"] for m in finals), "generation_tokens_total delta = Σ completion_tokens"
    reqs = (metric_sum(after, "sglang:num_requests_total") or 0) - (metric_sum(before, "sglang:num_requests_total") or 0)
    assert reqs == len(finals), "num_requests_total delta = requests finished"
    v_after = metric_sum(after, "sglang:spec_verify_calls_total")
    if v_after is not None:
        verify = v_after - (metric_sum(before, "sglang:spec_verify_calls_total") or 0)
        assert verify == sum(m.get("spec_verify_ct", 0) for m in finals), "spec_verify_calls_total delta = Σ spec_verify_ct"
