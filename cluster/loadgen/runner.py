"""Async dispatcher of one measured window: closed-loop workers or an open-loop Poisson schedule, client-lag self-check.

Plain asyncio (no Ray): the load actor calls `run_load_point` (sync, own event loop) or awaits `run_window`.
Intended send times: open loop, the seeded Poisson offset; closed loop, the moment the worker's slot freed
(window start for each worker's first request). Lag = actual − intended send measures how late the client was.
"""

from __future__ import annotations

import asyncio
import sys
import gc
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, Sequence

import aiohttp
import numpy as np

from cluster.kernel.window_figures import client_lag
from cluster.engines.base import HttpRequest, Prompt, StreamRequest
from cluster.loadgen.load_target import LoadTarget
from cluster.loadgen.output_sample import sample_indices
from cluster.kernel.output_sample import OutputSample
from cluster.kernel.window import MeasuredWindow
from cluster.kernel.window_job import WindowJob
from cluster.loadgen.client import StreamPool, stream_request
from cluster.loadgen.eval import WindowCompanion
from cluster.loadgen.pacing import closed_loop, pace, shard_concurrency
from cluster.loadgen.selection import prompt_fingerprint, prompt_fingerprints
from cluster.loadgen.sessions import Answer, SessionPlan, dispatch_sessions
from cluster.loadgen.sink import BatchCallback, RecordSink
from cluster.kernel.records import RequestRecord

METRICS_TIMEOUT_S = 10.0
FLUSH_REFUSED_GIVE_UP_S = 3.0
FLUSH_RETRY_S = 0.25
PREOPEN_TIMEOUT_S = 5.0
"""The most a closed loop's pre-window connection set-up may take; one not open by then is left to its request."""


def _prompt_len(p: Prompt) -> int:
    # text prompts: the client does not tokenize, the server's prompt_tokens is the truth
    return len(p.input_ids) if p.input_ids is not None else 0


async def _scrape(session: aiohttp.ClientSession, engine: LoadTarget, base_url: str) -> dict[str, float]:
    """engine.spec_counters() of /metrics, {} when the endpoint is absent or unreachable."""
    try:
        async with session.get(
            base_url + engine.metrics_path, timeout=aiohttp.ClientTimeout(total=METRICS_TIMEOUT_S)
        ) as resp:
            if resp.status != 200:
                return {}
            text = await resp.text(errors="replace")
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
        return {}
    return dict(engine.spec_counters(text))


async def _scrape_all(session: aiohttp.ClientSession, engine: LoadTarget, job: WindowJob) -> dict[str, float]:
    """The speculative counters summed over every server of the window (one, or a deployment's workers)."""
    total: dict[str, float] = {}
    for _, url in job.metrics_targets():
        for k, v in (await _scrape(session, engine, url.rstrip("/"))).items():
            total[k] = total.get(k, 0.0) + v
    return total


@dataclass(frozen=True)
class _Send:
    """What the dispatcher of one shard sends and where its records go (built by run_window inside the window)."""

    request_for: Callable[[Prompt], HttpRequest]
    prompt_for: Callable[[int], Prompt]
    indices: Sequence[int]
    n_total: int
    t0_ns: int
    sink: RecordSink
    sampled: frozenset[int] = frozenset()
    samples: Optional[list[OutputSample]] = None
    sessions: Optional[SessionPlan] = None
    fingerprints: Optional[np.ndarray] = None


