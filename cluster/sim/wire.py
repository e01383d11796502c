"""Wire rendering for the simulated SGLang engine: SSE chunks and response bodies in SGLang 0.5.23's shapes,
and the pacer of its fixed-latency mode (exact TTFT, one token per write at a fixed inter-chunk delay)."""

from __future__ import annotations

import asyncio
import heapq
import json
import sys
import time
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from cluster.input_files import JsonObject, JsonValue
from cluster.sim.model import Scheduler, SimRequest, piece
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


def metrics_text(sched: Scheduler, spec: Optional[SpecParams], model_name: str, gen_throughput: float,
                 streaming: "StreamingCounts", max_total_num_tokens: int) -> str:
    """Prometheus text with SGLang 0.5.23's `sglang:` names and labels (sorted, as prometheus_client writes them)
    for the gauges and counters the simulator models.

    Gauges carry the rank labels; the token and request counters carry `is_streaming` instead, and
    `spec_verify_calls_total` neither (it counts verify steps, the sum of meta_info spec_verify_ct)."""
    c = sched.counters
    name = json.dumps(model_name)
    gauge = f'engine_type="unified",model_name={name},moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    plain = f'engine_type="unified",model_name={name}'

    def split(label: str) -> str:
        return f'engine_type="unified",is_streaming="{label}",model_name={name}'

    rows: list[tuple[str, str, str, float]] = [
        ("num_running_reqs", "gauge", gauge, len(sched.running)),
        ("num_queue_reqs", "gauge", gauge, len(sched.waiting)),
        ("gen_throughput", "gauge", gauge, gen_throughput),
        ("token_usage", "gauge", gauge, sched.tokens_in_use() / max_total_num_tokens),
    ]
    if spec is not None:
        acc = c.last_interval_accept_length
        rate = (acc - 1.0) / max(1, spec.num_draft_tokens - 1) if acc is not None else 0.0
        rows += [("spec_accept_length", "gauge", gauge, acc if acc is not None else 0.0),
                 ("spec_accept_rate", "gauge", gauge, rate),
                 ("spec_num_steps", "gauge", gauge, spec.num_steps),
                 ("spec_num_draft_tokens", "gauge", gauge, spec.num_draft_tokens),
                 ("spec_verify_calls_total", "counter", plain, c.spec_verify_calls_total)]
    totals = {"generation_tokens_total": (c.generation_tokens_total, streaming.tokens),
              "prompt_tokens_total": (c.prompt_tokens_total, streaming.prompt_tokens),
              "num_requests_total": (c.num_requests_total, streaming.requests)}
    for metric, (total, streamed) in totals.items():
        rows += [(metric, "counter", split("false"), total - streamed),
                 (metric, "counter", split("true"), streamed)]
    out: list[str] = []
    seen: set[str] = set()
    for metric, kind, labels, val in rows:
        full = "sglang:" + metric
        if full not in seen:
            seen.add(full)
            out.append(f"# HELP {full} {metric.replace('_', ' ')} (simulated engine)")
            out.append(f"# TYPE {full} {kind}")
        out.append(f"{full}{{{labels}}} {float(val)!r}")
    return "\n".join(out) + "\n"


@dataclass
class StreamingCounts:
    """What streamed requests contributed to the token and request counters (SGLang's is_streaming="true")."""

    tokens: int = 0
    prompt_tokens: int = 0
    requests: int = 0

    def add(self, req: SimRequest, tokens: int) -> None:
        self.tokens += tokens
        self.prompt_tokens += req.prompt_tokens
        self.requests += 1


PACE_SPIN_NS = 1_500_000
"""Event-loop timers wake on a 1 ms grid: the last stretch before a due write is waited by re-queueing the ticker."""
PACE_NAP_NS = 200_000
"""Longest blocking nap of the ticker before it lets the loop serve I/O again (0 = spin by re-queueing only)."""
PACE_NAP_EARLY_NS = 30_000
"""Naps end this long before the due time; the rest is spun (wake-up latency of a nap)."""
PACE_MAX_SAMPLES = 4_000_000
PACE_MAX_LOGGED_REQUESTS = 20_000
"""Per-request write logs kept for GET /sim_pacing?requests=1 (older ones are dropped past this)."""


