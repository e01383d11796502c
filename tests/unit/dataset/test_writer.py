"""RunWriter and the one commit protocol under a full disk: a clean error naming the path, nothing partial where
plain readers (pandas, DuckDB) look, and a second attempt after space is freed commits."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.dataset.atomic import WriteError
from cluster.kernel.records import RequestRecord
from cluster.loadgen.sink import request_batches
from cluster.dataset.store import DatasetStore
from cluster.dataset.writer import RunWriter
from cluster.errors import EnvironmentFault
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
  - name: nextn
    speculative: {algorithm: NEXTN, num_steps: 1}
workloads:
  - {name: w1, input_tokens: 16, output_tokens: 8, num_requests: 4}
load: {concurrency: [1, 4]}
"""
ENOSPC = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def plans() -> list[RunPlan]:
    return make_plan(parse_spec_text(SPEC))


def _batches(n: int, first: int = 0) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    recs = [RequestRecord(request_index=first + i, intended_send_ns=0, actual_send_ns=i, prompt_tokens_sent=16,
                          max_tokens=8, chunk_arrival_ns=[10 + i, 20 + i], chunk_tokens=[1, 2],
                          completion_tokens=3) for i in range(n)]
    return request_batches(recs)


def _spooled_run(store: DatasetStore, plan: RunPlan, batches: int = 3, per_batch: int = 4) -> RunWriter:
    w = RunWriter(store, plan)
    for b in range(batches):
        reqs, chunks = _batches(per_batch, b * per_batch)
        w.write("requests", reqs)
        w.write("chunks", chunks)
    return w


def _commit_ok(store: DatasetStore, plan: RunPlan, batches: int = 3) -> None:
    w = _spooled_run(store, plan, batches)
    w.commit(RunRow(status="ok", duration_s=1.0), {"server_metrics": pa.table({"t_s": [0.0, 1.0]})})


def _hive_leftovers(exp: Path) -> list[Path]:
    """Files in the hive tree (every table directory) that are not a run's complete data file."""
    out = []
    for table in (d for d in exp.iterdir() if d.is_dir() and not d.name.startswith("_")):
        for f in table.rglob("*"):
            if f.is_file() and (f.name.startswith(".") or not f.name.endswith(".parquet")):
                out.append(f)
    return out


def _plain_counts(exp: Path) -> tuple[int, int, set[str]]:
    """Request rows as the README's plain pandas and DuckDB one-liners count them, and the runs pandas sees."""
    pandas_n = len(pd.read_parquet(exp / "requests"))
    duck_n = duckdb.sql(f"select count(*) from read_parquet('{exp}/requests/**/*.parquet', "
                        "hive_partitioning=true)").fetchall()[0][0]
    runs = set(pd.read_parquet(exp / "runs")["run_key"])
    return pandas_n, int(duck_n), runs


