"""Pure-Python safetensors header reader: 8-byte little-endian length + JSON, validated; tensor data is never read.

What a header is accepted with (the invariant tests/unit/probe/test_header_invariant.py checks on every accepted
tensor): a known dtype; a shape of at most MAX_DIMS dimensions, each 0..MAX_DIM_SIZE; data_offsets [begin, end]
with 0 <= begin <= end <= the data region's size; end - begin == ceil(prod(shape) * dtype bits / 8); and no two
tensors' byte ranges overlap (empty tensors occupy nothing). Reads go through cluster/probe/files.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from dataclasses import dataclass, field
from math import prod
from typing import Any

from cluster.input_files import decode_text
from cluster.probe.files import (CheckpointError, CheckpointReadError, check_file, clip, describe_non_file, parse_object,
                                 read_bytes)

MAX_HEADER_BYTES = 100_000_000
"""Same cap as the Rust safetensors library (MAX_HEADER_SIZE)."""
MAX_DIMS = 64
"""numpy's NPY_MAXDIMS: no framework loads a tensor of more dimensions."""
MAX_INDEX_DIGITS = 18
"""A layer or expert index in a tensor name has at most this many digits (int64); a longer run is no index (and a
5,000-digit one would raise in int(), Python's digit limit)."""
MAX_DIM_SIZE = 2**40
"""One dimension past this is absurd (real tensors' largest is a vocabulary of ~2**18, a whole flattened embedding of
a 400B model ~2**31); it also keeps shape products small enough to print (Python refuses str() past 4,300 digits)."""

DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
"""Every dtype string of the safetensors format (tensor.rs `enum Dtype`) and its width in bits."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    data_offsets: tuple[int, int] = (0, 0)
    """[begin, end) in the shard's data region (after the 8 + N header bytes)."""

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

    @property
    def data_bytes(self) -> int:
        return self.file_size_bytes - 8 - self.header_bytes


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _tensor(file: str, name: str, entry: Any, data_bytes: int) -> TensorInfo:
    """The entry as a TensorInfo when it satisfies the invariant (the fast path: a real shard has ~10k entries and
    a 400B model ~400k); otherwise _refuse says what is wrong."""
    if type(entry) is dict:
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if (type(dtype) is str and dtype in DTYPE_BITS and type(shape) is list and len(shape) <= MAX_DIMS
                and all(type(d) is int and 0 <= d <= MAX_DIM_SIZE for d in shape)
                and type(offsets) is list and len(offsets) == 2 and type(offsets[0]) is int
                and type(offsets[1]) is int and 0 <= offsets[0] <= offsets[1] <= data_bytes):
            begin, end = offsets
            bits = prod(shape) * DTYPE_BITS[dtype]
            if (end - begin) * 8 == bits + (-bits % 8):
                return TensorInfo(dtype=dtype, shape=tuple(shape), nbytes=end - begin, data_offsets=(begin, end))
    _refuse(file, name, entry, data_bytes)
    raise CheckpointError(file, f"tensor {clip(name)}: invalid header entry {clip(entry)}", field=name)


def _refuse(file: str, name: str, entry: Any, data_bytes: int) -> None:
    """Raise the CheckpointError naming the first field of a header entry that breaks the invariant."""
    where = f"tensor {clip(name)}"
    if not isinstance(entry, dict):
        raise CheckpointError(file, f"{where}: header entry is not a JSON object", field=name,
                              expected="{dtype, shape, data_offsets}")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise CheckpointError(file, f"{where}: unknown dtype {clip(dtype)} (expected one of {', '.join(DTYPE_BITS)})",
                              field=f"{name}.dtype", expected="a safetensors dtype")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise CheckpointError(file, f"{where}: shape must be a list of non-negative integers, got {clip(shape)}",
                              field=f"{name}.shape", expected="a list of non-negative integers")
    if len(shape) > MAX_DIMS or any(d > MAX_DIM_SIZE for d in shape):
        raise CheckpointError(file, f"{where}: shape {clip(shape)} is absurd (expected at most {MAX_DIMS} dimensions "
                              f"of at most {MAX_DIM_SIZE} each)", field=f"{name}.shape",
                              expected=f"at most {MAX_DIMS} dimensions of at most {MAX_DIM_SIZE}")
    offsets = entry.get("data_offsets")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        raise CheckpointError(file, f"{where}: data_offsets must be [begin, end] integers, got {clip(offsets)}",
                              field=f"{name}.data_offsets", expected="[begin, end] integers")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise CheckpointError(file, f"{where}: data_offsets {clip(offsets)} are not 0 <= begin <= end",
                              field=f"{name}.data_offsets", expected="0 <= begin <= end")
    if end > data_bytes:
        raise CheckpointError(file, f"{where}: data_offsets end {clip(end)} is outside the file (data region is "
                              f"{data_bytes} bytes)", field=f"{name}.data_offsets",
                              expected=f"end <= {data_bytes}")
    bits = prod(shape) * DTYPE_BITS[dtype]
    if (end - begin) * 8 != bits + (-bits % 8):
        raise CheckpointError(file, f"{where}: data_offsets span {end - begin} bytes but {dtype}{shape} needs "
                              f"{(bits + 7) // 8}", field=f"{name}.data_offsets",
                              expected=f"end - begin == {(bits + 7) // 8}")


