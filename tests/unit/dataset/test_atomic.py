"""The one atomic write: complete or absent, file and directory fsynced, write errors named, no temp file left."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from cluster.dataset.atomic import WriteError, atomic_write, move_into_place, write_synced
from cluster.errors import EnvironmentFault


def _fsynced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def _full_after(monkeypatch: pytest.MonkeyPatch, n_bytes: int) -> None:
    """os.write accepts `n_bytes` in all, then fails as a full disk does."""
    real = os.write
    left = {"n": n_bytes}

    def write(fd: int, data: Any) -> int:
        if left["n"] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[: left["n"]]))
        left["n"] -= n
        return n

    monkeypatch.setattr(os, "write", write)


def test_write_replace_and_fsync_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "sub" / "index.html"
    synced = _fsynced_paths(monkeypatch)
    atomic_write(target, b"first")
    atomic_write(target, b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["index.html"]
    # each write: the temp file's data, then the directory that holds the rename
    assert sum(p.endswith(".tmp") for p in synced) == 2
    assert synced.count(str(target.parent)) == 2


def test_staging_dir_keeps_temp_files_out_of_the_target_directory(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    staging, target = tmp_path / "_staging", tmp_path / "tree" / "f.parquet"
    created: list[str] = []
    real_open = os.open

    def spy_open(path: Any, flags: int, *a: Any) -> int:
        if flags & os.O_CREAT:
            created.append(str(path))
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", spy_open)
    atomic_write(target, b"x" * 100, staging_dir=staging)
    assert target.read_bytes() == b"x" * 100
    assert created and all(Path(c).parent == staging for c in created)
    assert list(staging.iterdir()) == []


def test_disk_full_partway_keeps_the_old_file_and_names_the_path(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "experiment.json"
    atomic_write(target, json.dumps({"v": 1}).encode())
    _full_after(monkeypatch, 10)
    with pytest.raises(WriteError) as ei:
        atomic_write(target, b"y" * 100_000)
    err = ei.value
    assert isinstance(err, EnvironmentFault) and err.os_errno == errno.ENOSPC
    assert "No space left on device" in str(err) and "disk is full" in str(err)
    assert err.path is not None and err.path.startswith(str(tmp_path)) and err.path in str(err)
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["experiment.json"], "the partial temp file is removed"


def test_write_synced_removes_a_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _full_after(monkeypatch, 3)
    with pytest.raises(WriteError, match="runs.parquet"):
        write_synced(tmp_path / "runs.parquet", b"PAR1" * 1000)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_target_is_a_write_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(WriteError, match="a-file"):
        atomic_write(blocker / "report" / "index.html", b"x")
    src = tmp_path / "src"
    src.write_text("s")
    with pytest.raises(WriteError, match="a-file"):
        move_into_place(src, blocker / "dst")


def test_object_store_is_one_whole_object_write() -> None:
    fs = pafs._MockFileSystem()
    atomic_write("bucket/exp/experiment.json", b"{}", fs=fs)
    atomic_write("bucket/exp/experiment.json", b"{\"a\": 1}", fs=fs)
    names = [i.path for i in fs.get_file_info(pafs.FileSelector("bucket", recursive=True)) if i.is_file]
    assert names == ["bucket/exp/experiment.json"]
    with fs.open_input_stream("bucket/exp/experiment.json") as f:
        assert f.read() == b"{\"a\": 1}"


def test_tuning_artifacts_use_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An artifact is written synced and renamed in whole; a full disk leaves no half artifact and names the file."""
    from cluster.tuning.artifacts import ArtifactStore

    store = ArtifactStore(str(tmp_path))
    synced = _fsynced_paths(monkeypatch)
    art = store.put("triton_moe", {"k": 1}, {"cfg/E=8.json": b"{}"}, "moe")
    assert Path(art.path, "cfg/E=8.json").read_bytes() == b"{}" and store.find({"k": 1}) is not None
    assert any(p.endswith("E=8.json") for p in synced) and any(p.endswith(".tmp") for p in synced)
    monkeypatch.undo()
    _full_after(monkeypatch, 0)
    with pytest.raises(WriteError, match="No space left on device") as ei:
        store.put("triton_moe", {"k": 2}, {"cfg/E=16.json": b"{\"a\": 1}"}, "moe")
    assert ei.value.path is not None and "E=16.json" in ei.value.path
    monkeypatch.undo()
    assert [p.name for p in (tmp_path / "_artifacts" / "triton_moe").iterdir()] == [Path(art.path).name]
    assert store.find({"k": 2}) is None and store.find({"k": 1}) is not None