class PacedStream:
    """One fixed-latency stream: its transport, its next frame (rendered one write ahead) and its write times."""

    __slots__ = ("transport", "writer", "req", "chunked", "t_recv_ns", "k", "frame", "writes_ns", "done", "head")

    def __init__(self, transport: asyncio.Transport, writer: ChunkWriter, req: SimRequest, chunked: bool,
                 t_recv_ns: int, done: "asyncio.Future[int]", head: list[int]) -> None:
        self.transport = transport
        self.writer = writer
        self.req = req
        self.chunked = chunked
        self.t_recv_ns = t_recv_ns
        self.k = 0
        self.frame = b""
        self.writes_ns = array("q")
        self.done = done
        self.head = head

    def render(self, k: int) -> None:
        """Frame chunk k (1-based), HTTP chunked framing included; the last one carries [DONE] too.

        The last chunk (finish_reason, e2e_latency) is left empty here and rendered when written."""
        n = self.req.target
        self.k = k
        if k == n:
            self.frame = b""
            return
        self._frame(self.writer.chunk(k - 1, k, False) if k else b"data: [DONE]\n\n")

    def render_last(self) -> None:
        req = self.req
        req.generated, req.finished = req.target, True
        self._frame(self.writer.chunk(req.target - 1, req.target, True) + b"data: [DONE]\n\n")

    def _frame(self, body: bytes) -> None:
        self.frame = b"%x\r\n%b\r\n" % (len(body), body) if self.chunked else body


