"""Pacing of a window's sends: waiting to an intended send time on the event loop, and a closed loop's share per
load shard."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Sequence

SPIN_NS = 1_500_000
"""Open loop: the last stretch before an intended send is waited by yielding to the loop, not by a timer."""


async def pace(target_ns: int, late_ns: int) -> int:
    """Wait until monotonic `target_ns`; return how late the wait ended (the next wait's `late_ns`)."""
    clock = time.monotonic_ns
    spin_ns = SPIN_NS if late_ns < SPIN_NS else 0
    delay_ns = target_ns - clock()
    if delay_ns > spin_ns:
        await asyncio.sleep((delay_ns - spin_ns) / 1e9)
    # event-loop timers fire on a 1 ms grid: finish the wait by yielding, which still serves other tasks; a loop that
    # is already late spins only if its timer fired early (uvloop's, on libuv's millisecond clock, fires up to ~1 ms
    # before the asked time), so no send is ever before its intended time
    while clock() < target_ns:
        await asyncio.sleep(0)
    return clock() - target_ns


def shard_concurrency(total: int, shard_index: int, num_shards: int) -> int:
    """This shard's share of a closed-loop concurrency (shares differ by at most one and sum to `total`).

    Each shard sends ~n/num_shards requests, so unequal shares finish at different times: use a concurrency
    divisible by the number of shards for a window whose concurrency holds to its end."""
    return total // num_shards + (1 if shard_index < total % num_shards else 0)


async def closed_loop(items: Sequence[int], concurrency: float, shard_index: int, num_shards: int, t0_ns: int,
                      send: Callable[[int, int], Awaitable[Any]]) -> None:
    """This shard's share of `concurrency` workers, each awaiting `send(item, intended_ns)` for its next item as soon
    as the one before ended: the intended send is the moment the worker's slot freed (window start at first)."""
    total = int(concurrency)
    if total < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if total < num_shards:
        raise ValueError(f"closed-loop concurrency {total} is below the number of shards {num_shards}")
    clock = time.monotonic_ns
    it = iter(items)

    async def worker() -> None:
        free_ns = 0
        for item in it:
            await send(item, free_ns)
            free_ns = clock() - t0_ns

    await asyncio.gather(*(worker() for _ in range(min(shard_concurrency(total, shard_index, num_shards),
                                                       len(items)))))