def check_no_overlap(file: str, tensors: dict[str, TensorInfo]) -> None:
    """CheckpointError naming both tensors when two non-empty byte ranges of one shard overlap."""
    spans = sorted((t.data_offsets, name) for name, t in tensors.items() if t.nbytes > 0)
    for ((b0, e0), n0), ((b1, e1), n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise CheckpointError(file, f"tensor {clip(n1)}: data_offsets [{b1}, {e1}] overlap tensor {clip(n0)}'s "
                                  f"[{b0}, {e0}]", field=f"{n1}.data_offsets",
                                  expected=f"begin >= {e0} (tensors do not share bytes)")


_LONG_DIGITS = re.compile(rf"\d{{{MAX_INDEX_DIGITS + 1},}}")
_LONG_INDEX = re.compile(rf"(?:^|\.)\d{{{MAX_INDEX_DIGITS + 1},}}(?:\.|$)")


def _check_indices(file: str, tensors: dict[str, TensorInfo]) -> None:
    """CheckpointError for a tensor name whose numeric component is too long to be a layer or expert index."""
    for name in tensors:
        if _LONG_INDEX.search(name):
            raise CheckpointError(file, f"tensor {clip(name)}: a numeric name component longer than "
                                  f"{MAX_INDEX_DIGITS} digits is no layer or expert index", field=name,
                                  expected=f"indices of at most {MAX_INDEX_DIGITS} digits")


def read_header(path: str) -> ShardHeader:
    """Read and validate one shard's header; reads exactly 8 + N bytes of the file (bounded, regular files only)."""
    check_file(path, "a .safetensors file")
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise CheckpointError(path, f"cannot read file: {e.strerror or e}") from None
    if size < 8:
        raise CheckpointError(path, f"file is {size} bytes, too short for a safetensors header",
                              expected="8 bytes of header length, then the header")
    (n,) = struct.unpack("<Q", read_bytes(path, "safetensors header length", limit_bytes=8, length=8).ljust(8, b"\0"))
    if n > MAX_HEADER_BYTES:
        raise CheckpointError(path, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit",
                              field="header length", expected=f"at most {MAX_HEADER_BYTES} bytes")
    if 8 + n > size:
        raise CheckpointError(path, f"header length {n} is larger than the file ({size} bytes)",
                              field="header length", expected=f"at most {size - 8} bytes")
    raw = read_bytes(path, "safetensors header", limit_bytes=MAX_HEADER_BYTES, offset=8, length=n)
    if len(raw) != n:
        raise CheckpointError(path, f"file ended inside the header ({len(raw)} of {n} bytes)")
    text = decode_text(raw, path, CheckpointReadError, "safetensors header")
    header = parse_object(text, path, "safetensors header")
    data_bytes = size - 8 - n
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(path, "__metadata__ must be an object of string values", field="__metadata__",
                              expected="an object of string values")
    tensors = {name: _tensor(path, name, entry, data_bytes) for name, entry in header.items()}
    if _LONG_DIGITS.search(text):  # one C-speed scan; the names are looked at only when some run is that long
        _check_indices(path, tensors)
    check_no_overlap(path, tensors)
    return ShardHeader(path=path, file_size_bytes=size, header_bytes=n, tensors=tensors, metadata=metadata,
                       header_sha256=hashlib.sha256(raw).hexdigest())


__all__ = ["DTYPE_BITS", "MAX_DIMS", "MAX_DIM_SIZE", "MAX_INDEX_DIGITS", "MAX_HEADER_BYTES", "CheckpointError", "ShardHeader",
           "TensorInfo", "check_no_overlap", "describe_non_file", "read_header"]
