"""No behaviour change on the write side: each stored run's figures, recomputed from its stored requests and chunks,
equal the ones base a8528d0 wrote into its `runs` row (every `m_` metric, GPU ones included, and the steady stretch).

The results commands (test_golden.py) read the stored `m_` columns; this test holds the code that computes them
(cluster/analysis/metrics.py summarize_run, gpu_metrics.py summarize_gpu, steady_state.py), which issue 36's metric declarations and the sink's
streaming summary replace. If summarize_run or steady_state is replaced, compute the figures here the new way
(`_figures`, the one place that calls them) from the same records: they must still be equal. The comparison is
exact; a failure says how far apart the two numbers are (a last-bit difference from another summation order reads
as a relative difference near 1e-16).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.golden.golden_outputs import DATA, EXPERIMENT

RUNS = sorted((DATA / EXPERIMENT / "runs").rglob("*.parquet"))
STEADY = ("start_ns", "end_ns", "share", "output_tps", "tpot_ms", "accept_length", "requests", "rule")


def _figures(requests: pa.Table, chunks: pa.Table, gpu: pa.Table, row: dict[str, Any]) -> dict[str, Any]:
    """A run row's `m_` and `steady_` figures computed from its records, as the driver computed them at a8528d0
    (cluster/analysis/run_row.py build_run_row: no SLO in this experiment, a closed loop's offered concurrency)."""
    from cluster.analysis.gpu_metrics import summarize_gpu
    from cluster.analysis.metrics import summarize_run
    from cluster.analysis.steady_state import steady_state

    out: dict[str, Any] = {f"m_{k}": v for k, v in summarize_run(requests, chunks, row["duration_s"], None).items()}
    out.update({f"m_{k}": v for k, v in summarize_gpu(gpu, row["duration_s"], out["m_output_tok_s"],
                                                       requests).items()})
    assert row["load_kind"] == "concurrency"
    offered = min(int(row["load_value"]), requests.num_rows)
    ss = steady_state(requests, row["load_kind"], offered, row["duration_s"])
    out.update({f"steady_{k}": getattr(ss, k) if ss is not None else None for k in STEADY})
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b) and (a is None) == (b is None)


def _gap(a: Any, b: Any) -> str:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
        return f" (relative difference {abs(a - b) / abs(b):.1e})"
    return ""


@pytest.mark.parametrize("path", RUNS, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_a_runs_figures_are_the_stored_ones(path: Path) -> None:
    row = pq.read_table(path).to_pylist()[0]
    requests = pq.read_table(DATA / EXPERIMENT / "requests" / path.parent.name / path.name)
    chunks = pq.read_table(DATA / EXPERIMENT / "chunks" / path.parent.name / path.name)
    gpu = pq.read_table(DATA / EXPERIMENT / "gpu_metrics" / path.parent.name / path.name)
    got = _figures(requests, chunks, gpu, row)
    # a metric declared after the golden dataset was written reads as null from it (no gateway fronts this
    # experiment, so m_worker_imbalance must be null); any other figure missing from the row is a change
    row = {**{k: None for k in ("m_worker_imbalance",) if k not in row}, **row}
    assert set(got) <= set(row), sorted(set(got) - set(row))
    changed = [f"{k}: stored {row[k]!r}, now {got[k]!r}{_gap(got[k], row[k])}"
                                    for k in sorted(got) if not _same(got[k], row[k])]
    assert not changed, "\n".join(changed)


def test_every_stored_run_is_checked() -> None:
    assert len(RUNS) == 8  # 2 variants x 2 concurrencies x 2 repeats