async def _dispatch(pool: StreamPool, engine: LoadTarget, job: WindowJob, w: _Send) -> None:
    """Send every request of this shard of the window; each finished record goes to `w.sink` exactly once. The
    requests in `w.sampled` keep their output (a text-keeping parser) in `w.samples`; `w.sessions` sends the window
    as multi-turn sessions (`w.indices` then holds this shard's sessions' requests). `w.fingerprints[i]` is request
    i's prompt_fingerprint of prompt_for(i), hashed before the window; a prompt handed in (a session's turn) is
    hashed after its response, off the send path."""
    api, max_tokens, load, seed = job.api, job.max_tokens, job.load, job.seed
    request_timeout_s, t0_ns, sink = job.request_timeout_s, w.t0_ns, w.sink
    num_shards, shard_index, n_total = job.num_shards, job.shard_index, w.n_total
    request_for, prompt_for, indices, sampled, samples = w.request_for, w.prompt_for, w.indices, w.sampled, w.samples
    sessions, fingerprints = w.sessions, w.fingerprints
    new_parser = engine.new_parser
    clock = time.monotonic_ns

    async def one(i: int, intended_ns: int, p: Optional[Prompt] = None, answer: bool = False,
                  where: tuple[Optional[int], Optional[int]] = (None, None)) -> tuple[int, Optional[Answer]]:
        """Send request i (prompt `p`, else its own); (its end, its answer when `answer` and it succeeded)."""
        given = p is not None
        p = prompt_for(i) if p is None else p
        rec = RequestRecord(
            request_index=i,
            intended_send_ns=intended_ns,
            actual_send_ns=intended_ns,
            prompt_tokens_sent=_prompt_len(p),
            max_tokens=p.max_tokens or max_tokens,
            category=p.category,
            session_index=where[0],
            turn=where[1],
            # a session's later turn (made by next_turn) may not carry a row: its user turn's is the row
            source_row=p.source_row if p.source_row is not None or not given else prompt_for(i).source_row,
            prompt_fingerprint=None if given or fingerprints is None else int(fingerprints[i]),
        )
        got: Optional[Answer] = None
        try:
            r = request_for(p)
            keep = answer or i in sampled
            parser = new_parser(api, keep_text=True) if keep else new_parser(api)
            end_ns = await stream_request(pool, r.path, r.body, parser, t0_ns, request_timeout_s, rec, r.headers)
            if keep:
                ids = parser.output_ids()
                if i in sampled and samples is not None:
                    samples.append(OutputSample(i, tuple(ids) if ids is not None else None, parser.text(), rec.error))
                if answer and rec.ok:
                    got = Answer(parser.text(), tuple(ids) if ids is not None else None)
        except Exception as e:  # a parser or client bug must not lose the record of a request already sent
            rec.error = rec.error or f"client error: {type(e).__name__}: {e}"
            end_ns = clock() - t0_ns
        if rec.prompt_fingerprint is None:
            rec.prompt_fingerprint = prompt_fingerprint(p)
        sink.add(rec, end_ns)
        return end_ns, got

    if sessions is not None:
        await dispatch_sessions(one, job, prompt_for, sessions, n_total, t0_ns, sink)
        return
    sched = load.shape.schedule(load, n_total, seed, lambda: [prompt_for(i).arrival_s for i in range(n_total)])
    if sched.concurrency is not None:
        await closed_loop(indices, sched.concurrency, shard_index, num_shards, t0_ns, one)
    else:
        # the global schedule of all n requests, of which this shard sends its own indices
        assert sched.offsets_ns is not None
        offsets = sched.offsets_ns[shard_index::num_shards]
        cap = (asyncio.Semaphore(max(1, shard_concurrency(int(sched.max_concurrency), shard_index, num_shards)))
               if sched.max_concurrency else None)
        tasks: set[asyncio.Task[Any]] = set()
        late_ns = 0

        async def capped(i: int, intended: int) -> None:
            assert cap is not None
            try:
                await one(i, intended)
            finally:
                cap.release()

        task: asyncio.Task[Any]
        for i, off in zip(indices, offsets.tolist()):
            late_ns = await pace(t0_ns + off, late_ns)
            if cap is not None:
                # a request held back by the cap keeps its intended time: the wait shows up as lag
                await cap.acquire()
                task = asyncio.create_task(capped(i, off))
            else:
                task = asyncio.create_task(one(i, off))
            tasks.add(task)  # finished tasks leave the set, so a long window keeps only those in flight
            task.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.gather(*list(tasks))