class Pacer:
    """Fixed-latency streams: chunk k (1-based) of a request is due at receipt + ttft + (k - 1) × itl.

    A single ticker callback (no task per stream, no coroutine switch per chunk) pops every due stream off a
    heap, writes its pre-rendered frame straight to the transport, then renders each one's next frame and pushes
    it back. It sleeps on a loop timer until shortly before the earliest due time and re-queues itself with
    call_soon for the last stretch (I/O is still served between turns). Records each write's lateness (write
    start − due, ns) and each transport.write call's duration on the simulator's own clock and, per request, the
    monotonic ns at which each write began, so a client on the same machine can split its own error from the
    simulator's. (On a loopback socket the send call delivers into the reader's socket and wakes the reader before
    it returns, so the write start, not its end, is when the bytes leave.)
    """

    def __init__(self, ttft_ms: float, itl_ms: float, nap_ns: int = PACE_NAP_NS) -> None:
        self.nap_ns = nap_ns
        self.ttft_ns = int(round(ttft_ms * 1e6))
        self.itl_ns = int(round(itl_ms * 1e6))
        self.late_ns = array("q")
        self.write_ns = array("q")
        self.log: list[dict[str, Any]] = []
        """Finished streams: rid, first prompt ids, receipt ns, write start ns (an int64 array, not JSON)."""
        self._heap: list[tuple[int, int, PacedStream]] = []
        self._seq = 0
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_due_ns = 0
        self._soon: Optional[asyncio.Handle] = None

    @classmethod
    def from_knobs(cls, ttft_ms: Optional[float], itl_ms: Optional[float]) -> Optional["Pacer"]:
        """The pacer of the fixed-latency knobs (either one missing takes the other's value); None when both unset."""
        if ttft_ms is None and itl_ms is None:
            return None
        return cls(ttft_ms if ttft_ms is not None else itl_ms or 0.0, itl_ms if itl_ms is not None else ttft_ms or 0.0)

    def due_ns(self, t_recv_ns: int, k: int) -> int:
        return t_recv_ns + self.ttft_ns + (k - 1) * self.itl_ns

    async def stream(self, transport: asyncio.Transport, chunked: bool, writer: ChunkWriter, req: SimRequest,
                     t_recv_ns: int, head: Optional[list[int]] = None) -> int:
        """Write every token of `req` as its own chunk when due, then [DONE]; return the tokens written.

        The response headers must already be on the wire; the frames go to `transport` directly."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        s = PacedStream(transport, writer, req, chunked, t_recv_ns, done, head or [])
        if req.target == 0:
            s.render(0)
            transport.write(s.frame)
            return 0
        s.render(1)
        self._push(self.due_ns(t_recv_ns, 1), s)
        return await done

    def _push(self, due_ns: int, s: PacedStream) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due_ns, self._seq, s))
        if self._soon is None and (self._timer is None or due_ns < self._timer_due_ns):
            self._plan(asyncio.get_running_loop())

    def _plan(self, loop: asyncio.AbstractEventLoop) -> None:
        """Arm the next turn of the ticker for the earliest due write (nothing when no stream waits)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._heap:
            return
        due = self._heap[0][0]
        left = due - time.monotonic_ns()
        if left > PACE_SPIN_NS:
            self._timer_due_ns = due
            self._timer = loop.call_later((left - PACE_SPIN_NS) / 1e9, self._tick)
            return
        if self.nap_ns and left > PACE_NAP_EARLY_NS:
            # sleep in the kernel instead of spinning: a sleeper wakes ahead of CPU hogs sharing its core, a
            # spinner is preempted by them for whole time slices; short naps bound how long I/O waits
            time.sleep(min(left - PACE_NAP_EARLY_NS, self.nap_ns) / 1e9)
        self._soon = loop.call_soon(self._tick)

    def _tick(self) -> None:
        self._soon = None
        self._timer = None
        heap = self._heap
        clock = time.monotonic_ns
        now = clock()
        due_now: list[tuple[int, PacedStream]] = []
        late = self.late_ns
        took = self.write_ns
        room = PACE_MAX_SAMPLES - len(late)
        while heap and heap[0][0] <= now:
            due, _, s = heapq.heappop(heap)
            tr = s.transport
            if tr.is_closing():
                if not s.done.done():
                    s.done.set_result(s.k - 1)
                continue
            if not s.frame:
                s.render_last()
            t = clock()
            tr.write(s.frame)
            s.writes_ns.append(t)
            if room > 0:
                late.append(t - due)
                took.append(clock() - t)
                room -= 1
            due_now.append((due, s))
        # render the next frames only after every due write went out, so one stream's work never delays another's
        for due, s in due_now:
            k = s.k
            req = s.req
            if k < req.target:
                req.generated = k
                s.render(k + 1)
                self._seq += 1
                heapq.heappush(heap, (due + self.itl_ns, self._seq, s))
            else:
                self._finish(s)
        self._plan(asyncio.get_running_loop())

    def _finish(self, s: PacedStream) -> None:
        if len(self.log) >= PACE_MAX_LOGGED_REQUESTS:
            del self.log[: PACE_MAX_LOGGED_REQUESTS // 2]
        self.log.append({"rid": s.req.rid, "head": s.head, "recv_ns": s.t_recv_ns, "writes_ns": s.writes_ns})
        if not s.done.done():
            s.done.set_result(s.k)

    def request_log(self) -> list[dict[str, JsonValue]]:
        """The per-request write log as JSON-ready dicts."""
        return [{**e, "writes_ns": e["writes_ns"].tolist()} for e in self.log]

    def reset(self) -> None:
        self.late_ns = array("q")
        self.write_ns = array("q")
        self.log = []

    def stats(self) -> dict[str, JsonValue]:
        late = np.frombuffer(self.late_ns, dtype=np.int64)
        if not len(late):
            return {"writes": 0}
        took = np.frombuffer(self.write_ns, dtype=np.int64)
        p50, p99, p999 = np.percentile(late, [50, 99, 99.9])
        w50, w99 = np.percentile(took, [50, 99])
        return {"writes": int(len(late)), "late_p50_us": float(p50) / 1e3, "late_p99_us": float(p99) / 1e3,
                "late_p999_us": float(p999) / 1e3, "late_max_us": float(late.max()) / 1e3,
                "write_call_p50_us": float(w50) / 1e3, "write_call_p99_us": float(w99) / 1e3,
                "ttft_ms": self.ttft_ns / 1e6, "itl_ms": self.itl_ns / 1e6}


def fine_timer_slack() -> None:
    """Linux: 1 ns timer slack (default 50 us), so the fixed-latency pacer's short naps end on time."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass
