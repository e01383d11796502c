"""The results root as readers meet it: every foreign, corrupt, misplaced or mistyped entry is a StoreError naming
it (exit 2), a failing disk an EnvironmentFault, and no row of such a file is ever returned."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.analysis.query import connect, query
from cluster.dataset.root import open_root
from cluster.dataset.store import DatasetStore, StoreError, list_experiments
from cluster.errors import EnvironmentFault, UserError
from tests.fuzz.results_root import write_dataset
from cluster.kernel.runs import RunPlan
from cluster.analysis.results import Results

def _file(root: Path, table: str, plan: RunPlan, exp: str = "exp1") -> Path:
    return root / exp / table / f"variant={plan.variant.name}" / f"{plan.run_key}.parquet"


def _every_read(root: Path) -> None:
    """Each reader of the store and of the views, as `results show/compare/query` use them."""
    store = DatasetStore(str(root), "exp1")
    for table in ("runs", "requests", "chunks"):
        store.read_table(table)
    store.finished_run_keys()
    store.read_experiment_meta()
    connect(Results.open(str(root), "exp1")).close()


def _refused(root: Path, named: Path | str) -> StoreError:
    with pytest.raises(StoreError) as info:
        _every_read(root)
    assert str(named) in str(info.value), info.value
    return info.value


def test_a_valid_dataset_reads(tmp_path: Path) -> None:
    write_dataset(tmp_path)
    _every_read(tmp_path)
    assert DatasetStore(str(tmp_path), "exp1").read_table("requests").num_rows == 100


@pytest.mark.parametrize("table", ["runs", "requests", "chunks"])
def test_truncated_file_is_refused_naming_it(tmp_path: Path, table: str) -> None:
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, table, plans[1])
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    assert "not a readable Parquet file" in str(_refused(tmp_path, f))


def test_empty_file_is_refused(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "runs", plans[0])
    f.write_bytes(b"")
    _refused(tmp_path, f)


def test_flipped_data_byte_is_refused_by_its_page_checksum(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "requests", plans[0])
    data = bytearray(f.read_bytes())
    meta = pq.ParquetFile(f).metadata
    col = meta.row_group(0).column(meta.schema.names.index("actual_send_ns"))
    start = col.dictionary_page_offset or col.data_page_offset
    data[start + col.total_compressed_size - 3] ^= 0x10  # inside the column's last page body
    f.write_bytes(bytes(data))
    _refused(tmp_path, f)


def test_runs_status_of_the_wrong_type_is_refused_not_listed(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "runs", plans[0])
    t = pq.read_table(f)
    t = t.set_column(t.schema.get_field_index("status"), "status", pa.array([7], pa.int64()))
    pq.write_table(t, f)
    err = _refused(tmp_path, f)
    assert err.field == "status" and "int64" in str(err)


def test_runs_status_unknown_value_is_refused(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "runs", plans[0])
    t = pq.read_table(f)
    pq.write_table(t.set_column(t.schema.get_field_index("status"), "status", pa.array(["7"])), f)
    assert _refused(tmp_path, f).field == "status"


def test_a_file_of_another_table_is_refused(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    shutil.copy(_file(tmp_path, "requests", plans[0]), _file(tmp_path, "chunks", plans[0]))
    _refused(tmp_path, _file(tmp_path, "chunks", plans[0]))
    shutil.copy(_file(tmp_path, "requests", plans[0]), _file(tmp_path, "runs", plans[0]))
    _refused(tmp_path, _file(tmp_path, "runs", plans[0]))


def test_a_file_from_another_experiment_or_run_is_refused(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    _, plans2 = write_dataset(tmp_path, "exp2")
    shutil.copy(_file(tmp_path, "runs", plans2[0], "exp2"), _file(tmp_path, "runs", plans[0]))
    assert _refused(tmp_path, _file(tmp_path, "runs", plans[0])).field == "experiment"
    write_dataset(tmp_path)
    renamed = _file(tmp_path, "runs", plans[0]).with_name("k" * 20 + ".parquet")
    shutil.copy(_file(tmp_path, "runs", plans[0]), renamed)
    assert _refused(tmp_path, renamed).field == "run_key"


def test_a_retyped_column_is_refused(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "requests", plans[0])
    t = pq.read_table(f)
    i = t.schema.get_field_index("actual_send_ns")
    pq.write_table(t.set_column(i, "actual_send_ns", t.column(i).cast(pa.float64())), f)
    assert _refused(tmp_path, f).field == "actual_send_ns"


def test_a_run_in_the_wrong_partition_is_refused(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    src = _file(tmp_path, "requests", plans[0])
    dst = src.parent.parent / f"variant={plans[1].variant.name}" / src.name
    src.rename(dst)
    _refused(tmp_path, dst)


def test_a_run_committed_twice_is_refused(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    src = _file(tmp_path, "runs", plans[0])
    shutil.copy(src, src.parent.parent / f"variant={plans[1].variant.name}" / src.name)
    assert "committed twice" in str(_refused(tmp_path, src.name))


@pytest.mark.parametrize("make", ["text", "dir_for_file", "file_for_dir", "symlink", "loop", "fifo", "odd_part",
                                  "no_partition", "temp_name", "newline_part"])
def test_an_entry_the_store_does_not_write_is_refused(tmp_path: Path, make: str) -> None:
    _, plans = write_dataset(tmp_path)
    part = tmp_path / "exp1" / "requests" / f"variant={plans[0].variant.name}"
    target = {"text": part / "notes.txt", "dir_for_file": part / "abc.parquet", "file_for_dir": part.parent / "x",
              "symlink": part / "lnk.parquet", "loop": part / "loop.parquet", "fifo": part / "f.parquet",
              "odd_part": part.parent / "variant=..", "no_partition": part.parent / "k.parquet",
              "temp_name": part / f"{plans[0].run_key}.parquet.tmp",
              "newline_part": part.parent / "variant=a\nb"}[make]
    if make in ("text", "file_for_dir", "no_partition", "temp_name"):
        target.write_bytes(b"x")
    elif make in ("dir_for_file", "odd_part", "newline_part"):
        target.mkdir()
    elif make == "symlink":
        target.symlink_to(_file(tmp_path, "requests", plans[0]))
    elif make == "loop":
        target.symlink_to(target)
    else:
        os.mkfifo(target)
    err = _refused(tmp_path, target.name.replace("\n", "\\n"))
    assert str(err).isprintable(), "one printable line, whatever the name holds"


def test_hidden_temp_files_of_a_killed_writer_are_never_read(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    part = _file(tmp_path, "requests", plans[0]).parent
    (part / f".{plans[0].run_key}.parquet.0123.tmp").write_bytes(b"PAR1 half")
    (tmp_path / "exp1" / "_staging" / "k.1").mkdir(parents=True)
    (tmp_path / "exp1" / "_staging" / "k.1" / "requests.parquet").write_bytes(b"half")
    _every_read(tmp_path)
    assert DatasetStore(str(tmp_path), "exp1").read_table("requests").num_rows == 100


@pytest.mark.parametrize("table", ["runs", "requests"])
def test_a_table_that_is_a_file_is_refused(tmp_path: Path, table: str) -> None:
    write_dataset(tmp_path)
    shutil.rmtree(tmp_path / "exp1" / table)
    (tmp_path / "exp1" / table).write_text("not a table")
    _refused(tmp_path, tmp_path / "exp1" / table)


def test_an_experiment_that_is_a_file_or_a_loop_is_not_reported_missing(tmp_path: Path) -> None:
    (tmp_path / "exp1").write_text("x")
    with pytest.raises(StoreError, match="is a file, not an experiment directory"):
        connect(Results.open(str(tmp_path), "exp1"))
    (tmp_path / "exp1").unlink()
    (tmp_path / "exp1").symlink_to(tmp_path / "exp1")
    with pytest.raises(StoreError, match="symlink loop"):
        connect(Results.open(str(tmp_path), "exp1"))
    (tmp_path / "exp1").unlink()
    (tmp_path / "exp1").symlink_to(tmp_path / "gone")
    with pytest.raises(StoreError, match="a symlink to nothing"):
        connect(Results.open(str(tmp_path), "exp1"))


@pytest.mark.parametrize("content", [b"\xff\xfe{}", b"{not json", b"[" * 5000, b"[1, 2]", b"1" * 5000, "dir",
                                     "fifo"])
def test_a_bad_experiment_json_is_refused_naming_it(tmp_path: Path, content: bytes | str) -> None:
    write_dataset(tmp_path)
    meta = tmp_path / "exp1" / "experiment.json"
    meta.unlink()
    if content == "dir":
        meta.mkdir()
    elif content == "fifo":
        os.mkfifo(meta)
    else:
        assert isinstance(content, bytes)
        meta.write_bytes(content)
    with pytest.raises(StoreError) as info:
        DatasetStore(str(tmp_path), "exp1").read_experiment_meta()
    assert info.value.file == str(meta)


@pytest.mark.parametrize("root", ["s4://bucket/x", "file:/tmp/x", "s3:bucket/x", "S4://b", "gs:/b", "ftp://h/x",
                                  "results\x00x", ""])
def test_an_unusable_root_is_a_user_error_before_anything_is_touched(tmp_path: Path, root: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for call in (lambda: open_root(root), lambda: list_experiments(root), lambda: DatasetStore(root, "exp1")):
        with pytest.raises(UserError) as info:
            call()
        assert info.value.field == "--root"
    assert list(tmp_path.iterdir()) == []  # no directory named after the typo


def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "r").write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        list_experiments(str(tmp_path / "r"))


def test_a_failing_disk_is_an_environment_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_dataset(tmp_path)
    def eio(path: str) -> None:
        raise OSError(5, "Input/output error", path)

    monkeypatch.setattr(os, "scandir", eio)
    with pytest.raises(EnvironmentFault, match="Input/output error"):
        DatasetStore(str(tmp_path), "exp1").read_table("runs")


def test_query_reads_nothing_it_has_not_checked(tmp_path: Path) -> None:
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "chunks", plans[1])
    f.write_bytes(f.read_bytes()[:-9])
    with pytest.raises(StoreError, match="chunks"):
        query(Results.open(str(tmp_path), "exp1"), "SELECT count(*) FROM runs")


def test_results_commands_exit_2_naming_the_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cluster.cli import app

    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "runs", plans[0])
    f.write_bytes(f.read_bytes()[:100])
    for argv in (["results", "show", "exp1"], ["results", "list"], ["results", "compare", "exp1"],
                 ["results", "query", "exp1", "SELECT 1"]):
        res = CliRunner().invoke(app, argv + ["--root", str(tmp_path)])
        assert res.exit_code == 2, (argv, res.output)
        assert "Traceback" not in res.output and str(f) in res.output, (argv, res.output)


def test_the_query_stays_read_only(tmp_path: Path) -> None:
    write_dataset(tmp_path)

    def snapshot() -> dict[str, tuple[int, int]]:
        return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")}

    before = snapshot()
    query(Results.open(str(tmp_path), "exp1"), "SELECT * FROM runs")
    connect(Results.open(str(tmp_path), "exp1")).close()
    assert snapshot() == before


def test_a_run_file_contradicting_its_runs_row_is_refused(tmp_path: Path) -> None:
    # fuzz finding: a requests file rewritten with the right types but another engine was read as the run's rows
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "requests", plans[0])
    t = pq.read_table(f)
    i = t.schema.get_field_index("engine")
    pq.write_table(t.set_column(i, t.field(i), pa.array(["7"] * t.num_rows, pa.string())), f)
    assert _refused(tmp_path, f).field == "engine"


def test_recover_refuses_a_foreign_entry_and_removes_nothing(tmp_path: Path) -> None:
    # a foreign *.parquet beside a run's files used to be deleted as an orphan of a crashed writer
    store, plans = write_dataset(tmp_path)
    part = _file(tmp_path, "requests", plans[0]).parent
    foreign = part / "mine copy.parquet"
    foreign.write_bytes(b"the user's")
    orphan = part / ("z" * 20 + ".parquet")
    shutil.copy(_file(tmp_path, "requests", plans[0]), orphan)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(StoreError, match="mine copy.parquet"):
        with store.exclusive():
            pass
    assert sorted(p for p in tmp_path.rglob("*") if p.name != "_lock") == [p for p in before if p.name != "_lock"]
    foreign.unlink()
    with store.exclusive():
        pass
    assert not orphan.exists() and _file(tmp_path, "requests", plans[0]).exists()


def test_files_of_an_unknown_table_that_do_not_fit_one_schema_are_refused(tmp_path: Path) -> None:
    store, plans = write_dataset(tmp_path)
    store.write_table_rows("server_metrics", plans[0], pa.table({"t_s": [0.5], "running": [2]}))
    store.write_table_rows("server_metrics", plans[1], pa.table({"t_s": ["late"], "running": [3]}))
    reads: list[Callable[[], object]] = [lambda: store.read_table("server_metrics"),
                                         lambda: connect(Results.open(str(tmp_path), "exp1"))]
    for read in reads:
        with pytest.raises(StoreError, match="server_metrics: its files do not fit one table"):
            read()  # DuckDB's union_by_name read 0.5 as the text '0.5'



def _set_column(path: Path, column: str, value: pa.Array) -> None:
    t = pq.read_table(path)
    i = t.schema.get_field_index(column)
    t = t.set_column(i, t.field(i), value) if i >= 0 else t.append_column(pa.field(column, value.type, False), value)
    pq.write_table(t, path)


def test_a_file_whose_own_variant_column_contradicts_its_partition_is_refused(tmp_path: Path) -> None:
    """F23's class: the writer leaves the variant to the directory, but read_table keeps a file's own column, so a
    runs (or requests) file under variant=base/ holding variant 'other' was shown and queried as base's."""
    for table in ("runs", "requests"):
        root = tmp_path / table
        _, plans = write_dataset(root)
        f = _file(root, table, plans[0])
        n = pq.read_metadata(f).num_rows
        _set_column(f, "variant", pa.array(["other"] * n, pa.string()))
        err = _refused(root, f)
        assert "column 'variant' is not" in str(err) and err.field == "variant"


