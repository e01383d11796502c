"""The fixed-latency pacer: exact TTFT, then one token per write at a fixed inter-chunk delay, on one ticker."""

from __future__ import annotations

import asyncio
import heapq
import sys
import time
from array import array
from typing import Any, Optional

import numpy as np

from cluster.input_files import JsonValue
from cluster.sim.model import SimRequest
from cluster.sim.wire import ChunkWriter


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
