"""Capacity at an SLO: which load to probe next, and the answer, as pure functions of the probes so far."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Literal, Optional, Sequence

from cluster.config.load import SearchSpec
from cluster.plan.saturation import SweepPoint, first_saturated


@dataclass(frozen=True)
class CapacitySearch:
    """Find the highest load in [min_load, max_load] whose SLO attainment stays at or above `target`, to within
    `resolution` (load units; concurrency is searched over integers, so its resolution is at least 1)."""

    target: float
    min_load: float
    max_load: float
    resolution: float
    integer: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.target <= 1:
            raise ValueError(f"target {self.target} must be an attainment fraction in (0, 1]")
        if not 0 < self.min_load < self.max_load:
            raise ValueError(f"need 0 < min_load < max_load, got {self.min_load} and {self.max_load}")
        if not self.resolution > 0:
            raise ValueError(f"resolution {self.resolution} must be positive")


def from_spec(spec: SearchSpec) -> CapacitySearch:
    """The search a spec's `load.search` asks for."""
    return CapacitySearch(spec.slo_attainment, spec.min, spec.max, spec.step(), spec.over == "concurrency")


@dataclass(frozen=True)
class Outcome:
    """A recorded run at a probe's load: its status and the SLO attainment it recorded."""

    status: str
    attainment: Optional[float]
    point: Optional[SweepPoint] = None
    """The run's throughput, TTFT and in-flight figures (plan/saturation.py); None when not known."""


@dataclass(frozen=True)
class Replay:
    """Where a search stands given the runs recorded so far."""

    probes: tuple["Probe", ...]
    """The probes the search took, in order, each answered by an ok run."""
    next_load: Optional[float]
    """The next load to measure (None: settled, or stopped)."""
    stopped: Optional[str] = None
    """Why the search cannot go on (a probe's run was not ok): its answer is then incomplete."""


def replay(search: CapacitySearch, recorded: Callable[[float], Optional[Outcome]],
           retry_failed: bool = True) -> Replay:
    """Walk the search over the recorded runs: each probe it asks for is answered by the run at that load, until
    one is missing (`next_load`), the answer is settled, or a probe's run is not ok. A `failed` run (the server or
    client broke) is measured again when `retry_failed`, as every failed run is on resubmission; an `invalid` one
    (its numbers cannot be vouched for) stops the search, since the next probe would depend on it."""
    probes: list[Probe] = []
    while True:
        load = next_probe(search, probes)
        if load is None:
            return Replay(tuple(probes), None)
        got = recorded(load)
        if got is None or (got.status == "failed" and retry_failed):
            return Replay(tuple(probes), load)
        if got.status != "ok" or got.attainment is None:
            why = "no SLO attainment" if got.status == "ok" else got.status
            return Replay(tuple(probes), None, f"the probe at {load:g} was {why}")
        probes.append(Probe(load, got.attainment, got.point))


def drive(search: CapacitySearch, recorded: Callable[[float], Optional[Outcome]],
          measure: Callable[[float], None]) -> Replay:
    """Measure what the search still needs: `measure(load)` records a run that `recorded` then answers for. A load
    measured here that still has no usable run (it failed again) ends the search: resubmission retries it."""
    tried: set[float] = set()
    while True:
        rp = replay(search, recorded)
        if rp.next_load is None or rp.next_load in tried:
            return rp
        tried.add(rp.next_load)
        measure(rp.next_load)


def clamped(search: CapacitySearch, cap: Optional[float]) -> CapacitySearch:
    """The search below a server's own concurrency cap: past it the server only queues (a probe there is flagged
    invalid), so the answer is then 'at least the cap' (status at_max with max_load = cap)."""
    if cap is None or not search.integer or cap >= search.max_load or cap <= search.min_load:
        return search
    return replace(search, max_load=float(cap))


@dataclass(frozen=True)
class Probe:
    """One measured probe: its load and the SLO attainment its run recorded."""

    load: float
    attainment: float
    point: Optional[SweepPoint] = None
    """Its run's throughput, TTFT and in-flight figures, for the saturation rule (None: not judged)."""