async def run_window(engine: LoadTarget, job: WindowJob, prompts: Sequence[Prompt], *,
                     on_batch: Optional[BatchCallback] = None, sessions: Optional[SessionPlan] = None,
                     alongside: Optional[WindowCompanion] = None) -> MeasuredWindow:
    """One measured window of `job`: one request per prompt, raw records as Arrow batches, client lag and server
    counters.

    Records leave in batches of at most `job.batch_rows` finished requests: to `on_batch` when given (the result's
    requests/chunks are then empty), else kept as Arrow and returned sorted by request_index. A shard sends the
    requests i with i % num_shards == shard_index at their place in the global schedule (open loop) or with its
    share of the concurrency (closed loop); `job.start_unix_s` lets several shards start their windows together.
    `alongside` (loadgen/eval.py) starts with the window and is told when its load has ended; its answers come back
    apart from the window's records (MeasuredWindow.eval_answers).
    """
    shard_index, num_shards, load = job.shard_index, job.num_shards, job.load
    request_timeout_s, start_unix_s = job.request_timeout_s, job.start_unix_s
    base_url = job.base_url.rstrip("/")
    n_total = len(prompts)
    indices: Sequence[int] = range(shard_index, n_total, num_shards)
    if sessions is not None:
        # a shard sends whole sessions: those s with s % num_shards == shard_index
        indices = [i for s in range(shard_index, sessions.n_sessions(n_total), num_shards)
                   for i in sessions.requests_of(s, n_total)]

    def request_for(p: Prompt) -> HttpRequest:
        # built at send time: a long window never holds every request body at once
        return engine.build_request(StreamRequest(job.api, p, p.max_tokens or job.max_tokens, job.ignore_eos,
                                                  job.temperature, job.model_name))

    def prompt_for(i: int) -> Prompt:
        return prompts[i]

    bound = load.shape.in_flight_bound(load)
    limit = shard_concurrency(bound, shard_index, num_shards) if bound else 0
    sink = RecordSink(len(indices), job.batch_rows, on_batch)
    # what each request sends is hashed now, not in the window; a session's later turns are made in it
    fingerprints = prompt_fingerprints(prompts, indices) if sessions is None else None
    async with aiohttp.ClientSession(headers=engine.headers) as session, \
            StreamPool(base_url, max(limit, 1) if limit else 0, engine.headers, load.read_batch_s) as pool:
        before = await _scrape_all(session, engine, job) if job.scrape_metrics else {}
        if load.shape.closed:
            # the first wave's connections open before the window, so its TTFT holds no TCP set-up, like every
            # later request's on a kept-alive connection; an open loop's need is not known ahead and it connects
            # as it sends
            await pool.preopen(min(limit, len(indices)), min(request_timeout_s, PREOPEN_TIMEOUT_S))
        if start_unix_s is not None:
            # shards of one window start together: a timer to within a few ms, then a short spin on the clock
            wait_s = start_unix_s - time.time()
            if wait_s > 0.005:
                await asyncio.sleep(wait_s - 0.005)
            while time.time() < start_unix_s:
                pass
        window_start_unix_s = time.time()
        t0_ns = time.monotonic_ns()
        samples: list[OutputSample] = []
        # Every object alive now (modules, prompts, the pool) leaves the collector's view for the window: a full
        # collection over them took 25-55 ms here, and a loop stalled that long merges each stream's events into
        # one read with one stamp (TTFT +30 ms, ITL gaps of 0 at 64 streams). Objects made in the window are
        # collected as usual; unfreeze hands the rest back after it.
        load_done = asyncio.Event()
        companion = asyncio.ensure_future(alongside(t0_ns, load_done)) if alongside is not None else None
        gc.freeze()
        try:
            await _dispatch(pool, engine, job, _Send(request_for, prompt_for, indices, n_total, t0_ns, sink,
                                                     sample_indices(n_total), samples, sessions, fingerprints))
        except BaseException:
            if companion is not None:
                companion.cancel()
            raise
        finally:
            gc.unfreeze()
            load_done.set()
        sink.flush()
        after = await _scrape_all(session, engine, job) if job.scrape_metrics else {}
        eval_answers = await companion if companion is not None else ()
    assert sink.rows == len(indices), "every request must have exactly one record"
    requests, chunks = sink.kept_batches()
    # rows streamed out leave their lag to whoever keeps them (the driver judges it over every shard's rows)
    lag = client_lag(sink.lags()) if on_batch is None else None
    lag_p50, lag_p99, lag_max = (round(lag.p50_ns), round(lag.p99_ns), round(lag.max_ns)) if lag else (0, 0, 0)
    duration_s = sink.last_end_ns / 1e9 if sink.rows else 0.0  # the window's first intended send is its start
    return MeasuredWindow(
        requests=requests,
        chunks=chunks,
        window_start_unix_s=window_start_unix_s,
        duration_s=duration_s,
        lag_p50_ns=lag_p50,
        lag_p99_ns=lag_p99,
        counters_before=before,
        counters_after=after,
        n_requests=sink.rows,
        n_chunks=sink.chunk_rows,
        batches=sink.batches,
        peak_buffered_rows=sink.peak_buffered_rows,
        lag_max_ns=lag_max,
        shard_index=shard_index,
        num_shards=num_shards,
        window_start_monotonic_ns=t0_ns,
        samples=tuple(sorted(samples, key=lambda x: x.request_index)),
        eval_answers=eval_answers,
        event_loop=event_loop_name(asyncio.get_running_loop()),
    )


