"""One writer per experiment dataset: the `<root>/<experiment>/_lock` file, its holder, heartbeat and stale rule.

A driver takes the lock before it reads the resume index and holds it until it returns (or raises). A second
driver on the same experiment dataset gets `DatasetLocked` naming the holder (pid, host, start time, command).

Creating the lock is exclusive on a local or mounted path (O_CREAT|O_EXCL, which NFSv3+ also honours). A lock
whose holder is gone does not block forever; a holder is gone when:
- it ran in the same process space (same host name, boot and pid namespace) and its pid is not running, or the
  pid now belongs to a process that started at another time (pid reuse): taken over at once;
- it ran anywhere else (another host or container) and has not renewed its heartbeat for `lease_s` seconds
  (default 120 s; the holder renews every `heartbeat_s`, default 20 s, so clocks must agree to within the
  difference): taken over after the lease.
Take-over is serialised by a second exclusive file, `_lock.takeover`, so two waiting drivers never both win.
A holder that finds its lock taken over (it was stalled past the lease) stops renewing and reports `lost`; a
renewal that races a take-over in the same instant can overwrite the new holder's file, which that holder's next
renewal notices (it reports `lost`), so one driver keeps the lock.
On an object store (s3://, gs://, ...) there is no exclusive create: the check-then-write there is best effort
(two drivers started within the same second can both proceed); use a local or mounted path for concurrent use.

The lock file is read bounded (at most LOCK_LIMIT_BYTES, opened O_NONBLOCK so a FIFO cannot hang it): one that is
not UTF-8 JSON of a LockHolder with the right types is "unreadable" (held, holder unknown; taken over once older
than the lease), and a lock path that is not a regular file (a directory, a FIFO, a symlink loop) is a
DatasetLocked naming it, for the user to remove.
"""

from __future__ import annotations

import json
import math
import os
import socket
import stat
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Optional

import pyarrow.fs as pafs

from cluster.dataset.atomic import WriteError, atomic_write, write_error
from cluster.errors import EnvironmentFault

LOCK_FILE = "_lock"
LEASE_S = 120.0
HEARTBEAT_S = 20.0
TAKEOVER_STALE_S = 30.0
"""A take-over guard older than this was left by a process that died mid take-over."""
_READ_RETRY_S = 1.0
LOCK_LIMIT_BYTES = 64 * 1024
"""A lock file is a few hundred bytes; past this it is not one."""
PID_MAX = 1 << 22
"""Linux's largest pid_max: a pid past it is not a pid."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds an experiment dataset: written into the lock file as JSON."""

    pid: int
    host: str
    process_space: str
    """hostname + boot id + pid namespace: where `pid` means something."""
    process_start: Optional[str]
    """The process's start time in clock ticks since boot (Linux), to tell pid reuse apart."""
    started_unix_s: float
    heartbeat_unix_s: float
    command: str
    token: str

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_unix_s))
        return f"pid {self.pid} on host {self.host}, started {started}, command: {self.command}"


class DatasetLocked(EnvironmentFault):
    """Another driver is writing this experiment dataset; `holder` says who (None when its file is unreadable)."""

    def __init__(self, message: str, path: str, holder: Optional[LockHolder]) -> None:
        super().__init__(message)
        self.path = path
        self.holder = holder


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def process_space() -> str:
    """Host name, boot id and pid namespace of this process: two processes with the same value share pids."""
    boot = (_read_text("/proc/sys/kernel/random/boot_id") or "").strip()
    try:
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        ns = ""
    return f"{socket.gethostname()}|{boot}|{ns}"


def process_start(pid: int) -> Optional[str]:
    """Start time of `pid` (field 22 of /proc/<pid>/stat), or None where /proc is not there."""
    stat = _read_text(f"/proc/{pid}/stat")
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def stale_reason(holder: LockHolder, now_unix_s: float, lease_s: float, here: Optional[str] = None) -> Optional[str]:
    """Why `holder` no longer holds the lock, or None while it does (the rule in the module docstring)."""
    if holder.process_space == (here if here is not None else process_space()):
        if not pid_running(holder.pid):
            return f"its process {holder.pid} is no longer running"
        start = process_start(holder.pid)
        if holder.process_start is not None and start is not None and start != holder.process_start:
            return f"pid {holder.pid} now belongs to another process"
        return None
    quiet_s = now_unix_s - holder.heartbeat_unix_s
    if quiet_s > lease_s:
        return f"it ran on another host and has not renewed its lease for {quiet_s:.0f} s (lease {lease_s:.0f} s)"
    return None


