"""Incremental writing of one run's large tables: batches go to hidden temp files as they arrive, then commit.

A long run (a million requests, hundreds of millions of chunks) never has to be held in memory: each Arrow batch
from the load actors is appended to a Parquet writer on a temp file. `commit()` moves the files into place and
writes the `runs` row last (the run's commit marker), so readers see the whole run or none of it; `abort()`
removes the temp files. Local roots get temp files beside their targets (an atomic rename); object stores get a
local spool file uploaded as one whole object at commit.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from cluster.plan.runs import RunPlan
from cluster.dataset.store import PARTITION_COLUMN, DatasetStore, Records

SPOOL_TABLES = ("requests", "chunks")


class RunWriter:
    def __init__(self, store: DatasetStore, plan: RunPlan) -> None:
        self.store = store
        self.plan = plan
        self.temp: dict[str, str] = {}
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.rows: dict[str, int] = {t: 0 for t in SPOOL_TABLES}
        self._spool_dir: Optional[str] = None

    def _temp_path(self, table: str) -> str:
        target = self.store._path(table, self.plan.variant.name, self.plan.run_key)
        if self.store.is_local:
            parent = target.rsplit("/", 1)[0]
            os.makedirs(parent, exist_ok=True)
            return f"{parent}/.{target.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}.tmp"
        if self._spool_dir is None:
            self._spool_dir = tempfile.mkdtemp(prefix="sglbench-spool-")
        return f"{self._spool_dir}/{table}.parquet"

    def write(self, table: str, batch: Records) -> None:
        """Append rows of `requests` or `chunks` (KEY_FIELDS are added from the plan)."""
        t = self.store._with_keys(table, self.plan, batch)
        if PARTITION_COLUMN in t.column_names:
            t = t.drop_columns([PARTITION_COLUMN])
        if table not in self.writers:
            self.temp[table] = self._temp_path(table)
            self.writers[table] = pq.ParquetWriter(self.temp[table], t.schema, compression="zstd")
        self.writers[table].write_table(t)
        self.rows[table] += t.num_rows

    def _close(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers.clear()

    def read(self, table: str, columns: Optional[list[str]] = None) -> pa.Table:
        """What has been written so far (closes the writers: call after the last batch)."""
        self._close()
        if table not in self.temp:
            return self.store._with_keys(table, self.plan, _empty(table)).drop_columns([PARTITION_COLUMN])
        return pq.read_table(self.temp[table], columns=columns)

    def commit(self, run_row: dict[str, Any], extra: Optional[dict[str, Records]] = None) -> None:
        """Move the spooled tables into place, write extra whole tables, then the runs row last."""
        self._close()
        runs_path = self.store._path("runs", self.plan.variant.name, self.plan.run_key)
        runs_table = self.store.runs_row(self.plan, run_row)  # validate before touching anything
        self.store._delete(runs_path)
        for table in SPOOL_TABLES:
            target = self.store._path(table, self.plan.variant.name, self.plan.run_key)
            if table not in self.temp:
                self.store.write_table_rows(table, self.plan, _empty(table))
            elif self.store.is_local:
                os.replace(self.temp[table], target)
            else:
                self.store.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
                with open(self.temp[table], "rb") as src, self.store.fs.open_output_stream(target) as dst:
                    shutil.copyfileobj(src, dst, length=8 << 20)
        for table, batch in (extra or {}).items():
            self.store.write_table_rows(table, self.plan, batch)
        self.store._write_parquet(runs_path, runs_table)
        self._cleanup()

    def abort(self) -> None:
        self._close()
        for path in self.temp.values():
            if os.path.exists(path):
                os.unlink(path)
        self._cleanup()

    def _cleanup(self) -> None:
        if self._spool_dir is not None:
            shutil.rmtree(self._spool_dir, ignore_errors=True)
            self._spool_dir = None


def _empty(table: str) -> pa.Table:
    from cluster.dataset.records import CHUNK_BATCH_SCHEMA, REQUEST_BATCH_SCHEMA

    return (REQUEST_BATCH_SCHEMA if table == "requests" else CHUNK_BATCH_SCHEMA).empty_table()
