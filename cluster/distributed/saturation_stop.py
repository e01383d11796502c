"""`load.stop_when_saturated` as the driver carries it out: before each run, whether plan/saturation.py's rule skips
it, judged on the variant's runs recorded so far (this submission's and an earlier one's)."""

from __future__ import annotations

from typing import Callable, Optional

from cluster.dataset.store import DatasetStore
from cluster.kernel.runs import RunPlan
from cluster.plan.saturation import point_of, skip_reason

FIGURES = ("m_output_tok_s", "m_ttft_ms_p50", "m_concurrency_mean")
COLUMNS = ("variant", "workload", "load_kind", "load_value", "status") + FIGURES


class SaturationStop:
    """Asks the saturation rule for each planned point; a skipped point is recorded by the caller with the reason."""

    def __init__(self, store: DatasetStore, log: Callable[[str], None]) -> None:
        self.store = store
        self.log = log

    def skip(self, p: RunPlan) -> Optional[str]:
        """Why `p` is not measured (a lower point of its variant, workload and load kind is saturated), or None."""
        runs = self.store.read_table("runs", columns=COLUMNS).to_pylist()
        mine = [r for r in runs if r["status"] == "ok" and r["variant"] == p.variant.name
                and r["workload"] == p.workload.name and r["load_kind"] == p.load.kind]
        loads = sorted({float(r["load_value"]) for r in mine})
        points = [point_of(x, *([r[c] for r in mine if float(r["load_value"]) == x] for c in FIGURES))
                  for x in loads]
        why = skip_reason(float(p.load.value), points, "c" if p.load.kind == "concurrency" else "r")
        if why is not None:
            self.log(f"[{p.variant.name}] skip {p.workload.name} {p.load.label} repeat {p.repeat}: {why}")
        return why