def _read_lock_text(path: str) -> Optional[str]:
    """The lock file's UTF-8 text, None when it is gone or unreadable; DatasetLocked when it is not a regular
    file (opened O_NONBLOCK and fstat-checked first, so a FIFO cannot block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DatasetLocked(f"{path}: the lock file cannot be opened ({e.strerror or e}); expected a regular file "
                            "written by sglbench: remove it", path, None) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DatasetLocked(f"{path}: the lock path is not a regular file (mode {stat.filemode(mode)}); "
                                "expected a lock file written by sglbench: remove it", path, None)
        data = os.read(fd, LOCK_LIMIT_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > LOCK_LIMIT_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "pid": (int,), "host": (str,), "process_space": (str,), "process_start": (str, type(None)),
    "started_unix_s": (int, float), "heartbeat_unix_s": (int, float), "command": (str,), "token": (str,)}


def _parse(text: Optional[str]) -> Optional[LockHolder]:
    """The holder a lock file names, or None when it is not a LockHolder's JSON with the right types."""
    if not text or len(text) > LOCK_LIMIT_BYTES:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    for k, types in _FIELD_TYPES.items():
        v = doc.get(k)
        if k not in doc or isinstance(v, bool) or not isinstance(v, types):
            return None
        if isinstance(v, float) and not math.isfinite(v):
            return None
    if not 0 < doc["pid"] <= PID_MAX or not all(0 <= doc[k] < 1e11 for k in ("started_unix_s", "heartbeat_unix_s")):
        return None
    return LockHolder(**{k: doc[k] for k in _FIELD_TYPES})


