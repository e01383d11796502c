"""Fixtures: start the simulated SGLang server as a subprocess on a free loopback port; stop it by its handle."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import pytest
from sim_process import SimHandle, start_sim, stop_sim


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., SimHandle]]:
    started: list[SimHandle] = []

    def make(argv: Optional[list[str]] = None, knobs: Optional[dict[str, Any]] = None,
             wait_healthy: bool = True) -> SimHandle:
        h = start_sim(list(argv or []), {"time_scale": 0.01, **(knobs or {})}, wait_healthy)
        started.append(h)
        return h

    yield make
    for h in started:
        stop_sim(h)


@pytest.fixture(scope="module")
def sim_base() -> Iterator[SimHandle]:
    h = start_sim(["--enable-metrics", "--max-running-requests", "8"], {"time_scale": 0.01})
    yield h
    stop_sim(h)


@pytest.fixture(scope="module")
def sim_spec() -> Iterator[SimHandle]:
    h = start_sim(["--enable-metrics", "--max-running-requests", "8", "--speculative-algorithm", "NEXTN",
                   "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", "4"], {"time_scale": 0.01})
    yield h
    stop_sim(h)
