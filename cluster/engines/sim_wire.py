"""Wire rendering for the simulated SGLang engine: SSE chunks and response bodies in SGLang 0.5.23's shapes (pure)."""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional

from cluster.engines.sim_model import Scheduler, SimRequest, SpecParams, piece


class ChunkWriter:
    """Renders one request's SSE chunks and non-streaming body; per-chunk work is string slicing of precomputed text.

    Token pieces are ASCII without quotes or backslashes, so slices of the text are valid JSON string bodies.
    """

    def __init__(self, req: SimRequest, t_start_s: float, clock: Callable[[], float], *, api: str,
                 incremental: bool, spec: Optional[SpecParams], model: str = "", include_usage: bool = False,
                 continuous_usage: bool = False, spec_details: bool = False, created: int = 0) -> None:
        self.req = req
        self.t_start_s = t_start_s
        self.clock = clock
        self.api = api
        self.incremental = incremental
        self.spec = spec
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.spec_details = spec_details
        self._rid = json.dumps(req.rid)
        self._model = json.dumps(model)
        self._created = created
        pieces = [piece(t) for t in req.out_ids]
        self._text = "".join(pieces)
        self._off = [0]
        for p in pieces:
            self._off.append(self._off[-1] + len(p))
        ids_txt = [str(t) for t in req.out_ids]
        self._ids = ",".join(ids_txt)
        self._ioff = [0]
        for i, s in enumerate(ids_txt):
            self._ioff.append(self._ioff[-1] + len(s) + (1 if i else 0))

    # -- shared pieces --
    def _text_slice(self, a: int, b: int) -> str:
        return self._text[self._off[a] if self.incremental else 0:self._off[b]]

    def _ids_slice(self, a: int, b: int) -> str:
        if not self.incremental or a == 0:
            return self._ids[:self._ioff[b]]
        return self._ids[self._ioff[a] + 1:self._ioff[b]]

    def spec_fields(self) -> dict[str, Any]:
        r = self.req
        if self.spec is None or r.spec_verify_ct == 0:
            return {}
        return {
            "spec_verify_ct": r.spec_verify_ct,
            "spec_accept_length": r.generated / r.spec_verify_ct,
            "spec_accept_rate": r.spec_num_correct_drafts / max(1, r.spec_num_proposed_drafts),
            "spec_num_correct_drafts": r.spec_num_correct_drafts,
            "spec_num_proposed_drafts": r.spec_num_proposed_drafts,
        }

    def meta_info(self, n: int, final: bool) -> dict[str, Any]:
        r = self.req
        m: dict[str, Any] = {
            "id": r.rid, "finish_reason": r.finish_reason() if final else None, "prompt_tokens": r.prompt_tokens,
            "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": n,
            "cached_tokens": r.cached_tokens,
        }
        if final:
            m["e2e_latency"] = self.clock() - self.t_start_s
            m.update(self.spec_fields())
        return m

    def usage(self, n: int) -> dict[str, Any]:
        p = self.req.prompt_tokens
        return {"prompt_tokens": p, "total_tokens": p + n, "completion_tokens": n, "prompt_tokens_details": None,
                "reasoning_tokens": 0}

    def _usage_json(self, n: int) -> str:
        p = self.req.prompt_tokens
        return (f'{{"prompt_tokens":{p},"total_tokens":{p + n},"completion_tokens":{n},'
                f'"prompt_tokens_details":null,"reasoning_tokens":0}}')

    def _oa_finish(self) -> tuple[Optional[str], Optional[int]]:
        fr = self.req.finish_reason()
        if fr is None:
            return None, None
        return fr["type"], fr.get("matched")

    # -- streaming --
    def head(self) -> list[bytes]:
        if self.api != "chat":
            return []
        usage = self._usage_json(0) if self.continuous_usage else "null"
        return [self._oa_chunk('"delta":{"role":"assistant","content":""}', "null", "null", usage)]

    def _oa_chunk(self, body: str, fr: str, ms: str, usage: str) -> bytes:
        obj = "chat.completion.chunk" if self.api == "chat" else "text_completion"
        return (f'data: {{"id":{self._rid},"object":"{obj}","created":{self._created},"model":{self._model},'
                f'"choices":[{{"index":0,{body},"logprobs":null,"finish_reason":{fr},"matched_stop":{ms}}}],'
                f'"usage":{usage}}}\n\n').encode()

    def chunk(self, a: int, b: int, final: bool) -> bytes:
        """The chunk carrying tokens [a, b) (cumulative bodies start at 0 unless incremental)."""
        if self.api == "native":
            if final:
                obj = {"text": self._text_slice(a, b), "output_ids": self.req.out_ids[a if self.incremental else 0:b],
                       "meta_info": self.meta_info(b, True)}
                return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
            r = self.req
            return (f'data: {{"text":"{self._text_slice(a, b)}","output_ids":[{self._ids_slice(a, b)}],'
                    f'"meta_info":{{"id":{self._rid},"finish_reason":null,"prompt_tokens":{r.prompt_tokens},'
                    f'"weight_version":"default","num_retractions":0,"reasoning_tokens":0,'
                    f'"completion_tokens":{b},"cached_tokens":{r.cached_tokens}}}}}\n\n').encode()
        delta = self._text[self._off[a]:self._off[b]]
        body = f'"delta":{{"content":"{delta}"}}' if self.api == "chat" else f'"text":"{delta}"'
        fr, ms = self._oa_finish() if final else (None, None)
        usage = self._usage_json(b) if self.continuous_usage else "null"
        return self._oa_chunk(body, json.dumps(fr), json.dumps(ms), usage)

    def tail(self) -> list[bytes]:
        if self.api == "native":
            return []
        out: list[bytes] = []
        obj = "chat.completion.chunk" if self.api == "chat" else "text_completion"
        base = {"id": self.req.rid, "object": obj, "created": self._created, "model": json.loads(self._model),
                "choices": []}
        details = self.spec_fields()
        if self.spec_details and details:
            out.append(_sse({**base, "usage": None, "sglext": {"spec_tokens_details": details}}))
        if self.include_usage:
            out.append(_sse({**base, "usage": self.usage(self.req.generated)}))
        return out

    # -- non-streaming --
    def final_object(self) -> dict[str, Any]:
        r = self.req
        n = r.generated
        if self.api == "native":
            return {"text": self._text[:self._off[n]], "output_ids": r.out_ids[:n], "meta_info": self.meta_info(n, True)}
        fr, ms = self._oa_finish()
        text = self._text[:self._off[n]]
        if self.api == "chat":
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text,
                                                              "reasoning_content": None, "tool_calls": None}}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text}
            obj = "text_completion"
        choice.update(logprobs=None, finish_reason=fr, matched_stop=ms)
        out: dict[str, Any] = {"id": r.rid, "object": obj, "created": self._created, "model": json.loads(self._model),
                               "choices": [choice], "usage": self.usage(n)}
        details = self.spec_fields()
        if self.spec_details and details:
            out["sglext"] = {"spec_tokens_details": details}
        return out


