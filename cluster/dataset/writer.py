"""Incremental writing of one run's large tables: batches are spooled into the run's staging directory, then commit.

A long run (a million requests, hundreds of millions of chunks) never has to be held in memory: each Arrow batch
from the load actors is appended to a Parquet writer on a file in `DatasetStore.new_staging()` (outside the hive
tree, so plain readers never see it). `commit()` syncs the files and hands them to `DatasetStore.commit_run`,
the one commit protocol (tables moved in, the runs row last); `abort()` removes the staging directory. A write
error (disk full) aborts the run and raises WriteError naming the file.
"""

from __future__ import annotations

from typing import Mapping, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from cluster.dataset.atomic import remove_tree, sync_file, write_error
from cluster.kernel.runs import RunPlan
from cluster.kernel.records import CHUNK_BATCH_SCHEMA, REQUEST_BATCH_SCHEMA
from cluster.kernel.run_row import RunRow
from cluster.dataset.store import DatasetStore
from cluster.kernel.records import Records

SPOOL_TABLES = ("requests", "chunks")


class RunWriter:
    def __init__(self, store: DatasetStore, plan: RunPlan) -> None:
        self.store = store
        self.plan = plan
        self.files: dict[str, str] = {}
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.rows: dict[str, int] = {t: 0 for t in SPOOL_TABLES}
        self._staging: Optional[str] = None

    @property
    def staging(self) -> str:
        """The run's staging directory (created on first use)."""
        if self._staging is None:
            self._staging = self.store.new_staging(self.plan.run_key)
        return self._staging

    def write(self, table: str, batch: Records) -> None:
        """Append rows of `requests` or `chunks` (KEY_FIELDS are added from the plan)."""
        if table not in SPOOL_TABLES:
            raise ValueError(f"RunWriter spools {SPOOL_TABLES}, not {table!r}")
        t = self.store.file_rows(table, self.plan, batch)
        path = self.files.get(table) or f"{self.staging}/{table}.parquet"
        try:
            if table not in self.writers:
                self.files[table] = path
                self.writers[table] = pq.ParquetWriter(path, t.schema, compression="zstd",
                                                      write_page_checksum=True)
            self.writers[table].write_table(t)
        except OSError as e:
            self.abort()
            raise write_error(path, e) from e
        self.rows[table] += t.num_rows

    def _close(self) -> None:
        try:
            for table, w in list(self.writers.items()):
                w.close()
                del self.writers[table]
                sync_file(self.files[table])
        except OSError as e:
            self.abort()
            raise write_error(self.files.get(table, self.staging), e) from e

    def read(self, table: str, columns: Optional[list[str]] = None) -> pa.Table:
        """What has been written so far (closes the writers: call after the last batch)."""
        self._close()
        if table not in self.files:
            return self.store.file_rows(table, self.plan, _empty(table))
        return pq.read_table(self.files[table], columns=columns)

    def commit(self, run_row: RunRow, extra: Optional[Mapping[str, Records]] = None) -> None:
        """Commit the spooled tables (an empty file for one that got no rows) and `extra` whole tables."""
        self._close()
        tables: dict[str, Records] = {t: _empty(t) for t in SPOOL_TABLES if t not in self.files}
        tables.update(extra or {})
        try:
            self.store.commit_run(self.plan, run_row, self.staging, staged=self.files, tables=tables)
        finally:
            self._staging = None
            self.files.clear()

    def abort(self) -> None:
        for w in self.writers.values():
            try:
                w.close()
            except OSError:
                pass
        self.writers.clear()
        if self._staging is not None:
            remove_tree(self._staging)
            self._staging = None
        self.files.clear()


def _empty(table: str) -> pa.Table:
    return (REQUEST_BATCH_SCHEMA if table == "requests" else CHUNK_BATCH_SCHEMA).empty_table()
