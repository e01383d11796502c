"""The reading side of the dataset store: which files of an experiment readers see, each checked before use.

StoreReader lists a table's files by the layout (cluster/dataset/root.py), keeps those of committed runs (a runs
file exists for the key), and checks each before a row of it is used: footer, columns and types, that its rows
name this experiment and run, a runs file's one row and status. A foreign, corrupt or misplaced file refuses the
reader's command with a StoreError naming it; it is never skipped and never listed. Checks are remembered per
file version (inode, size, mtime) for the life of the process.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
from pydantic import BaseModel, ValidationError

from cluster.kernel.records import CHUNKS_SCHEMA, GPU_METRICS_SCHEMA, KEY_FIELDS, REQUESTS_SCHEMA
from cluster.kernel.run_row import RUNS_SCHEMA
from cluster.dataset.root import (KIND_TEXT, PARTITION_COLUMN, RUN_KEY_RE, ColumnValue, DataFile, StoreError,
                                  check_identity, check_runs_file, check_schema, file_schema, list_dir, open_root,
                                  path_kind, read_error, read_parquet, safe_name, table_layout, verify_pages)
from cluster.errors import UserError, one_line
from cluster.kernel.runs import RECORD_SCHEMA_VERSION
from cluster.input_files import decode_text, parse_json, read_input_bytes

StoredModel = TypeVar("StoredModel", bound=BaseModel)

TABLE_SCHEMAS: dict[str, pa.Schema] = {"runs": RUNS_SCHEMA, "requests": REQUESTS_SCHEMA, "chunks": CHUNKS_SCHEMA,
                                       "gpu_metrics": GPU_METRICS_SCHEMA}
"""Known tables; any other table name (correctness, server_metrics, ...) gets KEY_FIELDS + its own columns."""
VARIANT_TABLES = frozenset({"correctness", "kernel_profile"})
"""Tables written per variant (not per run): visible without a committed run."""
TABLE_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
FINISHED_STATUSES = ("ok", "invalid")
"""Run statuses a resubmission skips; a `failed` run is retried."""


class ExperimentNotFound(UserError, LookupError):
    """The experiment has no directory under the dataset root."""


def list_experiments(root: str) -> list[str]:
    """Experiment names under a dataset root (directories holding experiment.json or a runs table); a root that
    is not a directory is a StoreError (a missing one has no experiments)."""
    fs, base = open_root(root)
    kind = path_kind(fs, base)
    if kind == "missing":
        return []
    if kind != "dir":
        raise StoreError(f"results root {root!r} is {KIND_TEXT[kind]}, not a directory", file=base, field="--root",
                         expected="a directory holding experiments")
    out = []
    for entry in list_dir(fs, base):
        if entry.name.startswith(".") or path_kind(fs, entry.path) != "dir":
            continue
        try:
            safe_name(entry.name, "experiment name")
        except StoreError:
            continue  # a directory the store could not have written is not an experiment
        if any(path_kind(fs, f"{entry.path}/{m}", follow=False) != "missing" for m in ("experiment.json", "runs")):
            out.append(entry.name)
    return sorted(out)



class StoreReader:
    """One experiment's directory under a dataset root (local path or pyarrow filesystem URI), as readers see it."""

    def __init__(self, root: str, experiment: str) -> None:
        self.root = root
        self.experiment = safe_name(experiment, "experiment name")
        self.fs, base = open_root(root)
        self.base = f"{base}/{self.experiment}"
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def is_local(self) -> bool:
        return self._local

    def _path(self, table: str, variant: str, run_key: str) -> str:
        if not TABLE_RE.match(table):
            raise StoreError(f"table name {table!r} must be lowercase letters, digits or '_'")
        if not RUN_KEY_RE.match(run_key):
            raise StoreError(f"run key {run_key!r} must be letters, digits, '_' or '-'")
        return f"{self.base}/{table}/variant={safe_name(variant, 'variant name')}/{run_key}.parquet"

    def exists(self) -> bool:
        """Whether the experiment has a directory; StoreError when something else (a file, a loop) is there."""
        kind = path_kind(self.fs, self.base)
        if kind not in ("dir", "missing"):
            raise StoreError(f"{self.base} is {KIND_TEXT[kind]}, not an experiment directory", file=self.base,
                             expected="a directory written by sglbench")
        if kind == "dir" and self._local and os.path.islink(self.base):
            # Decision (F25): a symlinked experiment directory is followed when its target is one sglbench wrote
            # (an experiment moved to another disk); any other target is named, not listed as foreign tables.
            target = os.path.realpath(self.base)
            if not any(os.path.lexists(os.path.join(target, n)) for n in ("experiment.json", "runs")):
                raise StoreError(f"{self.base} is a symlink to {one_line(target)}, which holds no experiment.json "
                                 "and no runs/; expected the experiment's own directory", file=self.base,
                                 expected="the experiment's directory (or a symlink to one)")
        return kind == "dir"

    def read_variant_table(self, table_name: str, variant: str, key: str) -> Optional[pa.Table]:
        """The rows write_variant_table stored under (variant, key), or None when there are none."""
        if table_name not in VARIANT_TABLES:
            raise StoreError(f"table {table_name!r} is not a per-variant table ({sorted(VARIANT_TABLES)})")
        path = self._path(table_name, variant, key)
        kind = path_kind(self.fs, path, follow=False)
        if kind == "missing":
            return None
        if kind != "file":
            raise StoreError(f"{path} is {KIND_TEXT[kind]}, not a table file", file=path, expected="a regular file")
        self._check(table_name, DataFile(path, variant, key))
        return read_parquet(self.fs, path)

    # free-form JSON stored as given: experiment.json (the spec's JSON, probe reports), read back as written
    def read_experiment_meta(self) -> Optional[dict[str, Any]]:
        """experiment.json's object, None when there is none; StoreError naming the file when it is not a JSON
        object in UTF-8 (or not a regular file, or past META_LIMIT_BYTES)."""
        path = f"{self.base}/experiment.json"
        kind = path_kind(self.fs, path)
        if kind == "missing":
            return None
        what = "experiment metadata file"
        if self._local:
            data = read_input_bytes(path, StoreError, what, limit_bytes=META_LIMIT_BYTES)
        else:
            data = self._read_remote(path, what)
        doc = parse_json(decode_text(data, path, StoreError, what), path, StoreError, what,
                         expected="a JSON object written by sglbench")
        if not isinstance(doc, dict):
            raise StoreError(f"{path}: {what} holds {type(doc).__name__}, not a JSON object", file=path,
                             expected="a JSON object written by sglbench")
        return doc

    def read_stored_spec(self, model: type[StoredModel], *keys: str) -> Optional[StoredModel]:
        """experiment.json's spec (or its part under `keys`, e.g. "load", "search") validated as this sglbench's
        `model`; None where experiment.json, the spec or a level under it is absent or null. A level that is not an
        object, or a value that does not validate (a field a newer or older sglbench wrote, a missing one), is a
        StoreError naming experiment.json and the field: every reader that re-validates the stored spec goes here,
        so none of them can let pydantic's ValidationError (or an AttributeError on a non-object) escape."""
        meta = self.read_experiment_meta()
        path = f"{self.base}/experiment.json"
        value: Any = meta
        where = "spec"
        for key in ("spec", *keys):
            if value is None:
                return None
            if not isinstance(value, dict):
                raise StoreError(f"{path}: {where} holds {type(value).__name__}, not an object", file=path,
                                 field=where, expected="the object sglbench wrote")
            value = value.get(key)
            where = "spec" if key == "spec" else f"{where}.{key}"
        if value is None:
            return None
        try:
            return model.model_validate(value)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            field = f"{where}.{loc}" if loc else where
            raise StoreError(f"{path}: {field}: {first['msg']} (the stored spec does not validate as this "
                             f"sglbench's {model.__name__}: written by another version, or edited; "
                             f"{e.error_count()} problem(s))", file=path, field=field,
                             expected=f"a {model.__name__} this sglbench reads") from None

    def _read_remote(self, path: str, what: str) -> bytes:
        try:
            with self.fs.open_input_stream(path) as f:
                data = bytes(f.read(META_LIMIT_BYTES + 1))
        except OSError as e:
            raise read_error(path, e) from None
        if len(data) > META_LIMIT_BYTES:
            raise StoreError(f"{path}: {what} is past the {META_LIMIT_BYTES}-byte limit", file=path,
                             expected=f"at most {META_LIMIT_BYTES} bytes")
        return data

    # ------------------------------------------------------------------ reading
    def _layout(self, table: str) -> list[DataFile]:
        if not TABLE_RE.match(table):
            raise StoreError(f"table name {table!r} must be lowercase letters, digits or '_'")
        path = f"{self.base}/{table}"
        kind = path_kind(self.fs, path, follow=False)
        if kind not in ("dir", "missing"):
            raise StoreError(f"{path} is {KIND_TEXT[kind]} where the store keeps the {table} table's directory",
                             file=path, expected="a directory written by sglbench (or nothing)")
        return table_layout(self.fs, path)

    def _runs_layout(self) -> dict[str, DataFile]:
        """Run key → its runs file; StoreError when one key is committed in two partitions."""
        out: dict[str, DataFile] = {}
        for f in self._layout("runs"):
            if f.key in out:
                raise StoreError(f"run {f.key!r} is committed twice: {out[f.key].path} and {f.path}", file=f.path,
                                 expected="one runs file per run key")
            out[f.key] = f
        return out

    def committed_run_keys(self) -> set[str]:
        """Run keys whose runs file exists (whatever their status): the runs whose rows readers see."""
        return set(self._runs_layout())

    def finished_run_keys(self) -> set[str]:
        """The resume index: runs committed with status ok or invalid. A failed run is retried on resubmission."""
        table = self.read_table("runs", columns=["run_key", "status"])
        return {k for k, s in zip(table.column("run_key").to_pylist(), table.column("status").to_pylist())
                if s in FINISHED_STATUSES}

    def _check(self, table: str, f: DataFile, run: Optional[dict[str, ColumnValue]] = None) -> _Checked:
        """The file's schema (and a runs file's identity) once it has shown it is this table's file of this
        experiment and run (root.py's rules); `run` is the runs row's identity a per-run file must repeat."""
        # a file that carries the partition column itself (the writer leaves it to the directory) must agree with
        # its directory: read_table keeps a file's own column, so variant=base/ could otherwise hold variant 'other'
        expect: dict[str, ColumnValue] = {"experiment": self.experiment, PARTITION_COLUMN: f.variant}
        if table not in VARIANT_TABLES:
            expect.update(run or {"run_key": f.key})
        stamp = _stamp(self.fs, f.path)
        memo = (table, f.path, stamp, tuple(sorted(expect.items()))) if stamp else None
        hit = _CHECKED.get(memo) if memo else None
        if hit is not None:
            return hit
        schema, meta = file_schema(self.fs, f.path)
        check_schema(f.path, schema, TABLE_SCHEMAS.get(table), table)
        check_identity(self.fs, f.path, schema, meta, expect)
        identity = check_runs_file(self.fs, f.path, [c for c in _IDENTITY if c in schema.names]) \
            if table == "runs" else {}
        version = identity.get("schema_version")
        if isinstance(version, int) and version != RECORD_SCHEMA_VERSION:  # before the run's files are held to it
            age = "newer" if version > RECORD_SCHEMA_VERSION else "older"
            raise StoreError(f"{f.path}: schema_version {version} is {age} than this sglbench reads (schema_version "
                             f"{RECORD_SCHEMA_VERSION}); read it with the sglbench that wrote it", file=f.path,
                             field="schema_version", expected=f"schema_version {RECORD_SCHEMA_VERSION}")
        out = _Checked(schema, identity)
        if memo:
            _CHECKED[memo] = out
        return out

    def checked_files(self, table: str) -> list[tuple[str, pa.Schema]]:
        """(path, schema) of the table's files of committed runs, each checked (StoreError naming a bad one)."""
        files = self._layout(table)
        if table != "runs" and table not in VARIANT_TABLES:
            runs = self._runs_layout()
            for f in files:
                run = runs.get(f.key)
                if run is not None and run.variant != f.variant:
                    raise StoreError(f"{f.path}: run {f.key!r} is committed under {PARTITION_COLUMN}="
                                     f"{run.variant}, not {f.variant}", file=f.path,
                                     expected=f"the file under {PARTITION_COLUMN}={run.variant}/")
            files = [f for f in files if f.key in runs]
            return [(f.path, self._check(table, f, self._check("runs", runs[f.key]).identity).schema)
                    for f in files]
        return [(f.path, self._check(table, f).schema) for f in files]

    def table_files(self, table: str) -> list[str]:
        """Data files of a table that belong to committed runs (a crash before the runs row hides the rest), each
        checked as checked_files does."""
        return [p for p, _ in self.checked_files(table)]

    def verify_files(self, paths: Iterable[str]) -> None:
        """Decode every page of each file with its checksum verified (once per file version in a process): for
        readers that hand the files to another decoder (DuckDB), which checks no page checksum."""
        for p in paths:
            stamp = _stamp(self.fs, p)
            if stamp and (p, stamp) in _VERIFIED:
                continue
            verify_pages(self.fs, p)
            if stamp:
                _VERIFIED.add((p, stamp))

    def tables(self) -> list[str]:
        """Table names present in this experiment; StoreError for an entry with a table's name that is not a
        directory (a file named runs, a symlink)."""
        out = []
        for e in list_dir(self.fs, self.base):
            if not TABLE_RE.match(e.name):
                continue
            if e.kind != "dir":
                raise StoreError(f"{e.path} is {KIND_TEXT[e.kind]} where the store keeps a table directory",
                                 file=e.path, expected="a directory written by sglbench (or nothing)")
            out.append(e.name)
        return out

    def _table_dirs(self) -> list[str]:
        """Table directories, for writers: an entry they do not write is left alone, never an error."""
        return [e.name for e in list_dir(self.fs, self.base) if e.kind == "dir" and TABLE_RE.match(e.name)]

    def read_table(self, name: str, columns: Optional[Iterable[str]] = None) -> pa.Table:
        """All committed partitions of a table; an empty table with the known schema when there are none."""
        files = self.checked_files(name)
        cols = list(columns) if columns is not None else None
        if not files:
            schema = TABLE_SCHEMAS.get(name, pa.schema(KEY_FIELDS))
            empty = schema.empty_table()
            return empty.select([c for c in cols if c in schema.names]) if cols else empty
        parts = []
        for p, schema in files:
            file_cols = [c for c in cols if c in schema.names] if cols is not None else None
            t = read_parquet(self.fs, p, file_cols)
            if (cols is None or PARTITION_COLUMN in cols) and PARTITION_COLUMN not in t.column_names:
                value = _partition_value(p)
                pos = min(2, t.num_columns) if cols is None else min(cols.index(PARTITION_COLUMN), t.num_columns)
                t = t.add_column(pos, pa.field(PARTITION_COLUMN, pa.string(), nullable=False),
                                 pa.array([value] * t.num_rows, pa.string()))
            parts.append(t)
        self.one_schema(name, files)
        return pa.concat_tables(parts, promote_options="permissive")

    def one_schema(self, table: str, files: list[tuple[str, pa.Schema]]) -> Optional[pa.Schema]:
        """The one schema of a table's files (None without files); StoreError when two give a column two types
        (a reader would otherwise cast one file's values to the other's type: 0.5 read as the text '0.5')."""
        if not files:
            return None
        try:
            return pa.unify_schemas([s for _, s in files])
        except (pa.ArrowException, ValueError) as e:
            path = f"{self.base}/{table}"
            raise StoreError(f"{path}: its files do not fit one table ({e}); expected files of one schema",
                             file=path, expected="files whose columns have one type each") from None


META_LIMIT_BYTES = 64 * 1024 * 1024
"""experiment.json past this is refused (the spec and probe results it holds are kilobytes)."""
_IDENTITY = [f.name for f in KEY_FIELDS if f.name != PARTITION_COLUMN]
"""The key columns every table file of a run repeats from its runs row."""


@dataclass(frozen=True)
class _Checked:
    schema: pa.Schema
    identity: dict[str, ColumnValue]
    """A runs file's key columns (empty for other tables)."""


_CHECKED: dict[tuple[str, str, tuple[int, int, int], tuple[tuple[str, object], ...]], _Checked] = {}
_VERIFIED: set[tuple[str, tuple[int, int, int]]] = set()
"""Files this process has checked / verified, by path and (inode, size, mtime): a rewritten file is new."""


def _stamp(fs: pafs.FileSystem, path: str) -> Optional[tuple[int, int, int]]:
    if not isinstance(fs, pafs.LocalFileSystem):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _partition_value(path: str) -> str:
    for seg in path.split("/"):
        if seg.startswith(PARTITION_COLUMN + "="):
            return seg.split("=", 1)[1]
    raise StoreError(f"{path}: no {PARTITION_COLUMN}= partition in the path")

