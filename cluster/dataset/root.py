"""The results root on disk as a reader meets it: the root URI, the hive layout, and each file's proof of origin.

A reader (DatasetStore's reading side, the DuckDB views, `results show/compare/query/report`) accepts from a
results root only what this store writes, and refuses the command naming the file for anything else; nothing is
skipped silently and no row of a foreign or corrupt file is ever returned:

- the root is a local path or `<scheme>://...` for a scheme pyarrow serves (ROOT_SCHEMES); an unknown scheme
  (`s4://`) or a URI missing its `//` (`file:/x`, `s3:bucket`) is a UserError, never a local directory named so;
- under `<table>/` only `variant=<safe name>/` directories, and in them only regular files `<run key>.parquet`;
  entries whose name starts with '.' are ignored (the hidden temp files older writers left; never data). A
  symlink, FIFO, socket, device, a directory where a file belongs (or the reverse), a name the store would not
  write (`x.parquet.tmp`, odd characters) is refused;
- every data file must parse as Parquet (a truncated or half-written file does not: its footer is missing), carry
  the table's columns with the table's types (runs: also `m_<metric>` float64), and say in its own rows that it
  belongs here: `experiment` is this experiment and `run_key` the file's name (a file copied from another
  experiment or run is refused). A runs file holds exactly one row with a known status;
- data pages are read with their CRC checked (the store writes page checksums), so a flipped byte is an error,
  not a value. A read error of the disk itself (EIO) is an EnvironmentFault; everything else a StoreError.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from typing import Mapping, Optional, Union

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cluster.errors import EnvironmentFault, UserError, first_line, one_line
from cluster.config.locations import DATASET_SCHEMES, check_location, control_character
from cluster.kernel.run_row import RUN_STATUSES

ROOT_SCHEMES = DATASET_SCHEMES + ("mock",)
"""URI schemes a results root may use: the spec's (cluster/config/locations.py) and pyarrow's in-memory mock://
(tests)."""
ColumnValue = Union[str, int, float, bool, None]
"""One cell of a key column (a run's identity: run key, experiment, variant, load value, repeat, ...)."""
PARTITION_COLUMN = "variant"
RUN_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_DISK_ERRNOS = frozenset({errno.EIO, errno.ENXIO, errno.ENODEV, errno.ESTALE, errno.ENOMEM})


class StoreError(UserError):
    """A bad name or value given to the store, or a file under the results root the store did not write."""


def safe_name(value: str, what: str) -> str:
    """Names become path components and hive partition values: refuse anything that could escape or mislead."""
    if (not value or "/" in value or "\\" in value or ".." in value or value.startswith(".") or "=" in value
            or len(value) > 128 or control_character(value) is not None):
        raise StoreError(f"{what} {value!r} is not a safe path component (no '/', '..', '=', leading '.', control "
                         "characters)", field=what, expected="a name without '/', '..', '=' or control characters")
    return value


def open_root(root: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, base path) for a local path or `<scheme>://...`; UserError for a root that cannot be one."""
    expected = "a local path or " + ", ".join(f"{s}://..." for s in DATASET_SCHEMES)
    if not root:
        raise UserError("the results root is empty", field="--root", expected=expected)
    try:
        check_location(root, "results root", ROOT_SCHEMES)
    except ValueError as e:
        raise UserError(str(e), field="--root", expected=expected) from None
    if "://" not in root:
        return pafs.LocalFileSystem(), os.path.abspath(root)
    scheme = root.split("://", 1)[0]
    try:
        fs, path = pafs.FileSystem.from_uri(root)
    except (pa.ArrowInvalid, ValueError) as e:
        raise UserError(f"results root {root!r} is not a usable {scheme}:// URI: {first_line(e)}", field="--root",
                        expected=expected) from None
    except OSError as e:
        raise EnvironmentFault(f"results root {root!r}: the {scheme}:// filesystem is not available here: "
                               f"{first_line(e)}") from None
    return fs, path.rstrip("/")




# ---------------------------------------------------------------------------------------------- listing
@dataclass(frozen=True)
class Entry:
    """One directory entry: `kind` is file, dir, symlink, fifo, socket, device or missing (lstat, not followed)."""

    name: str
    path: str
    kind: str


def _mode_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "device"


KIND_TEXT = {"file": "a file", "dir": "a directory", "symlink": "a symlink", "fifo": "a FIFO", "socket": "a socket",
             "device": "a device", "missing": "missing", "loop": "a symlink loop",
             "dangling": "a symlink to nothing"}


def path_kind(fs: pafs.FileSystem, path: str, *, follow: bool = True) -> str:
    """What is at `path`: KIND_TEXT's keys; a local symlink is followed (a loop is 'loop') unless follow=False."""
    if not isinstance(fs, pafs.LocalFileSystem):
        t = _info(fs, path).type
        return "dir" if t == pafs.FileType.Directory else "file" if t == pafs.FileType.File else "missing"
    try:
        return _mode_kind((os.stat if follow else os.lstat)(path).st_mode)
    except FileNotFoundError:
        return "dangling" if os.path.lexists(path) else "missing"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "loop"
        if e.errno == errno.ENOTDIR:
            return "missing"
        raise read_error(path, e) from None


def _info(fs: pafs.FileSystem, path: str) -> pafs.FileInfo:
    try:
        return fs.get_file_info(path)
    except OSError as e:
        raise read_error(path, e) from None


def list_dir(fs: pafs.FileSystem, path: str) -> list[Entry]:
    """The entries of directory `path`, sorted by name, symlinks not followed (a missing directory has none)."""
    if isinstance(fs, pafs.LocalFileSystem):
        try:
            with os.scandir(path) as it:
                return sorted((Entry(e.name, f"{path}/{e.name}", _mode_kind(e.stat(follow_symlinks=False).st_mode))
                               for e in it), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise read_error(path, e) from None
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False, allow_not_found=True))
    except OSError as e:
        raise read_error(path, e) from None
    return sorted((Entry(i.base_name, i.path, "dir" if i.type == pafs.FileType.Directory else "file")
                   for i in infos), key=lambda e: e.name)


