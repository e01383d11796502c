"""The over-saturation predicate on hand-built sweeps whose growth figures are worked out in the comments, and the
capacity search that stops at it."""

from __future__ import annotations

import math

import pytest

from cluster.config.fields import SpecError
from cluster.config.loader import parse_spec_text
from cluster.plan.capacity import CapacitySearch, Outcome, Probe, answer, next_probe, replay
from cluster.plan.saturation import (SweepPoint, first_saturated, point_of, saturation, skip_reason,
                                     sweep_saturation)

# a closed-loop sweep of a server that runs at most 4 requests at once
SWEEP = [
    SweepPoint(1, 70.0, 20.0, 1.0),
    SweepPoint(2, 138.0, 22.0, 2.0),    # load +100 %, tok/s +97 %: still growing
    SweepPoint(4, 270.0, 25.0, 4.0),    # load +100 %, tok/s +96 %: still growing
    SweepPoint(8, 280.0, 120.0, 8.0),   # load +100 %, tok/s +3.7 % < 25 %, TTFT +380 %, in flight +100 %: saturated
    SweepPoint(16, 281.0, 360.0, 15.9),  # load +100 %, tok/s +0.4 %, TTFT +200 %, in flight +99 %: saturated
]


def test_the_knee_and_above_are_saturated_with_every_figure_named() -> None:
    marks = sweep_saturation(SWEEP)
    assert marks[:3] == [None, None, None]
    assert marks[3] == ("saturated past 4: load +100%, output tok/s +4% (< 25% of the load's growth), TTFT p50 "
                        "+380% (>= +50%), in flight +100% (>= +10%)")
    assert marks[4] is not None and marks[4].startswith("saturated past 8: load +100%, output tok/s +0%")
    assert first_saturated(SWEEP) == (8, marks[3])


def test_order_of_the_points_does_not_matter() -> None:
    shuffled = [SWEEP[4], SWEEP[0], SWEEP[3], SWEEP[2], SWEEP[1]]
    assert [m is not None for m in sweep_saturation(shuffled)] == [True, False, True, False, False]


def test_each_figure_is_needed() -> None:
    lo = SweepPoint(4, 270.0, 25.0, 4.0)
    # throughput still grows: +50 % for +100 % load is above 25 % of it
    assert saturation(lo, SweepPoint(8, 405.0, 120.0, 8.0)) is None
    # throughput flat but TTFT only +40 % (< 50 %): e.g. the client, not the server's queue, held it back
    assert saturation(lo, SweepPoint(8, 280.0, 35.0, 8.0)) is None
    # throughput flat and TTFT up, but in flight +5 % (< 10 %): nothing more is waiting
    assert saturation(lo, SweepPoint(8, 280.0, 120.0, 4.2)) is None
    # a smaller load step needs proportionally less growth: load +25 %, tok/s +5 % < 6.25 %, TTFT +60 %, in flight +25 %
    assert saturation(lo, SweepPoint(5, 283.5, 40.0, 5.0)) is not None
    # the same +5 % of tok/s on a +10 % load step is above 2.5 %: still growing
    assert saturation(lo, SweepPoint(4.4, 283.5, 40.0, 5.0)) is None


def test_a_point_is_the_mean_of_its_runs_figures() -> None:
    # two repeats: tok/s (276 + 284) / 2 = 280, TTFT (110 + 130) / 2 = 120, in flight: only one run has it
    assert point_of(8, [276.0, 284.0], [110.0, 130.0], [None, 8.0]) == SweepPoint(8, 280.0, 120.0, 8.0)
    assert point_of(8, [], [math.nan], [None]) == SweepPoint(8, None, None, None)


def test_a_missing_figure_or_no_load_growth_is_not_judged() -> None:
    lo = SweepPoint(4, 270.0, 25.0, 4.0)
    assert saturation(lo, SweepPoint(8, None, 120.0, 8.0)) is None
    assert saturation(lo, SweepPoint(8, 280.0, math.nan, 8.0)) is None
    assert saturation(lo, SweepPoint(4, 280.0, 120.0, 8.0)) is None
    assert saturation(SweepPoint(8, 280.0, 120.0, 8.0), lo) is None
    assert first_saturated([lo]) is None


def _knee_server(load: float) -> Probe:
    """A server that runs at most 8 requests at once and meets a loose SLO everywhere: tok/s grows with the load up
    to 8, then stays; past 8 the extra requests wait, so TTFT grows with the queue; in flight = the concurrency."""
    return Probe(load, 0.99, SweepPoint(load, 10.0 * min(load, 8), 20.0 * max(1.0, load / 8), load))


