"""A valid results root written by the store's own writer: what the results-root fuzz target, the bad results
corpus (tests/data/bad_results) and tests/unit/dataset/test_reading.py mutate."""

from __future__ import annotations

from pathlib import Path

from cluster.analysis.metrics import summarize_run
from cluster.kernel.records import RequestRecord
from cluster.dataset.store import DatasetStore
from cluster.loadgen.sink import request_batches
from cluster.plan.runs import make_plan
from cluster.kernel.runs import RunPlan
from cluster.config.loader import parse_spec_text
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: exp1
model: {path: sim://m, engine: sim, tp: 1}
variants:
  - name: base
    baseline: true
  - name: other
workloads:
  - {name: w1, input_tokens: 16, output_tokens: 8, num_requests: 4}
load: {concurrency: [1]}
"""


def write_dataset(root: Path, name: str = "exp1", n_requests: int = 50) -> tuple[DatasetStore, list[RunPlan]]:
    """A valid dataset written by the store's own writer: SPEC's two runs under `name` (their rows differ)."""
    spec = parse_spec_text(SPEC.replace("name: exp1", f"name: {name}"))
    plans = make_plan(spec)
    store = DatasetStore(str(root), name)
    for k, p in enumerate(plans):
        recs = [RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=i + k, prompt_tokens_sent=16,
                              max_tokens=8, chunk_arrival_ns=[10 + i, 20 + i], chunk_tokens=[1, 2],
                              completion_tokens=3, category="c" if i % 2 else None) for i in range(n_requests)]
        reqs, chunks = request_batches(recs)
        store.write_run(p, RunRow(status="ok", duration_s=1.0 + k, metrics=summarize_run(reqs, chunks, 1.0)),
                        reqs, chunks)
    store.write_experiment_meta({"spec": spec.model_dump(mode="json")})  # what a run stores: compare re-validates it
    return store, plans
