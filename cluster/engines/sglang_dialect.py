"""SGLang's dialect, as the engines that speak it share it: server args rendered as argparse words, and the body of a
streaming request to SGLang's native /generate or its OpenAI endpoints (vLLM serves the same OpenAI bodies less
SGLang's own fields; the simulator serves SGLang's)."""

from __future__ import annotations

import json
from typing import Mapping, Optional

from cluster.config.server import ArgValue
from cluster.engines.base import HttpRequest, StreamRequest, category_headers
from cluster.input_files import JsonObject, JsonValue


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def render_args(args: Mapping[str, ArgValue]) -> list[str]:
    """Server args dict → argv words: True → bare flag, False/None → omitted, list → repeated values."""
    out: list[str] = []
    for key in sorted(args):
        val = args[key]
        if val is None or val is False:
            continue
        f = flag_name(key)
        if val is True:
            out.append(f)
        elif isinstance(val, list):
            out.append(f)
            out.extend(str(x) for x in val)
        elif isinstance(val, (dict,)):
            out.extend([f, json.dumps(val, sort_keys=True)])
        else:
            out.extend([f, str(val)])
    return out


def sglang_request_body(r: StreamRequest) -> tuple[str, dict[str, JsonValue]]:
    """Path and JSON body of a streaming request to SGLang's native /generate or its OpenAI endpoints."""
    prompt = r.prompt
    if r.api == "native":
        body: dict[str, JsonValue] = {
            "sampling_params": {"max_new_tokens": r.max_tokens, "temperature": r.temperature,
                                "ignore_eos": r.ignore_eos},
            "stream": True,
        }
        if prompt.input_ids is not None:
            body["input_ids"] = list(prompt.input_ids)
        else:
            body["text"] = prompt.text
        if r.rid:
            body["rid"] = r.rid
        return "/generate", body
    common: dict[str, JsonValue] = {
        "model": r.model_name,
        "max_tokens": r.max_tokens,
        "temperature": r.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": r.ignore_eos,
        "return_spec_tokens_details": True,
    }
    if r.api == "chat":
        if prompt.messages is not None:
            common["messages"] = [{"role": t.role, "content": t.content} for t in prompt.messages]
        else:
            text = prompt.text if prompt.text is not None else " ".join(str(t) for t in prompt.input_ids or ())
            common["messages"] = [{"role": "user", "content": text}]
        if prompt.chat_template_kwargs:
            common["chat_template_kwargs"] = dict(prompt.chat_template_kwargs)
        return "/v1/chat/completions", common
    common["prompt"] = list(prompt.input_ids) if prompt.input_ids is not None else prompt.text
    return "/v1/completions", common


def encode_request(path: str, body: JsonObject, headers: Mapping[str, str] = {}) -> HttpRequest:
    return HttpRequest(path, json.dumps(body, separators=(",", ":")).encode(), dict(headers))


def build_sglang_request(r: StreamRequest) -> HttpRequest:
    """A streaming request to SGLang's native /generate or its OpenAI endpoints (the sim serves the same)."""
    path, body = sglang_request_body(r)
    return encode_request(path, body, category_headers(r.prompt))


def role_args(role: str, transfer_backend: Optional[str], nnodes: int, node_rank: int,
              bootstrap_port: Optional[int], dist_init_addr: Optional[str]) -> dict[str, ArgValue]:
    """SGLang 0.5.23's flags that make a server one process of a deployment: a prefill or decode server
    (--disaggregation-mode, --disaggregation-transfer-backend, a prefill's --disaggregation-bootstrap-port) or one
    rank of a server across nodes (--nnodes, --node-rank, --dist-init-addr); none for a server or a replica."""
    if role in ("prefill", "decode"):
        out: dict[str, ArgValue] = {"disaggregation-mode": role, "disaggregation-transfer-backend": transfer_backend}
        if role == "prefill":
            out["disaggregation-bootstrap-port"] = bootstrap_port
        return out
    if role == "rank":
        return {"nnodes": nnodes, "node-rank": node_rank, "dist-init-addr": dist_init_addr}
    return {}
