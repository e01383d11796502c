"""Capacity at an SLO: the probe sequence brackets then bisects to the stated resolution, on synthetic servers
whose capacity is known."""

from __future__ import annotations

import math
from typing import Callable

import pytest

from cluster.plan.capacity import CapacityAnswer, CapacitySearch, Probe, answer, next_probe


def _search(search: CapacitySearch, attainment: Callable[[float], float]) -> tuple[list[Probe], CapacityAnswer]:
    probes: list[Probe] = []
    while (load := next_probe(search, probes)) is not None:
        assert search.min_load <= load <= search.max_load and load not in {p.load for p in probes}
        probes.append(Probe(load, attainment(load)))
        assert len(probes) < 40
    return probes, answer(search, probes)


@pytest.mark.parametrize("capacity", [1, 2, 7, 37, 63, 64, 100, 255])
def test_integer_concurrency_capacity_is_found_exactly(capacity: int) -> None:
    s = CapacitySearch(target=0.9, min_load=1, max_load=256, resolution=1)
    probes, got = _search(s, lambda c: 0.97 if c <= capacity else 0.6)
    assert got.status == "found" and got.value == capacity and got.lowest_miss == capacity + 1
    assert len(probes) <= 2 * math.ceil(math.log2(256)) + 1


def test_request_rate_capacity_within_the_resolution() -> None:
    s = CapacitySearch(target=0.95, min_load=0.5, max_load=64.0, resolution=0.25, integer=False)
    probes, got = _search(s, lambda r: 1.0 - 0.02 * max(0.0, r - 10.0))  # attainment 0.95 at r = 12.5
    assert got.status == "found" and got.value is not None and got.lowest_miss is not None
    assert got.value <= 12.5 < got.lowest_miss and got.lowest_miss - got.value <= 0.25


def test_capacity_below_min_and_at_max() -> None:
    s = CapacitySearch(target=0.9, min_load=4, max_load=32, resolution=1)
    probes, got = _search(s, lambda c: 0.5)
    assert got.status == "below_min" and got.value is None and [p.load for p in probes] == [4]
    probes, got = _search(s, lambda c: 1.0)
    assert got.status == "at_max" and got.value == 32 and [p.load for p in probes] == [4, 8, 16, 32]


def test_a_noisy_pass_above_a_miss_never_raises_the_answer() -> None:
    s = CapacitySearch(target=0.9, min_load=1, max_load=64, resolution=1)
    probes = [Probe(1, 1.0), Probe(2, 1.0), Probe(4, 1.0), Probe(8, 0.5), Probe(16, 0.95)]
    got = answer(s, probes)
    assert got.value == 4 and got.lowest_miss == 8 and got.status == "searching"
    assert next_probe(s, probes) == 6


def test_bad_search_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="target"):
        CapacitySearch(target=1.5, min_load=1, max_load=8, resolution=1)
    with pytest.raises(ValueError, match="min_load"):
        CapacitySearch(target=0.9, min_load=8, max_load=8, resolution=1)
