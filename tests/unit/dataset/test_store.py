"""DatasetStore: round trip, resume keys, atomicity, schema_version everywhere, URI filesystems."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from cluster.analysis.metrics import summarize_run
from cluster.kernel.run_row import METRIC_NAMES
from cluster.plan.runs import make_plan
from cluster.kernel.runs import RECORD_SCHEMA_VERSION, RunPlan
from cluster.kernel.records import REQUESTS_SCHEMA, RequestRecord
from cluster.loadgen.sink import request_batches
from cluster.config.loader import parse_spec_text
from cluster.dataset.atomic import WriteError
from cluster.dataset.store import DatasetStore, StoreError, list_experiments
from cluster.kernel.run_row import RunRow

SPEC = """
version: 1
name: exp1
model: {path: sim://m, engine: sim, tp: 1}
variants:
  - name: base
    baseline: true
  - name: nextn
    speculative: {algorithm: NEXTN, num_steps: [1, 2]}
workloads:
  - {name: w1, input_tokens: 16, output_tokens: 8, num_requests: 4}
load: {concurrency: [1, 4]}
"""


@pytest.fixture
def plans() -> list[RunPlan]:
    return make_plan(parse_spec_text(SPEC))


def _batches(n: int = 3) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    recs = [RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=i, prompt_tokens_sent=16,
                          max_tokens=8, chunk_arrival_ns=[10 + i, 20 + i], chunk_tokens=[1, 2],
                          completion_tokens=3, spec_verify_ct=1) for i in range(n)]
    return request_batches(recs)


def _write(store: DatasetStore, plan: RunPlan, n: int = 3) -> dict[str, float | None]:
    reqs, chunks = _batches(n)
    m = summarize_run(reqs, chunks, 1.0)
    store.write_run(plan, RunRow(status="ok", duration_s=1.0, metrics=m), reqs, chunks)
    return m


def test_round_trip_and_layout(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    p = plans[0]
    _write(store, p)
    assert (tmp_path / "exp1" / "runs" / f"variant={p.variant.name}" / f"{p.run_key}.parquet").is_file()
    assert (tmp_path / "exp1" / "chunks" / f"variant={p.variant.name}" / f"{p.run_key}.parquet").is_file()
    runs = store.read_table("runs")
    assert runs.num_rows == 1
    row = runs.to_pylist()[0]
    assert row["run_key"] == p.run_key and row["variant"] == "base" and row["engine"] == "sim"
    assert row["load_kind"] == "concurrency" and row["load_value"] == 1.0 and row["is_baseline"] is True
    assert row["seed"] == p.seed and row["order_index"] == p.order_index
    assert row["m_output_tok_s"] == pytest.approx(9.0)
    assert row["m_accept_length"] == pytest.approx(2.0)
    assert row["m_slo_attainment"] is None
    assert json.loads(row["metrics_json"])["n_ok"] == 3
    assert all(f"m_{n}" in runs.schema.names for n in METRIC_NAMES)
    reqs = store.read_table("requests")
    assert reqs.schema.equals(REQUESTS_SCHEMA)
    assert reqs.column("actual_send_ns").to_pylist() == [0, 1, 2]
    assert store.read_table("chunks").column("tokens").to_pylist() == [1, 2] * 3


def test_schema_version_in_every_table(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    _write(store, plans[0])
    store.write_table_rows("correctness", plans[0], pa.table({"prompt_id": [0, 1], "passed": [True, False]}))
    for name in ("runs", "requests", "chunks", "correctness"):
        t = store.read_table(name)
        assert t.num_rows > 0
        assert set(t.column("schema_version").to_pylist()) == {RECORD_SCHEMA_VERSION}, name


def test_resume_keys_and_rewrite(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    assert store.committed_run_keys() == set()
    for p in plans[:3]:
        _write(store, p)
    assert store.committed_run_keys() == {p.run_key for p in plans[:3]}
    # a fresh store object over the same root sees the same index
    assert DatasetStore(str(tmp_path), "exp1").committed_run_keys() == {p.run_key for p in plans[:3]}
    _write(store, plans[0], n=5)  # rewrite replaces, never duplicates
    assert store.read_table("runs").num_rows == 3
    assert store.read_table("requests").num_rows == 5 + 3 + 3
    # a failed rewrite without records removes the earlier records of that key
    store.write_run(plans[0], RunRow(status="failed", failure_reason="server died"), None, None)
    assert store.read_table("requests").num_rows == 6
    runs = {r["run_key"]: r for r in store.read_table("runs").to_pylist()}
    assert runs[plans[0].run_key]["status"] == "failed"
    assert runs[plans[0].run_key]["failure_reason"] == "server died"


def test_resume_index_retries_failed_runs(tmp_path: Path, plans: list[RunPlan]) -> None:
    """One resume index: ok and invalid runs are finished; a failed run is committed (visible) but retried."""
    store = DatasetStore(str(tmp_path), "exp1")
    assert store.finished_run_keys() == set()
    _write(store, plans[0])
    store.write_run(plans[1], RunRow(status="invalid", invalid_reasons="client lag"))
    store.write_run(plans[2], RunRow(status="failed", failure_reason="server died"))
    assert store.finished_run_keys() == {plans[0].run_key, plans[1].run_key}
    assert store.committed_run_keys() == {p.run_key for p in plans[:3]}
    _write(store, plans[2])  # the retry succeeds
    assert store.finished_run_keys() == {p.run_key for p in plans[:3]}


def test_uncommitted_run_and_temp_files_are_ignored(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    _write(store, plans[0])
    p = plans[1]
    # a writer killed after its requests but before its runs row: the run is not complete, its rows are hidden
    reqs, chunks = _batches(2)
    store.write_table_rows("requests", p, reqs)
    # and one killed mid-write leaves a temp file with garbage in it
    d = tmp_path / "exp1" / "runs" / f"variant={p.variant.name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / f".{p.run_key}.parquet.deadbeef.tmp").write_bytes(b"PAR1 truncated")
    assert store.committed_run_keys() == {plans[0].run_key}
    assert store.read_table("runs").num_rows == 1
    assert store.read_table("requests").num_rows == 3


def test_failed_write_leaves_no_file(tmp_path: Path, plans: list[RunPlan], monkeypatch: pytest.MonkeyPatch) -> None:
    store = DatasetStore(str(tmp_path), "exp1")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(WriteError, match="disk full"):
        _write(store, plans[0])
    leftovers = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert leftovers == []
    assert store.committed_run_keys() == set()


def test_empty_tables_have_schema(tmp_path: Path) -> None:
    store = DatasetStore(str(tmp_path), "nothing")
    t = store.read_table("requests")
    assert t.num_rows == 0 and t.schema.equals(REQUESTS_SCHEMA)
    assert "m_ttft_ms_p50" in store.read_table("runs").schema.names


def test_experiment_meta_and_listing(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    store.write_experiment_meta({"spec": {"name": "exp1"}, "probe": {"mtp": True}})
    assert json.loads((tmp_path / "exp1" / "experiment.json").read_text())["probe"] == {"mtp": True}
    assert store.read_experiment_meta() == {"spec": {"name": "exp1"}, "probe": {"mtp": True}}
    (tmp_path / "not-an-experiment").mkdir()
    assert list_experiments(str(tmp_path)) == ["exp1"]


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", ".hidden", "v=1", "", "a\x00b", "a\nb", "a\u2028b", "x" * 129])
def test_unsafe_names_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(StoreError):
        DatasetStore(str(tmp_path), bad)


def test_bad_inputs_refused(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    with pytest.raises(TypeError, match="typo_field"):  # a runs row is typed: an unknown field never reaches a file
        store.write_run(plans[0], RunRow(status="ok", typo_field=1))  # type: ignore[call-arg]
    with pytest.raises(StoreError, match="missing"):
        store.write_table_rows("requests", plans[0], pa.table({"request_index": pa.array([1], pa.int32())}))
    with pytest.raises(StoreError):
        store.write_table_rows("../evil", plans[0], pa.table({"x": [1]}))


def test_extra_metrics_and_m_columns(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    store.write_run(plans[0], RunRow(status="ok", metrics={"output_tok_s": 12.5,
                                                           "accept_length_server_counters": 1.7}))
    row = store.read_table("runs").to_pylist()[0]
    assert row["m_output_tok_s"] == 12.5 and row["m_accept_length_server_counters"] == 1.7
    assert json.loads(row["metrics_json"])["output_tok_s"] == 12.5


def test_file_uri_root(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(f"file://{tmp_path}/ds", "exp1")
    _write(store, plans[2])
    assert store.committed_run_keys() == {plans[2].run_key}
    f = tmp_path / "ds" / "exp1" / "requests" / f"variant={plans[2].variant.name}" / f"{plans[2].run_key}.parquet"
    assert pq.read_table(f).num_rows == 3
    assert list_experiments(f"file://{tmp_path}/ds") == ["exp1"]


def test_object_store_path_mock(plans: list[RunPlan]) -> None:
    store = DatasetStore("mock:///bucket/prefix", "exp1")
    assert not isinstance(store.fs, pafs.LocalFileSystem)
    _write(store, plans[0])
    _write(store, plans[3])
    store.write_experiment_meta({"a": 1})
    assert store.committed_run_keys() == {plans[0].run_key, plans[3].run_key}
    assert store.read_table("requests").num_rows == 6
    assert store.read_experiment_meta() == {"a": 1}
    names = [i.path for i in store.fs.get_file_info(pafs.FileSelector("bucket", recursive=True)) if i.is_file]
    assert not any(n.endswith(".tmp") for n in names)
    assert f"bucket/prefix/exp1/runs/variant=nextn-1/{plans[3].run_key}.parquet" in names


def test_runs_row_of_a_workload_with_dataset_and_distribution_lengths(tmp_path: Path) -> None:
    # input_tokens 'dataset' has no single figure (NULL); a distribution records its mean; requests keep each
    # request's own max_tokens and category
    spec = parse_spec_text(SPEC.replace(
        "{name: w1, input_tokens: 16, output_tokens: 8, num_requests: 4}",
        "{name: w1, input_tokens: dataset, output_tokens: {dist: normal, mean: 24, std: 4, min: 8, max: 40}, "
        "num_requests: 4, prompts: {source: sharegpt, path: d.json}}"))
    store = DatasetStore(str(tmp_path), "exp1")
    recs = [RequestRecord(request_index=i, intended_send_ns=0, actual_send_ns=i, prompt_tokens_sent=0,
                          max_tokens=20 + i, chunk_arrival_ns=[10 + i, 20 + i], chunk_tokens=[1, 2],
                          completion_tokens=3, category="code" if i else "chat") for i in range(3)]
    reqs, chunks = request_batches(recs)
    plan = make_plan(spec)[0]
    store.write_run(plan, RunRow(status="ok", duration_s=1.0, metrics=summarize_run(reqs, chunks, 1.0)),
                    reqs, chunks)
    row = store.read_table("runs").to_pylist()[0]
    assert (row["input_tokens"], row["output_tokens"], row["max_tokens"]) == (None, 24, 24)
    got = store.read_table("requests").to_pydict()
    assert got["max_tokens"] == [20, 21, 22] and got["category"] == ["chat", "code", "code"]
