"""The Parquet dataset store: layout, the one commit protocol (runs row last), the resume index, the writer's lock.

Layout under `<root>/<experiment>/`: `<table>/variant=<variant>/<run_key>.parquet` for every table,
`experiment.json`, `_staging/` (where every file is written and synced before it is renamed into place: plain
readers never look there) and `_lock` (the driver writing the dataset, see lock.py). A run is committed exactly
when its runs file exists; its other tables are moved in just before, so no file of a run that never committed is
left where readers look, and a write error (disk full) leaves the hive tree as it was.

Reading: every file under the root is checked before a row of it is used (cluster/dataset/root.py: the layout,
each file's footer, columns and types, that its own rows name this experiment and run, page checksums). A reader
met by a foreign, corrupt, half-written or misplaced file refuses the command with a StoreError naming the file
and what was expected: it never skips the file (that would hide it) nor lists its rows. Writers keep going past
files they do not read (a commit never fails on a stray file); resuming an experiment reads the runs table the
reader's way, so a corrupt dataset is refused before any server starts.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Optional

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cluster.kernel.runs import RECORD_SCHEMA_VERSION, RunPlan
from cluster.dataset.atomic import atomic_write, move_into_place, remove_tree, write_error, write_synced
from cluster.dataset.lock import DatasetLock
from cluster.dataset.reading import (FINISHED_STATUSES, TABLE_RE, TABLE_SCHEMAS, VARIANT_TABLES, ExperimentNotFound,
                                     StoreReader, list_experiments)
from cluster.kernel.records import KEY_FIELDS, Records
from cluster.kernel.run_row import RUN_FIELDS, RUN_METRIC_NAMES, RUNS_SCHEMA, RunRow
from cluster.dataset.root import PARTITION_COLUMN, RUN_KEY_RE, StoreError, list_dir, open_root, safe_name


_KEY_NAMES = [f.name for f in KEY_FIELDS]
_METRIC_SET = set(RUN_METRIC_NAMES)
STAGING_DIR = "_staging"


class DatasetStore(StoreReader):
    """One experiment's tables under a dataset root (local path or pyarrow filesystem URI): writing here, reading
    in StoreReader (reading.py)."""

    @property
    def staging_root(self) -> str:
        return f"{self.base}/{STAGING_DIR}"

    def _write_file(self, path: str, data: bytes) -> None:
        """Complete or absent (atomic.atomic_write): the temp file lives in _staging/, never in the hive tree."""
        atomic_write(path, data, fs=self.fs, staging_dir=self.staging_root if self._local else None)

    def _delete(self, path: str) -> None:
        try:
            if self.fs.get_file_info(path).type == pafs.FileType.File:
                self.fs.delete_file(path)
        except OSError as e:
            raise write_error(path, e, "remove") from e

    # ------------------------------------------------------------------ rows of one run
    def _key_columns(self, plan: RunPlan, n: int) -> dict[str, pa.Array]:
        vals: dict[str, Any] = {
            "run_key": plan.run_key, "experiment": self.experiment, "variant": plan.variant.name,
            "engine": plan.variant.engine, "workload": plan.workload.name, "load_kind": plan.load.kind,
            "load_value": float(plan.load.value), "repeat": plan.repeat, "schema_version": RECORD_SCHEMA_VERSION,
        }
        return {f.name: pa.array([vals[f.name]] * n, type=f.type) for f in KEY_FIELDS}

    def file_rows(self, table_name: str, plan: RunPlan, batch: Records) -> pa.Table:
        """One run's rows of a table as stored in its file: KEY_FIELDS prepended (checked against the known
        schema), the partition column dropped (it lives in the path, variant=<name>/: a copy inside the file would
        clash with the partition plain readers infer from the path)."""
        t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        t = t.drop_columns([c for c in _KEY_NAMES if c in t.schema.names])
        keys = self._key_columns(plan, t.num_rows)
        out = pa.Table.from_arrays(
            list(keys.values()) + list(t.columns),
            schema=pa.schema(KEY_FIELDS + list(t.schema)),
        )
        known = TABLE_SCHEMAS.get(table_name)
        if known is not None and table_name != "runs":
            if set(out.schema.names) != set(known.names):
                missing = sorted(set(known.names) - set(out.schema.names))
                extra = sorted(set(out.schema.names) - set(known.names))
                raise StoreError(f"{table_name} batch does not match its schema: missing {missing}, extra {extra}")
            out = out.select(known.names).cast(known)
        return _without_partition(out)

    def write_table_rows(self, table_name: str, plan: RunPlan, batch: Records) -> str:
        """Add (or replace) one table file of a run outside a commit; returns its path. Rows of a run that has
        no runs file stay hidden from this store's readers (and are removed by recover())."""
        path = self._path(table_name, plan.variant.name, plan.run_key)
        self._write_file(path, _parquet_bytes(self.file_rows(table_name, plan, batch)))
        return path

    def write_variant_table(self, table_name: str, variant: str, key: str, table: pa.Table) -> str:
        """Rows that belong to a variant rather than a run (e.g. the correctness gate); the same key replaces."""
        if table_name not in VARIANT_TABLES:
            raise StoreError(f"table {table_name!r} is not a per-variant table ({sorted(VARIANT_TABLES)})")
        path = self._path(table_name, variant, key)
        self._write_file(path, _parquet_bytes(_without_partition(table)))
        return path

    def runs_row(self, plan: RunPlan, run_row: RunRow) -> pa.Table:
        """The one-row runs table: KEY_FIELDS + RUN_FIELDS (a field left None that the plan knows is the plan's) +
        m_<metric> columns.

        Metrics come from run_row.metrics, else (when it is empty) from run_row.metrics_json; metrics beyond
        RUN_METRIC_NAMES get extra float64 m_ columns after the fixed ones.
        """
        metrics: Mapping[str, object] = run_row.metrics
        if not metrics and run_row.metrics_json:
            metrics = json.loads(run_row.metrics_json)
        row = {f.name: getattr(run_row, f.name) for f in RUN_FIELDS}
        if row["metrics_json"] is None:
            row["metrics_json"] = json.dumps(dict(metrics), sort_keys=True, default=_json_default)
        v, w = plan.variant, plan.workload
        defaults: dict[str, object] = {
            "seed": plan.seed, "order_index": plan.order_index, "tp": v.tp, "gpus": v.gpus,
            "variant_family": v.family or v.name, "is_baseline": v.is_baseline,
            "spec_algorithm": v.speculative.algorithm if v.speculative else None,
            "spec_num_steps": v.speculative.num_steps if v.speculative else None,
            "spec_num_draft_tokens": v.speculative.num_draft_tokens if v.speculative else None,
            # a distribution records its mean, the dataset's own lengths nothing (requests.max_tokens has each one)
            "input_tokens": w.input_tokens_nominal(), "output_tokens": w.output_tokens_nominal(),
            "max_tokens": w.output_tokens_nominal(),
        }
        for k, d in defaults.items():
            if row.get(k) is None:
                row[k] = d
        cols: dict[str, pa.Array] = self._key_columns(plan, 1)
        for f in RUN_FIELDS:
            cols[f.name] = pa.array([row[f.name]], type=f.type)
        extra = sorted(n for n in metrics if n not in _METRIC_SET and TABLE_RE.match(n))
        for n in list(RUN_METRIC_NAMES) + extra:
            cols[f"m_{n}"] = pa.array([_as_float(metrics.get(n))], type=pa.float64())
        schema = pa.schema(list(RUNS_SCHEMA) + [pa.field(f"m_{n}", pa.float64()) for n in extra])
        return pa.Table.from_pydict(cols, schema=schema)

    # ------------------------------------------------------------------ the commit protocol
    def new_staging(self, run_key: str) -> str:
        """A fresh local directory for one run's files before commit: `<experiment>/_staging/<run_key>.<id>/` on a
        local root (same filesystem, so commit is a rename), a local temp directory for an object store."""
        if not RUN_KEY_RE.match(run_key):
            raise StoreError(f"run key {run_key!r} must be letters, digits, '_' or '-'")
        if not self._local:
            return tempfile.mkdtemp(prefix=f"sglbench-staging-{run_key}-")
        d = f"{self.staging_root}/{run_key}.{uuid.uuid4().hex[:12]}"
        try:
            os.makedirs(d)
        except OSError as e:
            raise write_error(d, e, "create the staging directory") from e
        return d

    def commit_run(self, plan: RunPlan, run_row: RunRow, staging: str,
                   staged: Optional[Mapping[str, str]] = None, tables: Optional[Mapping[str, Records]] = None) -> None:
        """Commit one run; every writer of a run ends here (write_run, RunWriter.commit).

        `staged` maps table name → a complete file already written in `staging` (a spooled Parquet file);
        `tables` are whole tables to write. The protocol:
        1. build and check the runs row; write every table and the runs row as synced files in `staging`
           (a write error here, e.g. disk full, leaves the dataset exactly as it was);
        2. un-commit an earlier attempt (delete its runs file);
        3. move each table in (rename, directory fsynced) and delete this run's files of tables it no longer has;
        4. move the runs file in last: the commit;
        5. on any error in 2-4 remove what was moved in; always remove `staging`.
        Errors become WriteError (an EnvironmentFault) naming the path.
        """
        try:
            runs = self.runs_row(plan, run_row)  # refuse a bad row before touching anything
            files = dict(staged or {})
            for name, batch in (tables or {}).items():
                files[name] = self._stage(staging, name, self.file_rows(name, plan, batch))
            if "runs" in files:
                raise StoreError("the runs row is given as run_row, not as a table")
            runs_file = self._stage(staging, "runs", runs)
            self._publish(plan, files, runs_file)
        finally:
            remove_tree(staging)

    def write_run(self, plan: RunPlan, run_row: RunRow, requests: Optional[Records] = None,
                  chunks: Optional[Records] = None) -> None:
        """Write one whole run through commit_run (a table given as None has no file afterwards)."""
        self.runs_row(plan, run_row)  # a bad row is refused before a staging directory exists
        tables = {n: b for n, b in (("requests", requests), ("chunks", chunks)) if b is not None}
        self.commit_run(plan, run_row, self.new_staging(plan.run_key), tables=tables)

    def _stage(self, staging: str, name: str, table: pa.Table) -> str:
        if not TABLE_RE.match(name):
            raise StoreError(f"table name {name!r} must be lowercase letters, digits or '_'")
        path = f"{staging}/{name}.parquet"
        write_synced(path, _parquet_bytes(_without_partition(table)))
        return path

    def _put(self, src: str, dst: str) -> None:
        """Move a complete staged file to its place in the hive tree (a rename locally, one upload otherwise)."""
        if self._local:
            move_into_place(src, dst)
            return
        try:
            self.fs.create_dir(dst.rsplit("/", 1)[0], recursive=True)
            with open(src, "rb") as f, self.fs.open_output_stream(dst) as out:
                shutil.copyfileobj(f, out, length=8 << 20)
        except OSError as e:
            raise write_error(dst, e) from e

    def _publish(self, plan: RunPlan, files: Mapping[str, str], runs_file: str) -> None:
        v, k = plan.variant.name, plan.run_key
        runs_target = self._path("runs", v, k)
        self._delete(runs_target)
        moved: list[str] = []
        try:
            for name, src in files.items():
                dst = self._path(name, v, k)
                self._put(src, dst)
                moved.append(dst)
            for name in self._table_dirs():
                if name not in files and name != "runs" and name not in VARIANT_TABLES:
                    self._delete(self._path(name, v, k))
            self._put(runs_file, runs_target)
        except BaseException:
            for dst in moved:
                try:
                    self._delete(dst)
                except OSError:
                    pass
            raise

    # ------------------------------------------------------------------ one writer at a time
    @contextmanager
    def exclusive(self, command: Optional[str] = None) -> Iterator[DatasetLock]:
        """Hold the experiment's `_lock` (DatasetLocked naming the holder when another driver has it), clear what
        a crashed writer left (recover()), and release the lock on the way out, also on an exception."""
        lock = DatasetLock(self.fs, self.base, command=command).acquire()
        try:
            self.recover()
            yield lock
        finally:
            lock.release()

    def recover(self) -> list[str]:
        """Remove what an interrupted writer left: staging directories, hidden temp files in the hive tree (older
        versions wrote them there) and table files of runs without a runs file. Call only while holding the lock.
        An entry the store does not write is a StoreError naming it, before anything is removed (it is the user's,
        not a crashed writer's). Returns the paths removed."""
        removed: list[str] = []
        if self._local and os.path.isdir(self.staging_root):
            for name in sorted(os.listdir(self.staging_root)):
                removed.append(f"{self.staging_root}/{name}")
                remove_tree(removed[-1])
        committed = self.committed_run_keys()
        doomed: list[str] = []
        for table in self._table_dirs():  # every table is checked before anything is removed
            files = self._layout(table)  # a foreign entry is refused, never removed as if it were ours
            if table != "runs" and table not in VARIANT_TABLES:
                doomed += [f.path for f in files if f.key not in committed]
            doomed += [e.path for part in list_dir(self.fs, f"{self.base}/{table}") if part.kind == "dir"
                       for e in list_dir(self.fs, part.path)
                       if e.kind == "file" and e.name.startswith(".") and e.name.endswith(".tmp")]
        for path in doomed:
            self._delete(path)
            removed.append(path)
        return removed

    def write_artifact(self, relpath: str, data: bytes) -> str:
        """A file under `<experiment>/_artifacts/` (a kernel profile's trace archive), written atomically; its path."""
        parts = relpath.split("/")
        for part in parts:
            safe_name(part, "artifact path component")
        path = f"{self.base}/_artifacts/{'/'.join(parts)}"
        self._write_file(path, data)
        return path

    # free-form JSON stored as given: experiment.json (the spec's JSON, probe reports), written as handed over
    def write_experiment_meta(self, meta: dict[str, Any]) -> None:
        """experiment.json (spec, probe results, ...), written atomically."""
        data = json.dumps(meta, indent=2, sort_keys=True, default=_json_default).encode()
        self._write_file(f"{self.base}/experiment.json", data)

def _without_partition(table: pa.Table) -> pa.Table:
    return table.drop_columns([PARTITION_COLUMN]) if PARTITION_COLUMN in table.column_names else table


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", write_page_checksum=True)
    return bytes(sink.getvalue().to_pybytes())


def _as_float(val: Any) -> Optional[float]:
    ok = isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(float(val))
    return float(val) if ok else None


def _json_default(o: Any) -> Any:
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if hasattr(o, "item"):
        return o.item()
    return str(o)


__all__ = ["FINISHED_STATUSES", "PARTITION_COLUMN", "STAGING_DIR", "TABLE_SCHEMAS",
           "VARIANT_TABLES", "DatasetStore", "ExperimentNotFound", "StoreError", "list_experiments",
           "open_root", "safe_name"]