def read_error(path: str, e: OSError) -> Exception:
    """An OSError met reading `path`: the disk failing is an EnvironmentFault, anything else a StoreError."""
    why = e.strerror or first_line(e)
    path = one_line(path)
    if e.errno in _DISK_ERRNOS:
        return EnvironmentFault(f"cannot read {path}: {why} (the disk or filesystem failed)")
    if e.errno in (errno.EACCES, errno.EPERM):
        return EnvironmentFault(f"cannot read {path}: {why} (permission denied)")
    return StoreError(f"{path}: cannot be read as part of the dataset: {why}", file=path)


@dataclass(frozen=True)
class DataFile:
    """One table file where the layout puts it: `<table>/variant=<variant>/<key>.parquet`."""

    path: str
    variant: str
    key: str


def _refuse(path: str, what: str, expected: str) -> StoreError:
    return StoreError(f"{one_line(path)}: {what}; expected {expected} (the store writes nothing else here: move "
                      "it out of the results root)", file=path, expected=expected)


def table_layout(fs: pafs.FileSystem, table_dir: str) -> list[DataFile]:
    """The data files of one table directory; StoreError for any entry the store would not have written."""
    out: list[DataFile] = []
    for part in list_dir(fs, table_dir):
        if part.name.startswith("."):
            continue
        value = part.name[len(PARTITION_COLUMN) + 1:]
        if part.kind != "dir" or not part.name.startswith(PARTITION_COLUMN + "="):
            raise _refuse(part.path, f"{KIND_TEXT[part.kind]} named {part.name!r}",
                          f"only {PARTITION_COLUMN}=<variant> directories")
        try:
            safe_name(value, "variant name")
        except StoreError:
            raise _refuse(part.path, f"the partition value {value!r} is not a name the store writes",
                          "a variant name without '/', '..', '=' or control characters") from None
        for f in list_dir(fs, part.path):
            if f.name.startswith("."):
                continue
            key = f.name[: -len(".parquet")] if f.name.endswith(".parquet") else ""
            if f.kind != "file" or not RUN_KEY_RE.match(key):
                raise _refuse(f.path, f"{KIND_TEXT[f.kind]} named {f.name!r}",
                              "only regular files <run key>.parquet (letters, digits, '_' or '-')")
            out.append(DataFile(f.path, value, key))
    return out


# ---------------------------------------------------------------------------------------------- one file
def parquet_error(path: str, e: Exception) -> Exception:
    """The project's error for a Parquet file pyarrow could not read."""
    if isinstance(e, OSError) and e.errno is not None:
        return read_error(path, e)
    return StoreError(f"{one_line(path)}: not a readable Parquet file (truncated, half-written or corrupt: "
                      f"{one_line(first_line(e))}); "
                      "expected a complete file written by sglbench", file=path,
                      expected="a complete Parquet file written by sglbench")


def file_schema(fs: pafs.FileSystem, path: str) -> tuple[pa.Schema, pq.FileMetaData]:
    """The Arrow schema and footer of a Parquet file (StoreError when there is no valid footer)."""
    try:
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            return pf.schema_arrow, pf.metadata
    except (pa.ArrowException, OSError, ValueError, IndexError, MemoryError) as e:
        raise parquet_error(path, e) from None


