"""Capacity at an SLO: the probe sequence brackets then bisects to the stated resolution, on synthetic servers
whose capacity is known."""

from __future__ import annotations

import math
from typing import Callable

import pytest

from cluster.plan.capacity import (CapacityAnswer, CapacitySearch, Outcome, Probe, Replay, answer, clamped, drive,
                                   next_probe, replay)


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


# --- resuming and driving the search over recorded runs ---------------------------------------------------------

def _at(capacity: float) -> Callable[[float], Outcome]:
    return lambda load: Outcome("ok", 1.0 if load <= capacity else 0.5)


def test_replay_walks_the_recorded_runs_and_names_the_next_probe() -> None:
    s = CapacitySearch(0.9, 1, 16, 1)
    truth = _at(5)
    # nothing recorded: the first probe is min
    assert replay(s, lambda x: None) == Replay((), 1.0)
    # 1, 2 and 4 recorded (all meet): the next is 8 (doubling)
    got = {1.0: truth(1), 2.0: truth(2), 4.0: truth(4)}
    rp = replay(s, got.get)
    assert [p.load for p in rp.probes] == [1, 2, 4] and rp.next_load == 8
    # an invalid probe stops the search (the next probe would depend on it); a failed one is measured again
    assert replay(s, {**got, 8.0: Outcome("invalid", 0.2)}.get).stopped == "the probe at 8 was invalid"
    assert replay(s, {**got, 8.0: Outcome("failed", None)}.get).next_load == 8


def test_drive_measures_only_what_is_missing_and_stops_on_a_probe_that_fails_again() -> None:
    s = CapacitySearch(0.9, 1, 16, 1)
    recorded: dict[float, Outcome] = {1.0: Outcome("ok", 1.0), 2.0: Outcome("ok", 1.0)}  # a resumed search
    measured: list[float] = []

    def measure(load: float) -> None:
        measured.append(load)
        recorded[load] = _at(5)(load)

    rp = drive(s, recorded.get, measure)
    # 4 meets, 8 misses, then bisect: 6 misses, 5 meets → found 5 (6 − 5 = the resolution)
    assert measured == [4, 8, 6, 5] and rp.next_load is None
    assert answer(s, rp.probes) == CapacityAnswer(5, 6, "found")
    assert drive(s, recorded.get, measure).probes == rp.probes and measured == [4, 8, 6, 5]  # all recorded: none
    flaky: list[float] = []
    rp = drive(s, lambda x: Outcome("failed", None) if x == 1 else None,
               lambda x: flaky.append(x))
    assert flaky == [1.0] and rp.next_load == 1.0  # measured once here; resubmission retries it


def test_a_concurrency_search_stops_at_the_servers_cap() -> None:
    s = clamped(CapacitySearch(0.9, 1, 64, 1), 8)
    assert s.max_load == 8
    probes: list[Probe] = []
    while (x := next_probe(s, probes)) is not None:
        probes.append(Probe(x, 1.0))  # it meets the SLO everywhere
    assert [p.load for p in probes] == [1, 2, 4, 8] and answer(s, probes).status == "at_max"
    assert clamped(CapacitySearch(0.9, 1, 64, 1), None).max_load == 64
    assert clamped(CapacitySearch(0.9, 1, 64, 1, integer=False), 8).max_load == 64  # rates have no such cap


SEARCH_SPEC = """
version: 1
name: cap
model: {path: sim://m, engine: sim}
variants: [{name: a}, {name: b}]
workloads: [{name: w, input_tokens: 16, output_tokens: 8, num_requests: 12}]
load: {concurrency: [CONC], search: {slo_attainment: 0.9, over: concurrency, min: 2, max: 16}}
slo: {tpot_ms: 50}
repeats: 2
"""


def test_the_plan_holds_each_search_s_first_probe_once() -> None:
    from cluster.plan.runs import make_plan
    from cluster.config.loader import parse_spec_text

    plain = make_plan(parse_spec_text(SEARCH_SPEC.replace("CONC", "8")))
    # per variant and repeat: the fixed c8 and the search's first probe c2
    assert [r.load.label for r in plain] == ["c8", "c2"] * 4
    same = make_plan(parse_spec_text(SEARCH_SPEC.replace("CONC", "2")))
    assert [r.load.label for r in same] == ["c2"] * 4  # the first probe is the fixed point's run
    only = make_plan(parse_spec_text(SEARCH_SPEC.replace("concurrency: [CONC], ", "")))
    assert [r.load.label for r in only] == ["c2"] * 4


@pytest.mark.parametrize("edit, fragment", [
    (("slo: {tpot_ms: 50}\n", ""), "set slo: with ttft_ms, tpot_ms and/or e2e_ms"),
    (("min: 2", "min: 2.5"), "a concurrency search probes integers"),
    (("max: 16", "max: 1"), "must be above min"),
    (("search: {", "actors_per_server: 2, search: {"), "needs actors_per_server: 1"),
])
def test_search_settings_the_spec_refuses(edit: tuple[str, str], fragment: str) -> None:
    from cluster.config.loader import SpecError, parse_spec_text

    with pytest.raises(SpecError, match=fragment.replace("(", r"\(")):
        parse_spec_text(SEARCH_SPEC.replace("CONC", "8").replace(*edit))