def test_a_runs_row_of_another_schema_version_is_refused_on_the_runs_file(tmp_path: Path) -> None:
    """F24: schema_version 99 was reported on the run's chunks file as 'its rows are not this file's'."""
    _, plans = write_dataset(tmp_path)
    f = _file(tmp_path, "runs", plans[0])
    _set_column(f, "schema_version", pa.array([99], pa.int32()))
    err = _refused(tmp_path, f)
    assert "schema_version 99 is newer than this sglbench reads" in str(err), err


def test_a_symlinked_experiment_directory_is_followed_only_to_an_experiment(tmp_path: Path) -> None:
    """F25 (decision: follow a symlink to an experiment sglbench wrote, name any other target): exp1 -> /etc was
    reported as '.../exp1/debian_version is a file where the store keeps a table directory'."""
    write_dataset(tmp_path / "elsewhere")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "exp1").symlink_to(tmp_path / "elsewhere" / "exp1")
    assert query(Results.open(str(tmp_path / "root"), "exp1"), "SELECT count(*) AS n FROM runs")["n"][0] == 2
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "debian_version").write_text("12\n")
    (tmp_path / "root" / "exp1").unlink()
    (tmp_path / "root" / "exp1").symlink_to(foreign)
    with pytest.raises(StoreError, match=f"exp1 is a symlink to {foreign}, which holds no experiment.json"):
        query(Results.open(str(tmp_path / "root"), "exp1"), "SELECT count(*) FROM runs")
