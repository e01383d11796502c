"""Hand-made SGLang 0.5.23 transcripts for what the recordings (fixtures/sglang-0.5.23-cpu) lack: incremental streams, stop."""

from __future__ import annotations

import json
from typing import Any


def sse(*objs: Any) -> bytes:
    out = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs)
    return out + b"data: [DONE]\n\n"


def _meta(ct: int, fin: Any = None, first: bool = False, **extra: Any) -> dict[str, Any]:
    """meta_info in SGLang 0.5.23's key order (as recorded in fixtures/sglang-0.5.23-cpu), without --enable-metrics."""
    m: dict[str, Any] = {"id": "a1b2", "finish_reason": fin, "prompt_tokens": 5, "weight_version": "default",
                         "num_retractions": 0, "storage_prefetch_wait": 0.0, "storage_staging_wait": 0.0,
                         "forward_entry_time": 1760000000.5, "prefill_finished_time": 1760000000.6,
                         "queue_time": 0.001, "reasoning_tokens": 0, "completion_tokens": ct, "cached_tokens": 0}
    if fin is not None:
        m["weight_versions"] = [{"version": "default", "start": 0, "end": ct}]
    m.update(cached_tokens_details=None, dp_rank=None)  # null without a cache hit (recorded)
    if first:
        m["response_sent_to_client_ts"] = 1760000000.7
    m.update(extra)
    return m


SPEC_FINAL = {"e2e_latency": 0.41, "spec_accept_rate": 0.75, "spec_accept_length": 2.5, "spec_num_correct_drafts": 3,
              "spec_num_proposed_drafts": 4, "spec_verify_ct": 2, "spec_correct_drafts_histogram": [0, 1, 1]}
"""Two verify steps of a 2-step NEXTN (2 drafts each): one accepted 1 draft, one 2; 1 + 2 + 3 = 6 tokens, cut to 5."""

NATIVE_STREAM_CUMULATIVE = sse(
    {"text": "Hello", "output_ids": [9707], "meta_info": _meta(1, first=True)},
    {"text": "Hello, world", "output_ids": [9707, 11, 1879], "meta_info": _meta(3)},
    {"text": "Hello, world!!", "output_ids": [9707, 11, 1879, 0, 0],
     "meta_info": _meta(5, {"type": "length", "length": 5}, **SPEC_FINAL)},
)

NATIVE_STREAM_INCREMENTAL = sse(
    {"text": "Hello", "output_ids": [9707], "meta_info": _meta(1, first=True)},
    {"text": ", world", "output_ids": [11, 1879], "meta_info": _meta(3)},
    {"text": "!", "output_ids": [0], "meta_info": _meta(4, {"type": "stop", "matched": 151645}, e2e_latency=0.2)},
)

NATIVE_NON_STREAM = {"text": "Hello, world", "output_ids": [9707, 11, 1879],
                     "meta_info": _meta(3, {"type": "length", "length": 3}, e2e_latency=0.12,
                                        response_sent_to_client_ts=1760000000.9)}

_C = {"id": "c1", "object": "text_completion", "created": 1760000000, "model": "qwen"}
COMPLETIONS_STREAM_USAGE = sse(
    {**_C, "choices": [{"index": 0, "text": "Hi", "logprobs": None, "finish_reason": None, "matched_stop": None}],
     "usage": None},
    {**_C, "choices": [{"index": 0, "text": " there", "logprobs": None, "finish_reason": "length",
                        "matched_stop": None}], "usage": None},
    {**_C, "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6,
                                    "reasoning_tokens": 0}},
)

_H = {"id": "h1", "object": "chat.completion.chunk", "created": 1760000000, "model": "qwen"}
CHAT_STREAM_SPEC_USAGE = sse(
    {**_H, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
     "usage": {"prompt_tokens": 4, "completion_tokens": 0, "total_tokens": 4}},
    {**_H, "choices": [{"index": 0, "delta": {"content": "O"}, "finish_reason": None}],
     "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}},
    {**_H, "choices": [{"index": 0, "delta": {"content": "K"}, "finish_reason": "stop", "matched_stop": 151645}],
     "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}},
    {**_H, "choices": [], "sglext": {"spec_tokens_details": {"spec_accept_rate": 0.33, "spec_accept_length": 3.0,
                                                             "spec_num_correct_drafts": 1,
                                                             "spec_num_proposed_drafts": 3, "spec_verify_ct": 1}}},
    {**_H, "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}},
)

_ARGS = {"model_path": "/models/Qwen3.5-397B-A17B-NVFP4", "tp_size": 8, "max_running_requests": 48,
         "served_model_name": "qwen", "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "kv_cache_dtype": "bf16"}
SERVER_INFO = {**_ARGS, "launch_command": "sglang serve --model-path /models/Qwen3.5-397B-A17B-NVFP4",
               "max_total_num_tokens": 900000, "max_req_input_len": 262143, "kv_events": None,
               "startup_time": 312.5, "version": "0.5.23", "frontend": "python",
               "internal_states": [{**_ARGS, "world_size": 8, "effective_max_running_requests_per_dp": 48,
                                    "last_gen_throughput": 71.8, "avg_spec_accept_length": 2.61}]}

MODEL_INFO = {"model_path": "/models/Qwen3.5-397B-A17B-NVFP4", "served_model_name": "qwen",
              "tokenizer_path": "/models/Qwen3.5-397B-A17B-NVFP4", "is_generation": True,
              "preferred_sampling_params": None, "weight_version": "default", "load_format": "auto",
              "reasoning_parser": None, "tool_call_parser": None, "disaggregation_mode": "null",
              "has_image_understanding": True, "has_audio_understanding": False, "model_type": "qwen3_5_moe",
              "architectures": ["Qwen3_5MoeForConditionalGeneration"]}

FLUSH_OK = (200, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
FLUSH_BUSY = (400, "Flush cache failed.\n")
"""Recorded (fixtures/sglang-0.5.23-cpu): a busy server refuses with this text only."""
