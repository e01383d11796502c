"""The one atomic write (temp file, fsync, rename, fsync the directory) and the error every failed write becomes.

Every file sglbench writes for others to read goes through here: dataset tables and experiment.json, the report's
HTML and PNGs, tuning artifacts and their index. A reader sees the old file, the new file or no file, never a
truncated one. On a local (POSIX) path the bytes go to a hidden temp file in the target's directory or in a given
staging directory on the same filesystem, are fsynced, renamed over the target, and the target's directory is
fsynced so the rename itself survives a power cut. On an object-store filesystem (pyarrow's S3/GCS/...) one
whole-object PUT is already all-or-nothing. Any OSError (disk full, read-only, permission) becomes a `WriteError`
naming the path, and the temp file is removed.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path
from typing import Optional, Union

import pyarrow.fs as pafs

from cluster.errors import EnvironmentFault

PathLike = Union[str, Path]


class WriteError(EnvironmentFault):
    """A file sglbench must write cannot be written (disk full, read-only, permission): `path` is the file or
    directory concerned, `os_errno` the operating system's error number."""

    def __init__(self, message: str, path: Optional[str] = None, os_errno: Optional[int] = None) -> None:
        super().__init__(message)
        self.path = path
        self.os_errno = os_errno


def write_error(path: PathLike, e: OSError, doing: str = "write") -> WriteError:
    """A WriteError for an OSError hit at `path` (what to do about it included for the common cases)."""
    hint = {errno.ENOSPC: "the disk is full: free space and run again (finished runs are kept)",
            errno.EDQUOT: "the disk quota is exceeded: free space and run again (finished runs are kept)",
            errno.EROFS: "the filesystem is read-only: choose another output",
            errno.EACCES: "permission denied: choose a writable output",
            errno.EPERM: "permission denied: choose a writable output"}.get(e.errno or 0, "")
    why = e.strerror or str(e)
    return WriteError(f"cannot {doing} {path}: {why}" + (f" ({hint})" if hint else ""), str(path), e.errno)


def temp_path(path: PathLike, staging_dir: Optional[PathLike] = None) -> str:
    """A fresh hidden temp name for `path`, beside it or in `staging_dir` (same filesystem, so rename is atomic)."""
    p = Path(path)
    return str(Path(staging_dir or p.parent) / f".{p.name}.{uuid.uuid4().hex}.tmp")


def fsync_dir(path: PathLike) -> None:
    """Make a rename or create in directory `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems refuse fsync on a directory: the rename is still atomic
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def sync_file(path: PathLike) -> None:
    """fsync a file another writer (a ParquetWriter) has closed; WriteError naming it on failure."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise write_error(path, e, "sync") from e


def write_synced(path: PathLike, data: bytes) -> None:
    """Write a new file completely and fsync it (for a staging area; use atomic_write for a file others read).
    On failure the partial file is removed and a WriteError names the path."""
    try:
        fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        _remove_quietly(path)
        raise write_error(path, e) from e


def move_into_place(src: PathLike, dst: PathLike) -> None:
    """Rename a complete, synced file (or directory) over `dst` and fsync dst's directory."""
    parent = Path(dst).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        fsync_dir(parent)
    except OSError as e:
        raise write_error(dst, e, "move into place") from e


def atomic_write(path: PathLike, data: bytes, *, fs: Optional[pafs.FileSystem] = None,
                 staging_dir: Optional[PathLike] = None) -> None:
    """The one atomic write: `path` ends up holding exactly `data`, or keeps what it held before.

    `fs` is the pyarrow filesystem `path` lives on (None or a LocalFileSystem: a local path); `staging_dir`, when
    given, is where the temp file is written (it must be on the target's filesystem) so that nothing but complete
    files ever appears in the target's directory, not even a hidden temp file.
    """
    if fs is not None and not isinstance(fs, pafs.LocalFileSystem):
        try:
            fs.create_dir(str(path).rsplit("/", 1)[0], recursive=True)
            with fs.open_output_stream(str(path)) as f:
                f.write(data)
        except OSError as e:
            raise write_error(path, e) from e
        return
    target = Path(path)
    tmp_dir = Path(staging_dir) if staging_dir is not None else target.parent
    try:
        tmp_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(tmp_dir, e, "create directory") from e
    tmp = temp_path(target, tmp_dir)
    write_synced(tmp, data)
    try:
        move_into_place(tmp, target)
    finally:
        _remove_quietly(tmp)


def remove_tree(path: PathLike) -> None:
    """Remove a staging directory and everything in it (missing is fine)."""
    shutil.rmtree(path, ignore_errors=True)


def _remove_quietly(path: PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


__all__ = ["WriteError", "atomic_write", "fsync_dir", "move_into_place", "remove_tree", "sync_file",
           "temp_path", "write_error", "write_synced"]
