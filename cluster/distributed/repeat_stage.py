"""Repeats until sure as the driver carries them out: after a segment's planned runs, more repeats of each of its
points on the same server start while plan/repeats.py's rule says go on; where each point stands is read from the
recorded runs first (resume), and every point's final decision goes into the experiment's facts."""

from __future__ import annotations

import itertools
import math
from typing import Callable, Iterator, Optional

from cluster.config.experiment import ExperimentSpec
from cluster.config.repeats import UNTIL_METRIC_COLUMNS, RepeatsUntil
from cluster.config.workload import WorkloadSpec
from cluster.dataset.reading import FINISHED_STATUSES
from cluster.dataset.store import DatasetStore
from cluster.distributed.run_records import Death, ExperimentResult
from cluster.kernel.runs import LoadPoint, ResolvedVariant, RunPlan
from cluster.plan.repeats import PointRepeats, RepeatDecision, decide
from cluster.plan.runs import plan_run

Point = tuple[WorkloadSpec, LoadPoint]


def _points(planned: list[RunPlan]) -> list[Point]:
    """A segment's (workload, load point) pairs, in planned order."""
    seen: dict[tuple[str, str], Point] = {}
    for p in planned:
        seen.setdefault((p.workload.name, p.load.label), (p.workload, p.load))
    return list(seen.values())


class RepeatsUntilSure:
    """One experiment's repeats until sure: the recorded (status, value) of every run, and the repeats measured now."""

    def __init__(self, spec: ExperimentSpec, rule: RepeatsUntil, store: DatasetStore, result: ExperimentResult,
                 log: Callable[[str], None], first_order_index: int) -> None:
        self.spec = spec
        self.rule = rule
        self.store = store
        self.result = result
        self.log = log
        self.column = UNTIL_METRIC_COLUMNS[rule.until.metric]
        self.recorded: dict[str, tuple[str, Optional[float]]] = self._recorded(store)
        """run key → (status, the rule's metric) of every committed run (read again after each repeat)."""
        self.tried: set[str] = set()
        """Run keys measured in this driver run (a failed one is not measured again until a resubmission)."""
        self._order: Iterator[int] = itertools.count(first_order_index)

    def _recorded(self, store: DatasetStore) -> dict[str, tuple[str, Optional[float]]]:
        t = store.read_table("runs", columns=["run_key", "status", self.column]).to_pandas()
        out: dict[str, tuple[str, Optional[float]]] = {}
        for key, status, value in zip(t["run_key"], t["status"], t[self.column]) if not t.empty else ():
            v = float(value) if value is not None and math.isfinite(float(value)) else None
            out[str(key)] = (str(status), v)
        return out

    def _key(self, v: ResolvedVariant, w: WorkloadSpec, lp: LoadPoint, r: int) -> str:
        return plan_run(self.spec, v, w, lp, r, 0).run_key

    def decision(self, v: ResolvedVariant, w: WorkloadSpec, lp: LoadPoint) -> RepeatDecision:
        """The rule on this point's repeats so far: ok values, and repeats finished or measured now."""
        values: list[float] = []
        done = 0
        for r in range(self.rule.max):
            key = self._key(v, w, lp, r)
            status, value = self.recorded.get(key, ("", None))
            if status in FINISHED_STATUSES or key in self.tried:
                done += 1
                if status == "ok" and value is not None:
                    values.append(value)
        return decide(values, done, self.rule)

    def _next_repeat(self, v: ResolvedVariant, w: WorkloadSpec, lp: LoadPoint) -> Optional[int]:
        for r in range(self.rule.max):
            key = self._key(v, w, lp, r)
            if self.recorded.get(key, ("", None))[0] not in FINISHED_STATUSES and key not in self.tried:
                return r
        return None

    def pending(self, v: ResolvedVariant, planned: list[RunPlan]) -> bool:
        """Whether a point of this segment needs another repeat (beyond its planned runs still to do). A point
        without one ok repeat recorded is not: its variant could not be measured (a failed gate makes every run
        invalid), and a resubmission would start its server again only to find that again."""
        return any(not d.stop and d.ok_values > 0 for d in (self.decision(v, w, lp) for w, lp in _points(planned)))

    def run(self, variant: ResolvedVariant, planned: list[RunPlan],
            measure: Callable[[RunPlan], Optional[Death]]) -> Optional[Death]:
        """More repeats of the segment's points, one per point in turn while its rule says go on, each a normal
        recorded run on this server (measure); until every point stops or the server dies."""
        for p in planned:  # the planned runs measured just before count as measured now
            if self.result.statuses.get(p.run_key, "skipped") != "skipped":
                self.tried.add(p.run_key)
        self.recorded = self._recorded(self.store)
        points = _points(planned)
        while True:
            measured = False
            for w, lp in points:
                d = self.decision(variant, w, lp)
                r = None if d.stop else self._next_repeat(variant, w, lp)
                if r is None:
                    continue
                p = plan_run(self.spec, variant, w, lp, r, next(self._order))
                self.log(f"[{variant.name}] {w.name} {lp.label}: repeat {r + 1} of at most {self.rule.max} "
                         f"({d.describe(self.rule.until.metric)})")
                death = measure(p)
                self.tried.add(p.run_key)
                self.recorded = self._recorded(self.store)  # its committed row's value
                measured = True
                if death is not None:
                    return death
            if not measured:
                break
        for w, lp in points:
            self.log(f"[{variant.name}] {w.name} {lp.label}: repeats until sure: "
                     f"{self.decision(variant, w, lp).describe(self.rule.until.metric)}")
        return None

    def facts(self, variants: list[ResolvedVariant], plans: list[RunPlan]) -> list[PointRepeats]:
        """Every planned point's decision as it stands (the experiment's facts: stop reason, repeats done,
        half-width reached)."""
        out = []
        for v in variants:
            for w, lp in _points([p for p in plans if p.variant.name == v.name]):
                d = self.decision(v, w, lp)
                out.append(PointRepeats(v.name, w.name, lp.label, self.rule.until.metric, d.stop, d.reason,
                                        d.repeats_done, d.ok_values, d.half_width_pct, d.target_pct, self.rule.min,
                                        self.rule.max))
        return out