def test_the_capacity_search_stops_doubling_at_a_saturated_probe() -> None:
    s = CapacitySearch(target=0.9, min_load=1, max_load=256, resolution=1)
    probes: list[Probe] = []
    while (load := next_probe(s, probes)) is not None:
        probes.append(_knee_server(load))
    # 1, 2, 4, 8 grow with the load; 16: tok/s +0 % for +100 % load, TTFT 20 -> 40 ms (+100 %), in flight +100 %:
    # saturated, so the search ends one step past it (17, still meeting the SLO), not at 256
    assert [p.load for p in probes] == [1, 2, 4, 8, 16, 17]
    got = answer(s, probes)
    assert (got.status, got.value) == ("at_max", 17)
    assert got.saturated is not None and got.saturated.startswith("saturated past c8: load +100%, output tok/s +0%")
    # the same probes without their figures: nothing is judged, the search doubles on to max_load
    bare = [Probe(p.load, p.attainment) for p in probes[:5]]
    assert next_probe(s, bare) == 32 and answer(s, bare).saturated is None


def test_an_slo_bound_just_past_the_knee_is_still_found_exactly() -> None:
    s = CapacitySearch(target=0.9, min_load=1, max_load=256, resolution=1)
    probes = [_knee_server(x) for x in (1, 2, 4, 8, 16)]
    assert next_probe(s, probes) == 17  # one step past the saturated 16
    probes.append(Probe(17, 0.5))  # 17 misses the SLO: the capacity is 16, bracketed to the resolution
    got = answer(s, probes)
    assert (got.status, got.value, got.lowest_miss) == ("found", 16, 17)


def test_a_missed_slo_bounds_the_search_before_saturation_does() -> None:
    s = CapacitySearch(target=0.9, min_load=1, max_load=256, resolution=1)
    probes = [_knee_server(x) for x in (1, 2, 4, 8, 16)] + [Probe(32, 0.5, SweepPoint(32, 80.0, 80.0, 32))]
    # 32 missed the SLO: the bracket [16, 32) is bisected as before (saturation only ends a search still doubling)
    got = answer(s, probes)
    assert (got.status, got.value, got.lowest_miss, got.saturated) == ("searching", 16, 32, None)
    assert next_probe(s, probes) == 24


def test_a_resumed_search_reads_the_figures_of_its_recorded_runs() -> None:
    s = CapacitySearch(target=0.9, min_load=1, max_load=256, resolution=1)
    recorded = {x: Outcome("ok", 0.99, _knee_server(x).point) for x in (1, 2, 4, 8, 16)}
    rp = replay(s, lambda load: recorded.get(load))
    assert rp.next_load == 17 and [p.load for p in rp.probes] == [1, 2, 4, 8, 16]
    recorded[17] = Outcome("ok", 0.99, _knee_server(17).point)
    rp = replay(s, lambda load: recorded.get(load))
    assert rp.next_load is None and answer(s, rp.probes).status == "at_max"


def test_stop_when_saturated_skips_only_the_points_above_the_first_saturated_one() -> None:
    measured = SWEEP[:4]  # c1..c8 measured, c8 saturated against c4
    assert skip_reason(4, measured, "c") is None and skip_reason(8, measured, "c") is None
    why = skip_reason(16, measured, "c")
    assert why == ("not measured (load.stop_when_saturated): above c8, saturated past c4: load +100%, output tok/s "
                   "+4% (< 25% of the load's growth), TTFT p50 +380% (>= +50%), in flight +100% (>= +10%)")
    assert skip_reason(16, SWEEP[:3], "c") is None  # nothing saturated yet: measure it


def test_the_option_is_a_strict_boolean_of_load() -> None:
    spec = """
version: 1
name: s
model: {path: sim://x, engine: sim}
variants: [{name: base, baseline: true}]
workloads: [{name: w, input_tokens: 8, output_tokens: 4, num_requests: 4}]
load: {concurrency: [1, 2], stop_when_saturated: %s}
"""
    assert parse_spec_text(spec % "true").load.stop_when_saturated is True
    assert parse_spec_text(spec % "false").load.stop_when_saturated is False
    with pytest.raises(SpecError, match="load.stop_when_saturated"):
        parse_spec_text(spec % '"yes"')