def _sse(obj: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def metrics_text(sched: Scheduler, spec: Optional[SpecParams], model_name: str, gen_throughput: float,
                 streaming_tokens: int, max_total_num_tokens: int) -> str:
    """Prometheus text with SGLang 0.5.23's `sglang:` names for the gauges and counters the simulator models.

    `spec_verify_calls_total` counts verify steps per request (the sum of meta_info spec_verify_ct)."""
    c = sched.counters
    lab = (f'model_name={json.dumps(model_name)},engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"')
    rows: list[tuple[str, str, str, float]] = [
        ("num_running_reqs", "gauge", lab, len(sched.running)),
        ("num_queue_reqs", "gauge", lab, len(sched.waiting)),
        ("gen_throughput", "gauge", lab, gen_throughput),
        ("token_usage", "gauge", lab, sched.tokens_in_use() / max_total_num_tokens),
    ]
    if spec is not None:
        acc = c.last_interval_accept_length
        rows += [("spec_accept_length", "gauge", lab, acc if acc is not None else 0.0),
                 ("spec_num_steps", "gauge", lab, spec.num_steps),
                 ("spec_num_draft_tokens", "gauge", lab, spec.num_draft_tokens),
                 ("spec_verify_calls_total", "counter", lab, c.spec_verify_calls_total)]
    rows += [
        ("generation_tokens_total", "counter", lab + ',is_streaming="true"', streaming_tokens),
        ("generation_tokens_total", "counter", lab + ',is_streaming="false"', c.generation_tokens_total - streaming_tokens),
        ("prompt_tokens_total", "counter", lab, c.prompt_tokens_total),
        ("num_requests_total", "counter", lab, c.num_requests_total),
    ]
    out: list[str] = []
    seen: set[str] = set()
    for name, kind, labels, val in rows:
        full = "sglang:" + name
        if full not in seen:
            seen.add(full)
            out.append(f"# HELP {full} {name.replace('_', ' ')} (simulated engine)")
            out.append(f"# TYPE {full} {kind}")
        out.append(f"{full}{{{labels}}} {float(val)!r}")
    return "\n".join(out) + "\n"
