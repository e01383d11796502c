"""A kernel profile's files on the server's node: waiting for the traces, and the content-hashed, size-capped archive."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cluster.kernel.profile_summary import ProfileSummary

STABLE_S = 0.5
"""A trace counts as written once no file in the directory changed size for this long (SGLang exports after the
last profiled step, from its scheduler process)."""


@dataclass(frozen=True)
class ProfileCapture:
    """What one variant's profile left: the trace directory, its archive (None when over the cap) and why not."""

    directory: str
    files: tuple[str, ...]
    archive: Optional[bytes]
    archive_sha256: Optional[str]
    archive_bytes: int
    note: Optional[str] = None
    """Why there is no archive or no trace (over the size cap, the server refused, nothing written in time)."""
    summary: Optional[ProfileSummary] = None
    """The traces' top kernels (summarised on the node: a trace over the archive cap is still summarised)."""


def wait_for_traces(directory: Path, expected: int, timeout_s: float, poll_s: float = 0.1) -> list[Path]:
    """The trace files once `expected` of them exist and none changed size for STABLE_S (or whatever is there at
    the timeout)."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, int] = {}
    stable_since = time.monotonic()
    while True:
        files = sorted(p for p in directory.glob("*.json*") if p.is_file() and not p.name.startswith("."))
        sizes = {p.name: p.stat().st_size for p in files}
        if sizes != last:
            last, stable_since = sizes, time.monotonic()
        if len(files) >= expected and time.monotonic() - stable_since >= STABLE_S:
            return files
        if time.monotonic() >= deadline:
            return files
        time.sleep(poll_s)


def archive_dir(directory: Path, max_bytes: int) -> tuple[Optional[bytes], Optional[str], int, Optional[str]]:
    """(tar.gz bytes, sha256 of them, size, note): a reproducible archive (sorted names, zero mtimes and owners), so
    equal traces hash equal; None with a note when it is larger than max_bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(q for q in directory.rglob("*") if q.is_file() and not q.name.startswith(".")):
            info = tarfile.TarInfo(p.relative_to(directory).as_posix())
            info.size, info.mtime, info.mode = p.stat().st_size, 0, 0o644
            with p.open("rb") as f:
                tar.addfile(info, f)
    data = buf.getvalue()
    if len(data) > max_bytes:
        return None, None, len(data), f"trace archive is {len(data)} bytes, over the cap of {max_bytes}: not kept"
    return data, hashlib.sha256(data).hexdigest(), len(data), None