def event_loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop 0.23.0` or `asyncio` (with the Python version): what paced and timed the window's sends."""
    module = type(loop).__module__.split(".")[0]
    if module == "uvloop":
        from importlib.metadata import version

        return f"uvloop {version('uvloop')}"
    return f"asyncio (Python {sys.version.split()[0]})"


async def warmup(engine: LoadTarget, job: WindowJob, prompts: list[Prompt]) -> int:
    """Send every prompt of the warmup's `job` (WindowJob.warmup); return how many succeeded."""
    if not prompts:
        return 0
    res = await run_window(engine, job, prompts)
    errors = res.requests.column("error").to_pylist()
    chunks = res.requests.column("num_chunks").to_pylist()
    return sum(1 for e, c in zip(errors, chunks) if e is None and c > 0)


async def flush(engine: LoadTarget, base_url: str, timeout_s: float) -> bool:
    """POST the engine's flush path until it answers 200 (it refuses while requests are pending) or timeout_s passes.

    True when flushed or when the engine has no flush endpoint.
    """
    if engine.flush_path is None:
        return True
    url = base_url.rstrip("/") + engine.flush_path
    deadline = time.monotonic() + timeout_s
    refused_since: Optional[float] = None
    async with aiohttp.ClientSession(headers=engine.headers) as session:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                async with session.post(url, timeout=aiohttp.ClientTimeout(total=max(0.1, left))) as resp:
                    body = await resp.read()
                    refused_since = None
                    # vLLM answers 200 with {"success": false} when blocks are still held: not flushed yet
                    if resp.status == 200 and b'"success":false' not in body.replace(b" ", b""):
                        return True
            except aiohttp.ClientConnectorError:
                # nothing listens: a healthy server that stops accepting connections has died; do not wait it out
                now = time.monotonic()
                refused_since = refused_since if refused_since is not None else now
                if now - refused_since > FLUSH_REFUSED_GIVE_UP_S:
                    return False
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(min(FLUSH_RETRY_S, max(0.0, deadline - time.monotonic())))


def _run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine on a fresh uvloop event loop, closing it afterwards. uvloop is a base dependency, so the
    load generator paces with the same loop in CI as on a node (SGLang's image has it too); an install without it
    falls back to asyncio's, and every run records which one timed it (MeasuredWindow.event_loop)."""
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def run_load_point(engine: LoadTarget, job: WindowJob, prompts: Sequence[Prompt], *,
                   on_batch: Optional[BatchCallback] = None, sessions: Optional[SessionPlan] = None,
                   alongside: Optional[WindowCompanion] = None) -> MeasuredWindow:
    """Synchronous `run_window` on its own event loop (for a sync actor method or a script)."""
    result: MeasuredWindow = _run(
        lambda: run_window(engine, job, prompts, on_batch=on_batch, sessions=sessions, alongside=alongside))
    return result
