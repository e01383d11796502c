"""Wire rendering for the simulated SGLang engine: one request's SSE chunks and bodies in SGLang 0.5.23's shapes."""

from __future__ import annotations

import json
from typing import Callable, Optional

from cluster.input_files import JsonObject, JsonValue
from cluster.sim.model import SimRequest, piece
from cluster.engines.sim_launch import SpecParams


class ChunkWriter:
    """Renders one request's SSE chunks and non-streaming body; per-chunk work is string slicing of precomputed text.

    Token pieces are ASCII without quotes or backslashes, so slices of the text are valid JSON string bodies.
    """

    def __init__(self, req: SimRequest, t_start_s: float, clock: Callable[[], float], *, api: str,
                 incremental: bool, spec: Optional[SpecParams], model: str = "", include_usage: bool = False,
                 continuous_usage: bool = False, spec_details: bool = False, created: int = 0,
                 enable_metrics: bool = False, epoch_offset_s: float = 0.0) -> None:
        self.req = req
        self.t_start_s = t_start_s
        self.clock = clock
        self.enable_metrics = enable_metrics
        self.epoch_offset_s = epoch_offset_s
        """Added to the clock's readings for the epoch timestamps (`*_ts`, `*_time`) of meta_info."""
        self.first_token_s: Optional[float] = None
        self.sent_s: Optional[float] = None
        """When the first streamed event was rendered (SGLang's response_sent_to_client_ts)."""
        self._timing: dict[str, float] = {}
        self._timing_json = ""
        self._details_json = "null"
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

    def spec_fields(self) -> dict[str, JsonValue]:
        """SGLang 0.5.23's per-request speculative keys, in its order (tokenizer_manager
        `_calculate_spec_decoding_metrics`); none before the first verify step."""
        r = self.req
        if self.spec is None or r.spec_verify_ct == 0:
            return {}
        out: dict[str, JsonValue] = {
            "spec_accept_rate": r.spec_num_correct_drafts / max(1, r.spec_num_proposed_drafts),
            "spec_accept_length": r.generated / r.spec_verify_ct,
            "spec_num_correct_drafts": r.spec_num_correct_drafts,
            "spec_num_proposed_drafts": r.spec_num_proposed_drafts,
            "spec_verify_ct": r.spec_verify_ct,
        }
        if r.spec_correct_drafts_histogram:
            out["spec_correct_drafts_histogram"] = list(r.spec_correct_drafts_histogram)
        return out

    def note_progress(self) -> None:
        """Record when the request's first token was seen (its prefill finished)."""
        if self.first_token_s is None and self.req.generated > 0:
            self.first_token_s = self.clock()

    def _ts(self, t_s: float) -> float:
        return self.epoch_offset_s + t_s

    def _timing_values(self) -> dict[str, float]:
        """The per-request scheduling times SGLang puts on every event, fixed once the first token is seen."""
        if not self._timing:
            self.note_progress()
            first = self.first_token_s if self.first_token_s is not None else self.clock()
            self._timing = {"storage_prefetch_wait": 0.0, "storage_staging_wait": 0.0,
                            "forward_entry_time": self._ts(self.t_start_s), "prefill_finished_time": self._ts(first),
                            "queue_time": 0.0}
            self._timing_json = "".join(f'"{k}":{v!r},' for k, v in self._timing.items())
            c = self.req.cached_tokens
            self._details_json = f'{{"device":{c},"host":0}}' if c else "null"
        return self._timing

    def meta_info(self, n: int, final: bool, stream: bool = False) -> dict[str, JsonValue]:
        """meta_info with SGLang 0.5.23's keys in its order: the scheduling times on every event; weight_versions,
        e2e_latency and the spec keys on the final one; the request timestamps there with --enable-metrics;
        response_sent_to_client_ts on the first streamed event (and on the final one after it was set)."""
        r = self.req
        m: dict[str, JsonValue] = {"id": r.rid, "finish_reason": r.finish_reason() if final else None,
                             "prompt_tokens": r.prompt_tokens, "weight_version": "default", "num_retractions": 0}
        m.update(self._timing_values())
        m.update(reasoning_tokens=0, completion_tokens=n, cached_tokens=r.cached_tokens)
        if final:
            m["weight_versions"] = [{"version": "default", "start": 0, "end": n}]
        m["cached_tokens_details"] = {"device": r.cached_tokens, "host": 0} if r.cached_tokens else None
        m["dp_rank"] = None
        now = self.clock()
        if not final:
            if stream and self.sent_s is None:
                self.sent_s = now
                m["response_sent_to_client_ts"] = self._ts(now)
            return m
        m["e2e_latency"] = now - self.t_start_s
        m.update(self.spec_fields())
        if self.enable_metrics:
            first = self.first_token_s if self.first_token_s is not None else now
            m["request_received_ts"] = self._ts(self.t_start_s)
            if first > self.t_start_s:
                m["first_token_latency"] = first - self.t_start_s
            m["api_server_dispatch_finish_ts"] = self._ts(self.t_start_s)
            if self.sent_s is not None:
                m["response_sent_to_client_ts"] = self._ts(self.sent_s)
            m["request_finished_ts"] = self._ts(now)
            if n > 1 and now > first:
                m["decode_throughput"] = (n - 1) / (now - first)
        if self.sent_s is None:
            self.sent_s = now
            m["response_sent_to_client_ts"] = self._ts(now)
        return m

    def usage(self, n: int) -> dict[str, JsonValue]:
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
        kind, matched = fr["type"], fr.get("matched")
        return str(kind), (matched if isinstance(matched, int) else None)

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
                       "meta_info": self.meta_info(b, True, stream=True)}
                return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
            r = self.req
            self._timing_values()
            timing = self._timing_json
            sent = ""
            if self.sent_s is None:
                self.sent_s = self.clock()
                sent = f',"response_sent_to_client_ts":{self._ts(self.sent_s)!r}'
            return (f'data: {{"text":"{self._text_slice(a, b)}","output_ids":[{self._ids_slice(a, b)}],'
                    f'"meta_info":{{"id":{self._rid},"finish_reason":null,"prompt_tokens":{r.prompt_tokens},'
                    f'"weight_version":"default","num_retractions":0,{timing}"reasoning_tokens":0,'
                    f'"completion_tokens":{b},"cached_tokens":{r.cached_tokens},"cached_tokens_details":'
                    f'{self._details_json},"dp_rank":null{sent}}}}}\n\n').encode()
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
    def final_object(self) -> dict[str, JsonValue]:
        r = self.req
        n = r.generated
        if self.api == "native":
            return {"text": self._text[:self._off[n]], "output_ids": r.out_ids[:n], "meta_info": self.meta_info(n, True)}
        fr, ms = self._oa_finish()
        text = self._text[:self._off[n]]
        if self.api == "chat":
            choice: dict[str, JsonValue] = {"index": 0, "message": {"role": "assistant", "content": text,
                                                              "reasoning_content": None, "tool_calls": None}}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text}
            obj = "text_completion"
        choice.update(logprobs=None, finish_reason=fr, matched_stop=ms)
        out: dict[str, JsonValue] = {"id": r.rid, "object": obj, "created": self._created, "model": json.loads(self._model),
                               "choices": [choice], "usage": self.usage(n)}
        details = self.spec_fields()
        if self.spec_details and details:
            out["sglext"] = {"spec_tokens_details": details}
        return out


def _sse(obj: JsonObject) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