@dataclass(frozen=True)
class CapacityAnswer:
    """The highest load seen to meet the SLO below the lowest one seen to miss it. status: 'found' (bracketed to
    the resolution), 'below_min' (min_load already misses: capacity < min_load, value None), 'at_max' (max_load
    still meets it: capacity ≥ max_load), 'searching' (not finished)."""

    value: Optional[float]
    lowest_miss: Optional[float]
    status: Literal["found", "below_min", "at_max", "searching"]
    saturated: Optional[str] = None
    """Why the search stopped at an over-saturated probe (at_saturation): then at_max means 'at least value, and
    the server was saturated there'."""


def at_saturation(search: CapacitySearch, probes: Sequence[Probe]) -> tuple[CapacitySearch, Optional[str]]:
    """The search ending one step past the lowest probe over-saturated against the probe under it
    (plan/saturation.py), with the reason: past the knee throughput no longer grows and requests only queue, so a
    search still bracketing does not double on (like `clamped` at a server's reported cap); the one step asks whether
    the SLO still holds just past the knee, so an SLO bound there is still found exactly. Unchanged when no probe is
    saturated."""
    got = first_saturated([p.point for p in probes if p.point is not None], "c" if search.integer else "r")
    if got is None:
        return search, None
    top = got[0] + _step(search)
    if not search.min_load < top < search.max_load:
        return search, None
    return replace(search, max_load=top), got[1]


def _bracket(probes: Sequence[Probe], target: float) -> tuple[Optional[float], Optional[float]]:
    """(highest meeting load below the lowest missing one, lowest missing load): a noisy, non-monotone probe
    above a miss never raises the answer."""
    misses = [p.load for p in probes if p.attainment < target]
    lowest_miss = min(misses) if misses else None
    meets = [p.load for p in probes if p.attainment >= target and (lowest_miss is None or p.load < lowest_miss)]
    return (max(meets) if meets else None), lowest_miss


def answer(search: CapacitySearch, probes: Sequence[Probe]) -> CapacityAnswer:
    """The answer the probes so far support; while none has missed the SLO, the search ends at a saturated probe
    (at_saturation): 'at_max' at it, with the reason."""
    meet, miss = _bracket(probes, search.target)
    saturated = None
    if miss is None:
        search, saturated = at_saturation(search, probes)
    if miss is not None and miss <= search.min_load:
        return CapacityAnswer(None, miss, "below_min")
    if meet is not None and meet >= search.max_load:
        return CapacityAnswer(meet, None, "at_max", saturated)
    if meet is not None and miss is not None and miss - meet <= _step(search):
        return CapacityAnswer(meet, miss, "found")
    return CapacityAnswer(meet, miss, "searching")


def _step(search: CapacitySearch) -> float:
    return max(search.resolution, 1.0) if search.integer else search.resolution


def next_probe(search: CapacitySearch, probes: Sequence[Probe]) -> Optional[float]:
    """The load to measure next, or None when the answer is settled: min_load first; while every probe meets the
    SLO, double the highest one (capped at max_load, or one step past a saturated probe: at_saturation) to bracket;
    then bisect between the highest meeting load and
    the lowest missing one until they are within the resolution. Each probe is a normal recorded run."""
    if not probes:
        return search.min_load
    if answer(search, probes).status != "searching":
        return None
    meet, miss = _bracket(probes, search.target)
    assert meet is not None  # a miss at min_load is 'below_min'; min_load is probed first
    if miss is None:
        search = at_saturation(search, probes)[0]
        nxt = min(search.max_load, meet * 2)
    else:
        nxt = (meet + miss) / 2
    if search.integer:
        nxt = float(math.floor(nxt)) if miss is not None else float(math.ceil(nxt))
        if miss is not None and nxt <= meet:
            nxt = meet + 1
    done = {p.load for p in probes}
    return None if nxt in done else nxt
