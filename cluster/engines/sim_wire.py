"""Wire rendering for the simulated SGLang engine: SSE chunks and response bodies in SGLang 0.5.23's shapes,
and the pacer of its fixed-latency mode (exact TTFT, one token per write at a fixed inter-chunk delay)."""

from __future__ import annotations

import asyncio
import heapq
import json
import time
from array import array
from typing import Any, Awaitable, Callable, Mapping, Optional

import numpy as np

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


PACE_SPIN_NS = 1_500_000
"""Event-loop timers wake on a 1 ms grid: the last stretch before a due write is waited by yielding to the loop."""
PACE_MAX_SAMPLES = 4_000_000


class Pacer:
    """Fixed-latency streams: chunk k (1-based) of a request is due at receipt + ttft + (k - 1) × itl.

    One ticker task releases every due write (a heap of waiting streams): it sleeps on a timer until shortly
    before the earliest due time and yields to the loop for the last stretch, so only one task spins however
    many streams are paced. Records each write's lateness (write end − due, ns) on the simulator's own clock,
    so a benchmark can tell which chunk rate the simulator still paces accurately.
    """

    def __init__(self, ttft_ms: float, itl_ms: float) -> None:
        self.ttft_ns = int(round(ttft_ms * 1e6))
        self.itl_ns = int(round(itl_ms * 1e6))
        self.late_ns = array("q")
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = 0
        self._wake: Optional[asyncio.Event] = None
        self._ticker: Optional[asyncio.Task[None]] = None

    @classmethod
    def from_knobs(cls, ttft_ms: Optional[float], itl_ms: Optional[float]) -> Optional["Pacer"]:
        """The pacer of the fixed-latency knobs (either one missing takes the other's value); None when both unset."""
        if ttft_ms is None and itl_ms is None:
            return None
        return cls(ttft_ms if ttft_ms is not None else itl_ms or 0.0, itl_ms if itl_ms is not None else ttft_ms or 0.0)

    def due_ns(self, t_recv_ns: int, k: int) -> int:
        return t_recv_ns + self.ttft_ns + (k - 1) * self.itl_ns

    async def until(self, due_ns: int) -> None:
        """Return at `due_ns` (monotonic ns), released by the ticker together with every other stream then due."""
        if due_ns <= time.monotonic_ns():
            return
        loop = asyncio.get_running_loop()
        if self._ticker is None or self._ticker.done():
            self._wake = asyncio.Event()
            self._ticker = loop.create_task(self._tick())
        fut: asyncio.Future[None] = loop.create_future()
        self._seq += 1
        heapq.heappush(self._heap, (due_ns, self._seq, fut))
        if self._heap[0][2] is fut and self._wake is not None:
            self._wake.set()  # a new earliest deadline: the ticker re-plans its sleep
        await fut

    async def _tick(self) -> None:
        clock = time.monotonic_ns
        heap = self._heap
        wake = self._wake
        assert wake is not None
        while True:
            if not heap:
                wake.clear()
                await wake.wait()
                continue
            left = heap[0][0] - clock()
            if left > PACE_SPIN_NS:
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), (left - PACE_SPIN_NS) / 1e9)
                except asyncio.TimeoutError:
                    pass
                continue
            if left > 0:
                await asyncio.sleep(0)
                continue
            now = clock()
            while heap and heap[0][0] <= now:
                fut = heapq.heappop(heap)[2]
                if not fut.done():
                    fut.set_result(None)
            await asyncio.sleep(0)

    async def stream(self, write: Callable[[bytes], Awaitable[None]], writer: ChunkWriter, req: SimRequest,
                     t_recv_ns: int) -> int:
        """Write every token of `req` as its own chunk when due, then [DONE]; return the token count."""
        n = req.target
        clock = time.monotonic_ns
        for k in range(1, n + 1):
            due = self.due_ns(t_recv_ns, k)
            await self.until(due)
            req.generated, req.finished = k, k == n
            await write(writer.chunk(k - 1, k, k == n))
            self.record(due, clock())
        await write(b"data: [DONE]\n\n")
        return n

    def record(self, due_ns: int, written_ns: int) -> None:
        if len(self.late_ns) < PACE_MAX_SAMPLES:
            self.late_ns.append(written_ns - due_ns)

    def reset(self) -> None:
        self.late_ns = array("q")

    def stats(self) -> dict[str, Any]:
        late = np.frombuffer(self.late_ns, dtype=np.int64)
        if not len(late):
            return {"writes": 0}
        p50, p99, p999 = np.percentile(late, [50, 99, 99.9])
        return {"writes": int(len(late)), "late_p50_us": float(p50) / 1e3, "late_p99_us": float(p99) / 1e3,
                "late_p999_us": float(p999) / 1e3, "late_max_us": float(late.max()) / 1e3,
                "ttft_ms": self.ttft_ns / 1e6, "itl_ms": self.itl_ns / 1e6}
