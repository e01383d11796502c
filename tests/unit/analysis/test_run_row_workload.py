"""The workload audit in the runs row: a collapsed run is invalid with its reason, its sent and planned figures are
stored, `results show` lists it, `compare` leaves it out; datasets written before the audit's columns still read."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from cluster.analysis.comparison import compare_with_ci
from cluster.cli import app
from cluster.kernel.records import RequestRecord
from cluster.kernel.window import MeasuredWindow
from cluster.analysis.run_row import build_run_row
from cluster.dataset.store import DatasetStore
from cluster.loadgen.prompt_sources import workload_selection
from cluster.loadgen.sink import request_batches
from cluster.plan.runs import make_plan
from cluster.kernel.runs import RunPlan
from cluster.config.loader import parse_spec_text
from cluster.config.experiment import ExperimentSpec
from cluster.analysis.results import Results
from tests.unit.analysis.test_run_row import SEGMENT, SERVER

SPEC = """
version: 1
name: audit
model: {{path: sim://rows, engine: sim}}
variants:
  - {{name: base, baseline: true}}
workloads:
  - {{name: chat, input_tokens: dataset, output_tokens: 4, num_requests: 40,
     prompts: {{source: sharegpt, path: {path}}}}}
load: {{concurrency: [2]}}
repeats: 3
max_client_lag_ms: 50
"""


def _setup(tmp_path: Path) -> tuple[ExperimentSpec, list[RunPlan], list[str]]:
    # the motivating dataset: 40 distinct rows in two categories, a compact JSON array (every row on line 1)
    rows = [{"category": "code" if i % 2 else "chat",
             "conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": f"answer {i}"}]}
            for i in range(40)]
    f = tmp_path / "d.json"
    f.write_text(json.dumps(rows))
    spec = parse_spec_text(SPEC.format(path=f))
    texts = [f"question {i}" for i in range(40)]
    return spec, make_plan(spec), texts


def _window(spec: ExperimentSpec, p: RunPlan, texts: list[str], collapsed: bool, tmp_path: Path) -> MeasuredWindow:
    from cluster.engines.base import Prompt
    from cluster.loadgen.selection import prompt_fingerprint

    recs = []
    for i in range(40):
        row = 0 if collapsed else i
        recs.append(RequestRecord(
            request_index=i, intended_send_ns=i * 1000, actual_send_ns=i * 1000 + 10, prompt_tokens_sent=0,
            max_tokens=4, chunk_arrival_ns=[i * 1000 + 500, i * 1000 + 900], chunk_tokens=[2, 2], prompt_tokens=3,
            completion_tokens=4, finish_reason="length", category="code" if row % 2 else "chat", source_row=row,
            prompt_fingerprint=prompt_fingerprint(Prompt(text=texts[row]))))
    reqs, chunks = request_batches(recs)
    return MeasuredWindow(requests=pa.Table.from_batches([reqs]), chunks=pa.Table.from_batches([chunks]),
                         window_start_unix_s=1.0, duration_s=2.0, lag_p50_ns=10, lag_p99_ns=10, counters_before={},
                         counters_after={}, warmup_ok=0, flushed=True, peak_buffered_rows=1,
                         selection=workload_selection(p.workload, 40, p.seed, tmp_path))


def test_a_collapsed_run_is_invalid_listed_by_results_show_and_left_out_of_compare(tmp_path: Path) -> None:
    spec, plans, texts = _setup(tmp_path)
    root = str(tmp_path / "results")
    store = DatasetStore(root, spec.name)
    rows = []
    for p in plans:  # repeat 1 is the collapsed one
        out = _window(spec, p, texts, collapsed=p.repeat == 1, tmp_path=tmp_path)
        row = build_run_row(p, out, SERVER, SEGMENT, spec, [], None)
        rows.append(row)
        store.write_run(p, row, out.requests, out.chunks)
    good, bad = rows[0], rows[1]
    assert good.status == "ok", good.invalid_reasons
    assert (good.distinct_prompts_sent, good.distinct_prompts_planned) == (40, 40)
    assert json.loads(good.category_shares_sent) == json.loads(good.category_shares_selection) == \
        {"chat": 0.5, "code": 0.5}
    assert good.input_tokens_sent_p50 is None  # sent as text without a tokenizer: lengths are the server's
    assert bad.status == "invalid"
    assert bad.invalid_reasons.startswith("workload not the one planned: sent 1 distinct prompts of 40 (first "
                                             "turns), fewer than the 40 planned from the sharegpt selection")
    assert "category 'chat' was 40 of 40" in bad.invalid_reasons
    assert (bad.distinct_prompts_sent, bad.distinct_prompts_planned) == (1, 40)
    assert json.loads(bad.category_shares_sent) == {"chat": 1.0}

    shown = CliRunner().invoke(app, ["results", "show", spec.name, "--root", root, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    listed = {r["repeat"]: r for r in json.loads(shown.output)}
    assert listed[1]["status"] == "invalid" and "sent 1 distinct prompts of 40" in listed[1]["reason"]
    assert listed[0]["status"] == listed[2]["status"] == "ok"

    df = compare_with_ci(Results.open(root, spec.name), n_boot=200)
    cell = df.iloc[0]
    assert (cell["n_runs"], cell["n_invalid"]) == (2, 1)  # averaged over the two good runs only
    assert any("repeat 1 invalid: workload not the one planned: sent 1 distinct prompts" in w
               for w in cell["warnings"])


def test_a_dataset_written_before_the_audit_columns_still_reads(tmp_path: Path) -> None:
    spec, plans, texts = _setup(tmp_path)
    root = str(tmp_path / "results")
    store = DatasetStore(root, spec.name)
    p = plans[0]
    out = _window(spec, p, texts, collapsed=False, tmp_path=tmp_path)
    store.write_run(p, build_run_row(p, out, SERVER, SEGMENT, spec, [], None), out.requests, out.chunks)
    new = ("source_row", "prompt_fingerprint", "distinct_prompts_sent", "distinct_prompts_planned",
           "category_shares_sent", "category_shares_selection")
    for table in ("runs", "requests"):  # rewrite both files as an older sglbench wrote them
        (path,) = store.table_files(table)
        old = pq.read_table(path)
        pq.write_table(old.drop_columns([c for c in old.column_names if c in new or c.startswith("input_tokens_s")]),
                       path)
    q = plans[1]
    out = _window(spec, q, texts, collapsed=False, tmp_path=tmp_path)
    store.write_run(q, build_run_row(q, out, SERVER, SEGMENT, spec, [], None), out.requests, out.chunks)
    runs = store.read_table("runs").to_pylist()
    assert sorted((r["repeat"], r["distinct_prompts_sent"]) for r in runs) == [(0, None), (1, 40)]
    reqs = store.read_table("requests")
    assert reqs.num_rows == 80 and reqs.column("prompt_fingerprint").null_count == 40
    assert store.finished_run_keys() == {p.run_key, q.run_key}  # the resume index still skips the older run
    shown = CliRunner().invoke(app, ["results", "show", spec.name, "--root", root, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    assert [r["status"] for r in json.loads(shown.output)] == ["ok", "ok"]
