"""The saturation rule as the driver carries it out: `load.stop_when_saturated` asks plan/saturation.py before each
run whether it is skipped, and the capacity search's probes carry their runs' figures, both read from the runs the
store has recorded (this submission's and an earlier one's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from cluster.dataset.store import DatasetStore
from cluster.kernel.load_shapes import load_shape
from cluster.kernel.runs import RunPlan
from cluster.plan.saturation import SweepPoint, point_of, skip_reason

FIGURES = ("m_output_tok_s", "m_ttft_ms_p50", "m_concurrency_mean")
COLUMNS = ("run_key", "variant", "workload", "load_kind", "load_value", "status") + FIGURES


@dataclass(frozen=True)
class RecordedPoint:
    """One recorded ok run's figures, with what identifies its sweep."""

    run_key: str
    variant: str
    workload: str
    load_kind: str
    point: SweepPoint


def recorded_points(store: DatasetStore) -> list[RecordedPoint]:
    """The figures of every ok run the store has committed."""
    out = []
    for r in store.read_table("runs", columns=COLUMNS).to_pylist():
        if r["status"] == "ok":
            point = point_of(float(r["load_value"]), *([r[c]] for c in FIGURES))
            out.append(RecordedPoint(r["run_key"], r["variant"], r["workload"], r["load_kind"], point))
    return out


def prefix(load_kind: str) -> str:
    """How a load of this kind is named in a reason (compare's short labels: c8, r2.5)."""
    return load_shape(load_kind).short_prefix()


class SaturationStop:
    """Asks the saturation rule for each planned point; a skipped point is recorded by the caller with the reason."""

    def __init__(self, store: DatasetStore, log: Callable[[str], None]) -> None:
        self.store = store
        self.log = log

    def skip(self, p: RunPlan) -> Optional[str]:
        """Why `p` is not measured (a lower point of its variant, workload and load kind is saturated), or None."""
        mine = [r.point for r in recorded_points(self.store) if r.variant == p.variant.name
                and r.workload == p.workload.name and r.load_kind == p.load.kind]
        loads = sorted({x.load for x in mine})
        points = [point_of(x, *([getattr(m, f) for m in mine if m.load == x]
                                for f in ("output_tps", "ttft_ms_p50", "in_flight_mean"))) for x in loads]
        why = skip_reason(float(p.load.value), points, prefix(p.load.kind))
        if why is not None:
            self.log(f"[{p.variant.name}] skip {p.workload.name} {p.load.label} repeat {p.repeat}: {why}")
        return why