class DatasetLock:
    """The lock of one experiment directory `base` on filesystem `fs`; use `with lock:` or acquire()/release()."""

    def __init__(self, fs: pafs.FileSystem, base: str, *, command: Optional[str] = None, lease_s: float = LEASE_S,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.fs, self.base = fs, base
        self.path = f"{base}/{LOCK_FILE}"
        self.local = isinstance(fs, pafs.LocalFileSystem)
        self.lease_s, self.heartbeat_s = lease_s, heartbeat_s
        self.command = (command if command is not None else " ".join(sys.argv))[:300]
        self.holder: Optional[LockHolder] = None
        self.lost = False
        """True when another driver took the lock over while this one still ran (it had stalled past the lease)."""
        self.took_over: Optional[str] = None
        """Set to the stale holder's description when acquire() took a dead holder's lock over."""
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ file access
    def _read(self, path: Optional[str] = None) -> tuple[bool, Optional[LockHolder], float]:
        """(exists, holder or None when unreadable, modification time)."""
        path = path or self.path
        if self.local:
            try:
                mtime = os.lstat(path).st_mtime
            except FileNotFoundError:
                return False, None, 0.0
            except OSError as e:
                raise DatasetLocked(f"{path}: the lock file cannot be read ({e.strerror or e})", path, None) from None
            return True, _parse(_read_lock_text(path)), mtime
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return False, None, 0.0
        try:
            with self.fs.open_input_stream(path) as f:
                text = bytes(f.read(LOCK_LIMIT_BYTES + 1)).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        return True, _parse(text), mtime

    def _create(self, holder: LockHolder, path: Optional[str] = None) -> bool:
        """Create the lock file (or `path`) exclusively with `holder`; False when it already exists."""
        path = path or self.path
        data = json.dumps(asdict(holder), sort_keys=True).encode()
        if not self.local:
            if self._read(path)[0]:
                return False
            atomic_write(path, data, fs=self.fs)
            return True
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise write_error(path, e, "create the lock") from e
        try:
            os.write(fd, data)
            os.fsync(fd)
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            raise write_error(path, e, "write the lock") from e
        os.close(fd)
        return True

    def _remove(self, path: str) -> None:
        try:
            if self.local:
                os.unlink(path)
            else:
                self.fs.delete_file(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise write_error(path, e, "remove") from e

    # ------------------------------------------------------------------ acquire / release
    def acquire(self) -> "DatasetLock":
        """Take the lock, taking over a stale one; DatasetLocked naming the holder when it is held."""
        try:
            self.fs.create_dir(self.base, recursive=True)
        except OSError as e:
            raise write_error(self.base, e, "create the experiment directory") from e
        now = time.time()
        me = LockHolder(pid=os.getpid(), host=socket.gethostname(), process_space=process_space(),
                        process_start=process_start(os.getpid()), started_unix_s=now, heartbeat_unix_s=now,
                        command=self.command, token=uuid.uuid4().hex)
        for _ in range(3):
            if self._create(me):
                self.holder = me
                self._start_heartbeat()
                return self
            holder, reason = self._judge()
            if reason is None:
                assert holder is not None
                raise DatasetLocked(
                    f"{self.base} is being written by another sglbench driver ({holder.describe()}); wait for it "
                    f"to finish, or stop it. A holder that is gone is detected and taken over (lock file "
                    f"{self.path})", self.path, holder)
            self._take_over(holder, reason)
        raise DatasetLocked(f"{self.path}: could not take the lock after three tries (other drivers are racing "
                            "for it)", self.path, None)

    def _judge(self) -> tuple[Optional[LockHolder], Optional[str]]:
        """(holder, why it is stale or None while it holds); a lock being written is re-read for a moment."""
        deadline = time.monotonic() + _READ_RETRY_S
        while True:
            exists, holder, mtime = self._read()
            if not exists:
                return None, "it was released"
            if holder is not None:
                return holder, stale_reason(holder, time.time(), self.lease_s)
            if time.time() - mtime > self.lease_s:
                return None, f"its lock file is unreadable and older than the lease ({self.lease_s:.0f} s)"
            if time.monotonic() > deadline:
                raise DatasetLocked(f"{self.path}: the lock file is held but unreadable (written "
                                    f"{time.time() - mtime:.0f} s ago); another driver may be starting",
                                    self.path, None)
            time.sleep(0.05)

    def _take_over(self, holder: Optional[LockHolder], reason: str) -> None:
        if holder is None and reason == "it was released":
            return
        guard = f"{self.path}.takeover"
        if not self._create(_guard_holder(), guard):
            exists, _, mtime = self._read(guard)
            if exists and time.time() - mtime > TAKEOVER_STALE_S:
                self._remove(guard)
            return  # someone else is taking over: try again from the start
        try:
            exists, again, _ = self._read()
            if exists and (again.token if again else None) == (holder.token if holder else None):
                self._remove(self.path)
                self.took_over = f"{holder.describe() if holder else 'unknown holder'} ({reason})"
        finally:
            self._remove(guard)

    def release(self) -> None:
        """Give the lock back (only if this driver still holds it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.holder is None:
            return
        exists, current, _ = self._read()
        if exists and current is not None and current.token == self.holder.token:
            self._remove(self.path)
        self.holder = None

    def __enter__(self) -> "DatasetLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # ------------------------------------------------------------------ heartbeat
    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="sglbench-dataset-lock", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            self.renew()

    def renew(self) -> bool:
        """Write a fresh heartbeat; False (and `lost`) when the lock is no longer this driver's."""
        if self.holder is None:
            return False
        exists, current, _ = self._read()
        if not exists or current is None or current.token != self.holder.token:
            self.lost = True
            self._stop.set()
            return False
        self.holder = LockHolder(**{**asdict(self.holder), "heartbeat_unix_s": time.time()})
        try:
            atomic_write(self.path, json.dumps(asdict(self.holder), sort_keys=True).encode(),
                         fs=None if self.local else self.fs)
        except WriteError:
            pass  # a full disk must not kill the heartbeat: the run's own writes report the error; retried next beat
        return True


def _guard_holder() -> LockHolder:
    now = time.time()
    return LockHolder(pid=os.getpid(), host=socket.gethostname(), process_space=process_space(),
                      process_start=process_start(os.getpid()), started_unix_s=now, heartbeat_unix_s=now,
                      command="take-over guard", token=uuid.uuid4().hex)


__all__ = ["HEARTBEAT_S", "LEASE_S", "LOCK_FILE", "DatasetLock", "DatasetLocked", "LockHolder", "stale_reason"]