def _full_on_fsync_of(monkeypatch: pytest.MonkeyPatch, marker: str) -> None:
    """fsync of any file whose path contains `marker` fails as a full disk does (delayed allocation)."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if marker in os.readlink(f"/proc/self/fd/{fd}"):
            raise ENOSPC
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_disk_full_while_spooling(tmp_path: Path, plans: list[RunPlan], monkeypatch: pytest.MonkeyPatch) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    exp = tmp_path / "exp1"
    _commit_ok(store, plans[0])
    real = pq.ParquetWriter.write_table
    calls = {"n": 0}

    def write_table(self: pq.ParquetWriter, table: pa.Table, *a: Any, **k: Any) -> None:
        calls["n"] += 1
        if calls["n"] > 3:  # the disk fills up during the second run's third batch
            raise ENOSPC
        real(self, table, *a, **k)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)
    with pytest.raises(EnvironmentFault) as ei:
        _spooled_run(store, plans[1])
    err = ei.value
    assert isinstance(err, WriteError) and err.os_errno == errno.ENOSPC
    assert err.path is not None and err.path in str(err) and str(exp) in err.path
    assert "No space left on device" in str(err)
    assert _hive_leftovers(exp) == []
    assert _plain_counts(exp) == (12, 12, {plans[0].run_key})
    assert not any((exp / "_staging").iterdir()), "the aborted run's spool files are removed"
    monkeypatch.undo()  # space freed: the same run commits
    _commit_ok(store, plans[1])
    assert _plain_counts(exp) == (24, 24, {plans[0].run_key, plans[1].run_key})
    assert store.read_table("requests").num_rows == 24


def test_disk_full_at_the_runs_row(tmp_path: Path, plans: list[RunPlan], monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs row is the last file written: a full disk there must not leave the run's requests readable."""
    store = DatasetStore(str(tmp_path), "exp1")
    exp = tmp_path / "exp1"
    _commit_ok(store, plans[0])
    w = _spooled_run(store, plans[1])
    _full_on_fsync_of(monkeypatch, "runs")
    with pytest.raises(WriteError, match="No space left on device") as ei:
        w.commit(RunRow(status="ok", duration_s=1.0), {"server_metrics": pa.table({"t_s": [0.0]})})
    assert ei.value.path is not None and "runs" in ei.value.path and ei.value.path in str(ei.value)
    assert _hive_leftovers(exp) == []
    assert _plain_counts(exp) == (12, 12, {plans[0].run_key})
    assert len(pd.read_parquet(exp / "server_metrics")) == 2, "only the committed run's server metrics"
    assert store.committed_run_keys() == {plans[0].run_key}
    monkeypatch.undo()
    _commit_ok(store, plans[1])
    assert _plain_counts(exp) == (24, 24, {plans[0].run_key, plans[1].run_key})


def test_disk_full_recording_a_failed_run(tmp_path: Path, plans: list[RunPlan],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's _record_failed/_record_invalid path (write_run without tables) under a full disk."""
    store = DatasetStore(str(tmp_path), "exp1")
    _commit_ok(store, plans[0])
    _full_on_fsync_of(monkeypatch, "runs")
    with pytest.raises(WriteError, match="disk is full"):
        store.write_run(plans[1], RunRow(status="failed", failure_reason="server died"))
    assert _hive_leftovers(tmp_path / "exp1") == []
    assert store.committed_run_keys() == {plans[0].run_key}
    monkeypatch.undo()
    store.write_run(plans[1], RunRow(status="failed", failure_reason="server died"))
    assert store.committed_run_keys() == {plans[0].run_key, plans[1].run_key}


def test_commit_replaces_every_table_of_an_earlier_attempt(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    _commit_ok(store, plans[0])  # requests, chunks, server_metrics
    w = RunWriter(store, plans[0])  # retried: this attempt got no rows and no server metrics
    w.commit(RunRow(status="failed", failure_reason="server died during the measured window"))
    assert store.read_table("requests").num_rows == 0 and store.read_table("server_metrics").num_rows == 0
    assert not (tmp_path / "exp1" / "server_metrics" / "variant=base" / f"{plans[0].run_key}.parquet").exists()
    assert store.read_table("runs").column("status").to_pylist() == ["failed"]


def test_abort_leaves_nothing(tmp_path: Path, plans: list[RunPlan]) -> None:
    store = DatasetStore(str(tmp_path), "exp1")
    w = _spooled_run(store, plans[0])
    assert w.read("requests").num_rows == 12
    w.abort()
    assert [f for f in (tmp_path / "exp1").rglob("*") if f.is_file()] == []


def test_object_store_commit(plans: list[RunPlan]) -> None:
    store = DatasetStore("mock:///bucket/prefix", "exp1")
    _commit_ok(store, plans[0])
    assert store.committed_run_keys() == {plans[0].run_key}
    assert store.read_table("requests").num_rows == 12 and store.read_table("server_metrics").num_rows == 2
