"""Pure-Python safetensors header reader: 8-byte little-endian length + JSON, validated; tensor data is never read."""

from __future__ import annotations

import hashlib
import json
import errno
import os
import stat
import struct
from dataclasses import dataclass, field
from math import prod
from typing import Any, Optional

from cluster.errors import SglbenchError, UserError

MAX_HEADER_BYTES = 100_000_000
"""Same cap as the Rust safetensors library (MAX_HEADER_SIZE)."""

DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
"""Every dtype string of the safetensors format (tensor.rs `enum Dtype`) and its width in bits."""


class CheckpointError(UserError):
    """A bad checkpoint file; the message is one line naming the file and what is wrong."""

    def __init__(self, file: str, message: str, *, field: Optional[str] = None, expected: Optional[str] = None) -> None:
        super().__init__(f"{file}: {message}", file=file, field=field, expected=expected)
        self.message = message


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        return prod(self.shape)


@dataclass(frozen=True)
class ShardHeader:
    path: str
    file_size_bytes: int
    header_bytes: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] = field(default_factory=dict)
    header_sha256: str = ""
    """SHA-256 of the header's JSON bytes (part of the checkpoint fingerprint; the data is never read)."""


def _tensor(file: str, name: str, entry: Any, data_bytes: int) -> TensorInfo:
    where = f"tensor {name!r}"
    if not isinstance(entry, dict):
        raise CheckpointError(file, f"{where}: header entry is not a JSON object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise CheckpointError(file, f"{where}: unknown dtype {dtype!r} (expected one of {', '.join(DTYPE_BITS)})")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise CheckpointError(file, f"{where}: shape must be a list of non-negative integers, got {shape!r}")
    offsets = entry.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise CheckpointError(file, f"{where}: data_offsets must be [begin, end] integers, got {offsets!r}")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise CheckpointError(file, f"{where}: data_offsets {offsets} are not 0 <= begin <= end")
    if end > data_bytes:
        raise CheckpointError(
            file, f"{where}: data_offsets end {end} is outside the file (data region is {data_bytes} bytes)"
        )
    bits = prod(shape) * DTYPE_BITS[dtype]
    if (end - begin) * 8 != bits + (-bits % 8):
        raise CheckpointError(
            file, f"{where}: data_offsets span {end - begin} bytes but {dtype}{shape} needs {(bits + 7) // 8}"
        )
    return TensorInfo(dtype=dtype, shape=tuple(shape), nbytes=end - begin)


class _DuplicateKey(SglbenchError):
    """A JSON header names one key twice (caught inside this module and reported as a CheckpointError)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def describe_non_file(path: str) -> Optional[str]:
    """What a path that should be a regular file is instead ("is a directory", "is a symlink loop", ...), or None
    when it is a regular file (following symlinks). Never opens it, so a FIFO cannot block the probe."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "is a dangling symlink" if os.path.islink(path) else "does not exist"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symlink loop"
        return f"cannot be read: {e.strerror or e}"
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(st.st_mode):
            return f"is {what}, not a file"
    return None


def read_header(path: str) -> ShardHeader:
    """Read and validate one shard's header; reads exactly 8 + N bytes of the file."""
    what = describe_non_file(path)
    if what is not None:
        raise CheckpointError(path, f"{what} (expected a .safetensors file)")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise CheckpointError(path, f"file is {size} bytes, too short for a safetensors header")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER_BYTES:
                raise CheckpointError(path, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
            if 8 + n > size:
                raise CheckpointError(path, f"header length {n} is larger than the file ({size} bytes)")
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(path, f"cannot read file: {e.strerror or e}") from None
    if len(raw) != n:
        raise CheckpointError(path, f"file ended inside the header ({len(raw)} of {n} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _DuplicateKey as e:
        raise CheckpointError(path, f"header has duplicate key {e.args[0]!r}") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(path, f"header is not valid UTF-8 JSON ({e.__class__.__name__}: {str(e)[:80]})") from None
    except RecursionError:
        raise CheckpointError(path, "header JSON nests too deeply (expected {tensor name: {dtype, shape, "
                              "data_offsets}})") from None
    if not isinstance(header, dict):
        raise CheckpointError(path, f"header must be a JSON object, got {type(header).__name__}")
    data_bytes = size - 8 - n
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(path, "__metadata__ must be an object of string values")
    tensors = {name: _tensor(path, name, entry, data_bytes) for name, entry in header.items()}
    return ShardHeader(path=path, file_size_bytes=size, header_bytes=n, tensors=tensors, metadata=metadata,
                       header_sha256=hashlib.sha256(raw).hexdigest())
