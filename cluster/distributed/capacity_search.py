"""Capacity searches as the driver carries them out: where each search stands from the recorded runs (resume), and
each probe plan/capacity.py decides measured as a normal recorded run on the segment's server."""

from __future__ import annotations

import itertools
from typing import Callable, Iterator, Optional

from cluster.config.experiment import ExperimentSpec
from cluster.config.workload import WorkloadSpec
from cluster.kernel.run_facts import ServerFacts
from cluster.analysis.run_row import reported_cap
from cluster.dataset.store import DatasetStore
from cluster.distributed.run_records import Death, ExperimentResult
from cluster.distributed.saturation_stop import recorded_points
from cluster.kernel.runs import ResolvedVariant, RunPlan
from cluster.plan.capacity import Outcome, answer, clamped, drive, from_spec, replay
from cluster.plan.runs import plan_run, search_point


class CapacitySearches:
    """Every capacity search of one experiment: the recorded outcomes they resume from, the probes measured now."""

    def __init__(self, spec: ExperimentSpec, store: DatasetStore, result: ExperimentResult,
                 log: Callable[[str], None], first_probe_index: int) -> None:
        self.spec = spec
        self.result = result
        self.log = log
        self.store = store
        self.recorded_caps: dict[str, float] = {}
        """variant → the lowest concurrency cap its recorded runs' servers reported (a resumed search's end)."""
        self.recorded = self._recorded_outcomes(store)
        self._probe_index: Iterator[int] = itertools.count(first_probe_index)

    def _recorded_outcomes(self, store: DatasetStore) -> dict[str, Outcome]:
        """run key → (status, SLO attainment) of every committed run: where a resumed capacity search stands."""
        if self.spec.load.search is None:
            return {}
        t = store.read_table("runs", columns=["run_key", "variant", "status", "m_slo_attainment",
                                              "provenance_json"]).to_pandas()
        if t.empty:
            return {}
        for v, g in t.groupby("variant"):
            cap = reported_cap(g["provenance_json"])
            if cap is not None:
                self.recorded_caps[str(v)] = cap
        att = t["m_slo_attainment"].astype(object).where(t["m_slo_attainment"].notna(), None)
        points = {r.run_key: r.point for r in recorded_points(store)}  # for the saturation rule
        return {k: Outcome(st, a, points.get(k)) for k, st, a in zip(t["run_key"], t["status"], att)}

    @staticmethod
    def _cells(planned: list[RunPlan]) -> list[tuple[WorkloadSpec, int]]:
        """(workload, repeat) of each search a segment carries (one per planned first probe)."""
        cells: dict[tuple[str, int], tuple[WorkloadSpec, int]] = {}
        for p in planned:
            cells.setdefault((p.workload.name, p.repeat), (p.workload, p.repeat))
        return list(cells.values())

    def _outcome_of(self, v: ResolvedVariant, w: WorkloadSpec, r: int) -> Callable[[float], Optional[Outcome]]:
        def get(load: float) -> Optional[Outcome]:
            return self.recorded.get(plan_run(self.spec, v, w, search_point(self.spec.load, load), r, 0).run_key)

        return get

    def pending(self, v: ResolvedVariant, planned: list[RunPlan]) -> bool:
        """Whether a search of this segment still has a probe to measure."""
        s = self.spec.load.search
        if s is None:
            return False
        search = clamped(from_spec(s), self.recorded_caps.get(v.name))  # the cap its server reported before
        return any(replay(search, self._outcome_of(v, w, r)).next_load is not None for w, r in self._cells(planned))

    def run(self, variant: ResolvedVariant, planned: list[RunPlan], server: ServerFacts,
            measure: Callable[[RunPlan], Optional[Death]]) -> Optional[Death]:
        """Every capacity search of this segment, on its server: each probe a normal recorded run (measure), until
        the searches end or the server dies."""
        from cluster.analysis.deployment_cap import deployment_cap
        from cluster.engines.registry import get_engine

        assert self.spec.load.search is not None
        cap = deployment_cap(get_engine(variant.engine), server)
        search = clamped(from_spec(self.spec.load.search), cap.value if cap else None)
        death: Optional[Death] = None
        for w, r in self._cells(planned):
            def probe(load: float, w: WorkloadSpec = w, r: int = r) -> None:
                nonlocal death
                if death is not None:
                    return
                p = plan_run(self.spec, variant, w, search_point(self.spec.load, load), r, next(self._probe_index))
                self.log(f"[{variant.name}] capacity search {w.name} repeat {r}: probe {p.load.label}")
                death = measure(p)
                point = next((r.point for r in recorded_points(self.store) if r.run_key == p.run_key), None)
                self.recorded[p.run_key] = Outcome(self.result.statuses.get(p.run_key, "failed"),
                                                   self.result.attainment.get(p.run_key), point)

            rp = drive(search, self._outcome_of(variant, w, r), probe)
            got = answer(search, rp.probes)
            self.log(f"[{variant.name}] capacity search {w.name} repeat {r}: {got.status}"
                     + (f" at {got.value:g}" if got.value is not None else "")
                     + (f" ({got.saturated})" if got.saturated else "")
                     + (f" ({rp.stopped})" if rp.stopped else "")
                     + (f" (probe {rp.next_load:g} not measured)" if rp.next_load is not None else ""))
            if death is not None:
                break
        return death
