"""Async dispatcher of one measured window: closed-loop workers or an open-loop Poisson schedule, client-lag self-check.

Plain asyncio (no Ray): the load actor calls `run_load_point` (sync, own event loop) or awaits `run_window`.
Intended send times: open loop, the seeded Poisson offset; closed loop, the moment the worker's slot freed
(window start for each worker's first request). Lag = actual − intended send measures how late the client was.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

import aiohttp
import numpy as np
import pyarrow as pa

from cluster.engines.base import Engine, HttpRequest, Prompt
from cluster.loadgen.arrivals import poisson_offsets_ns
from cluster.loadgen.client import new_session, stream_request
from cluster.plan import LoadPoint
from cluster.records import RequestRecord, request_batches

METRICS_TIMEOUT_S = 10.0
FLUSH_RETRY_S = 0.25
SPIN_NS = 1_500_000
"""Open loop: the last stretch before an intended send is waited by yielding to the loop, not by a timer."""


@dataclass
class WindowResult:
    requests: pa.RecordBatch
    """cluster.records.REQUEST_BATCH_SCHEMA, one row per request sent, in request_index order."""
    chunks: pa.RecordBatch
    """cluster.records.CHUNK_BATCH_SCHEMA: token-carrying chunks only."""
    window_start_unix_s: float
    duration_s: float
    """First intended send → end of the last response of the window."""
    lag_p50_ns: int
    lag_p99_ns: int
    counters_before: dict[str, float]
    counters_after: dict[str, float]


def _prompt_len(p: Prompt) -> int:
    # text prompts: the client does not tokenize, the server's prompt_tokens is the truth
    return len(p.input_ids) if p.input_ids is not None else 0


async def _scrape(session: aiohttp.ClientSession, engine: Engine, base_url: str) -> dict[str, float]:
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


async def _dispatch(
    session: aiohttp.ClientSession,
    engine: Engine,
    base_url: str,
    api: str,
    reqs: list[HttpRequest],
    prompt_lens: list[int],
    max_tokens: int,
    load: LoadPoint,
    seed: int,
    request_timeout_s: float,
    t0_ns: int,
) -> tuple[list[RequestRecord], list[int]]:
    """Send every request of the window; return records and response-end times (ns from t0), by request index."""
    n = len(reqs)
    records: list[Optional[RequestRecord]] = [None] * n
    ends = [0] * n
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    urls = {r.path: base_url + r.path for r in reqs}

    async def one(i: int, intended_ns: int) -> None:
        rec = RequestRecord(
            request_index=i,
            intended_send_ns=intended_ns,
            actual_send_ns=intended_ns,
            prompt_tokens_sent=prompt_lens[i],
            max_tokens=max_tokens,
        )
        records[i] = rec
        r = reqs[i]
        try:
            ends[i] = await stream_request(session, urls[r.path], r.body, engine.new_parser(api), t0_ns, timeout, rec)
        except Exception as e:  # a parser or client bug must not lose the record of a request already sent
            rec.error = rec.error or f"client error: {type(e).__name__}: {e}"
            ends[i] = time.monotonic_ns() - t0_ns

    if load.kind == "concurrency":
        workers = int(load.value)
        if workers < 1:
            raise ValueError(f"concurrency must be >= 1, got {load.value}")
        next_index = 0

        async def worker() -> None:
            nonlocal next_index
            intended = 0  # each worker's slot is free at window start
            while next_index < n:
                i = next_index
                next_index += 1
                await one(i, intended)
                intended = time.monotonic_ns() - t0_ns

        await asyncio.gather(*(worker() for _ in range(min(workers, n))))
    elif load.kind == "rate":
        offsets = poisson_offsets_ns(n, load.value, np.random.default_rng(seed)).tolist()
        cap = asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else None
        tasks: list[asyncio.Task[None]] = []
        late_ns = 0

        async def capped(i: int, intended: int) -> None:
            assert cap is not None
            try:
                await one(i, intended)
            finally:
                cap.release()

        for i, off in enumerate(offsets):
            target_ns = t0_ns + off
            spin_ns = SPIN_NS if late_ns < SPIN_NS else 0
            delay_ns = target_ns - time.monotonic_ns()
            if delay_ns > spin_ns:
                await asyncio.sleep((delay_ns - spin_ns) / 1e9)
            # event-loop timers fire on a 1 ms grid: finish the wait by yielding, which still serves other tasks;
            # a loop that is already late skips this (spinning would only take CPU from the streams)
            while spin_ns and time.monotonic_ns() < target_ns:
                await asyncio.sleep(0)
            late_ns = time.monotonic_ns() - target_ns
            if cap is not None:
                # a request held back by the cap keeps its intended time: the wait shows up as lag
                await cap.acquire()
                tasks.append(asyncio.create_task(capped(i, off)))
            else:
                tasks.append(asyncio.create_task(one(i, off)))
        await asyncio.gather(*tasks)
    else:
        raise ValueError(f"unknown load kind {load.kind!r} (expected 'concurrency' or 'rate')")
    done = [r for r in records if r is not None]
    assert len(done) == n, "every request must have exactly one record"
    return done, ends


async def run_window(
    engine: Engine,
    base_url: str,
    api: str,
    prompts: list[Prompt],
    max_tokens: int,
    load: LoadPoint,
    seed: int,
    ignore_eos: bool,
    temperature: float,
    model_name: str,
    request_timeout_s: float,
    scrape_metrics: bool = True,
) -> WindowResult:
    """One measured window: one request per prompt, raw records as Arrow batches, client lag and server counters."""
    base_url = base_url.rstrip("/")
    reqs = [engine.build_request(api, p, max_tokens, ignore_eos, temperature, model_name) for p in prompts]
    prompt_lens = [_prompt_len(p) for p in prompts]
    limit = int(load.value) if load.kind == "concurrency" else (load.max_concurrency or 0)
    async with new_session(limit) as session:
        before = await _scrape(session, engine, base_url) if scrape_metrics else {}
        window_start_unix_s = time.time()
        t0_ns = time.monotonic_ns()
        records, ends = await _dispatch(
            session, engine, base_url, api, reqs, prompt_lens, max_tokens, load, seed, request_timeout_s, t0_ns
        )
        after = await _scrape(session, engine, base_url) if scrape_metrics else {}
    requests, chunks = request_batches(records)
    if records:
        first_intended = min(r.intended_send_ns for r in records)
        last_end = max(max(ends), max((r.chunk_arrival_ns[-1] for r in records if r.chunk_arrival_ns), default=0))
        duration_s = (last_end - first_intended) / 1e9
        lags = np.fromiter((r.actual_send_ns - r.intended_send_ns for r in records), dtype=np.int64, count=len(records))
        lag_p50, lag_p99 = (int(x) for x in np.percentile(lags, [50, 99]))
    else:
        duration_s, lag_p50, lag_p99 = 0.0, 0, 0
    return WindowResult(
        requests=requests,
        chunks=chunks,
        window_start_unix_s=window_start_unix_s,
        duration_s=duration_s,
        lag_p50_ns=lag_p50,
        lag_p99_ns=lag_p99,
        counters_before=before,
        counters_after=after,
    )


async def warmup(
    engine: Engine,
    base_url: str,
    api: str,
    prompts: list[Prompt],
    max_tokens: int,
    concurrency: int,
    ignore_eos: bool,
    temperature: float,
    model_name: str,
    timeout_s: float,
) -> int:
    """Send every prompt closed-loop at `concurrency` (timeout_s per request); return how many succeeded."""
    if not prompts:
        return 0
    res = await run_window(
        engine, base_url, api, prompts, max_tokens, LoadPoint("concurrency", float(max(1, concurrency))), 0,
        ignore_eos, temperature, model_name, timeout_s, scrape_metrics=False,
    )
    errors = res.requests.column("error").to_pylist()
    chunks = res.requests.column("num_chunks").to_pylist()
    return sum(1 for e, c in zip(errors, chunks) if e is None and c > 0)


async def flush(engine: Engine, base_url: str, timeout_s: float) -> bool:
    """POST the engine's flush path until it answers 200 (it refuses while requests are pending) or timeout_s passes.

    True when flushed or when the engine has no flush endpoint.
    """
    if engine.flush_path is None:
        return True
    url = base_url.rstrip("/") + engine.flush_path
    deadline = time.monotonic() + timeout_s
    async with new_session(1) as session:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                async with session.post(url, timeout=aiohttp.ClientTimeout(total=max(0.1, left))) as resp:
                    await resp.read()
                    if resp.status == 200:
                        return True
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(min(FLUSH_RETRY_S, max(0.0, deadline - time.monotonic())))


def _run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine on a fresh event loop (uvloop when importable), closing it afterwards."""
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


def run_load_point(
    engine: Engine,
    base_url: str,
    api: str,
    prompts: list[Prompt],
    max_tokens: int,
    load: LoadPoint,
    seed: int,
    ignore_eos: bool,
    temperature: float,
    model_name: str,
    request_timeout_s: float,
    scrape_metrics: bool = True,
) -> WindowResult:
    """Synchronous `run_window` on its own event loop (for a sync actor method or a script)."""
    result: WindowResult = _run(
        lambda: run_window(
            engine, base_url, api, prompts, max_tokens, load, seed, ignore_eos, temperature, model_name,
            request_timeout_s, scrape_metrics,
        )
    )
    return result