def read_parquet(fs: pafs.FileSystem, path: str, columns: Optional[list[str]] = None) -> pa.Table:
    """A whole Parquet file (or `columns`), page checksums verified; the project's error on any failure."""
    try:
        return pq.read_table(path, filesystem=fs, columns=columns, partitioning=None,
                             page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError, IndexError, MemoryError) as e:
        raise parquet_error(path, e) from None


def check_schema(path: str, schema: pa.Schema, known: Optional[pa.Schema], table: str) -> None:
    """A known table's file has its required (non-nullable) columns, and each column it has the known type."""
    if known is None:
        return
    types = {f.name: f.type for f in known}
    for f in known:
        if not f.nullable and f.name != PARTITION_COLUMN and f.name not in schema.names:
            raise StoreError(f"{path}: the {table} file has no column {f.name!r}; expected the {table} table's "
                             "columns (a file of another table or program?)", file=path, field=f.name,
                             expected=f"a {table} file with column {f.name} ({f.type})")
    for f in schema:
        want = types.get(f.name)
        if want is None and table == "runs" and f.name.startswith("m_"):
            want = pa.float64()
        if want is None:
            raise StoreError(f"{path}: column {f.name!r} is not a column of the {table} table; expected only "
                             f"its columns", file=path, field=f.name, expected=f"the {table} table's columns")
        if not f.type.equals(want):
            raise StoreError(f"{path}: column {f.name!r} is {f.type}, not {want} as the {table} table has it",
                             file=path, field=f.name, expected=str(want))


def _stats_say(meta: pq.FileMetaData, schema: pa.Schema, column: str, value: object) -> Optional[bool]:
    """Whether every row group's min and max of a column equal `value` (None: statistics missing)."""
    idx = schema.get_field_index(column)
    if idx < 0 or meta.num_columns != len(schema) or meta.num_row_groups == 0:
        return None
    for g in range(meta.num_row_groups):
        st = meta.row_group(g).column(idx).statistics
        if st is None or not st.has_min_max:
            return None
        if st.min != value or st.max != value:
            return False
    return True


def check_identity(fs: pafs.FileSystem, path: str, schema: pa.Schema, meta: pq.FileMetaData,
                   expect: Mapping[str, ColumnValue]) -> None:
    """Each column of `expect` the file has holds only the expected value (the file says it belongs here)."""
    for column, value in expect.items():
        if column not in schema.names:
            continue
        said = _stats_say(meta, schema, column, value)
        if said is None:
            values = set(read_parquet(fs, path, [column]).column(column).to_pylist())
            said = values <= {value}
        if not said:
            raise StoreError(f"{path}: its rows are not this file's: column {column!r} is not {value!r} "
                             "throughout as its experiment, run or runs row says (a file copied from another "
                             "experiment or run, or edited?)", file=path, field=column,
                             expected=f"{column} = {value!r} in every row")


def check_runs_file(fs: pafs.FileSystem, path: str, key_columns: list[str]) -> dict[str, ColumnValue]:
    """A runs file holds one row whose status is one of RUN_STATUSES; its `key_columns` values (the run's
    identity, which every other table file of the run must repeat)."""
    t = read_parquet(fs, path, ["status"] + key_columns)
    statuses = t.column("status").to_pylist()
    if len(statuses) != 1 or statuses[0] not in RUN_STATUSES:
        raise StoreError(f"{path}: a runs file holds one row with status {'/'.join(RUN_STATUSES)}; it holds "
                         f"{len(statuses)} row(s) with status {statuses[:3]!r}", file=path, field="status",
                         expected=f"one row, status one of {', '.join(RUN_STATUSES)}")
    return {c: t.column(c)[0].as_py() for c in key_columns}


def verify_pages(fs: pafs.FileSystem, path: str) -> None:
    """Decode every page of the file with its checksum verified (bounded memory: one row group at a time)."""
    try:
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f, page_checksum_verification=True)
            for g in range(pf.num_row_groups):
                pf.read_row_group(g)
    except (pa.ArrowException, OSError, ValueError, IndexError, MemoryError) as e:
        raise parquet_error(path, e) from None


__all__ = ["KIND_TEXT", "PARTITION_COLUMN", "ROOT_SCHEMES", "RUN_KEY_RE", "ColumnValue", "DataFile",
           "Entry", "StoreError", "check_identity", "check_runs_file", "check_schema", "file_schema", "list_dir",
           "open_root", "parquet_error", "path_kind", "read_error", "read_parquet", "safe_name", "table_layout",
           "verify_pages"]
