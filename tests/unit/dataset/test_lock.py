"""The experiment dataset's lock: a held lock refuses a second driver naming the holder, a dead or silent holder is
taken over, release gives it back only if it is still ours, and exclusive() clears what a crashed writer left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from cluster.dataset.lock import LOCK_FILE, DatasetLock, DatasetLocked, LockHolder, process_space, process_start
from cluster.dataset.store import DatasetStore
from cluster.errors import EnvironmentFault
from cluster.plan.runs import make_plan
from cluster.config.loader import parse_spec_text
from cluster.kernel.run_row import RunRow

HOLD = ("import sys, time\nfrom pyarrow.fs import LocalFileSystem\nfrom cluster.dataset.lock import DatasetLock\n"
        "DatasetLock(LocalFileSystem(), sys.argv[1], command='sglbench run other.yaml').acquire()\n"
        "print('held', flush=True)\ntime.sleep(120)\n")


def _lock(base: Path, lease_s: float = 120.0, heartbeat_s: float = 20.0) -> DatasetLock:
    return DatasetLock(pafs.LocalFileSystem(), str(base), command="sglbench run me.yaml", lease_s=lease_s,
                       heartbeat_s=heartbeat_s)


def _plant(base: Path, **over: object) -> LockHolder:
    now = time.time()
    fields: dict[str, object] = {"pid": os.getpid(), "host": "here", "process_space": process_space(),
                                 "process_start": process_start(os.getpid()), "started_unix_s": now - 60,
                                 "heartbeat_unix_s": now, "command": "sglbench run planted.yaml", "token": "t0"}
    h = LockHolder(**{**fields, **over})  # type: ignore[arg-type]
    base.mkdir(parents=True, exist_ok=True)
    (base / LOCK_FILE).write_text(json.dumps(asdict(h)))
    return h


def test_held_lock_refuses_naming_the_holder(tmp_path: Path) -> None:
    base = tmp_path / "exp"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(base)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(DatasetLocked) as ei:
            _lock(base).acquire()
        err = ei.value
        assert isinstance(err, EnvironmentFault)
        msg = str(err)
        assert f"pid {proc.pid}" in msg and "sglbench run other.yaml" in msg and "started 20" in msg
        assert os.uname().nodename in msg and str(base) in msg
        assert err.holder is not None and err.holder.pid == proc.pid
        # a holder killed without a chance to clean up: its lock is taken over, not waited on
        proc.kill()
        proc.wait(10)
        lock = _lock(base).acquire()
        assert lock.took_over is not None and f"pid {proc.pid}" in lock.took_over
        assert "no longer running" in lock.took_over
        assert json.loads((base / LOCK_FILE).read_text())["pid"] == os.getpid()
        lock.release()
        assert not (base / LOCK_FILE).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_own_process_holding_is_refused_too(tmp_path: Path) -> None:
    with _lock(tmp_path / "exp"):
        with pytest.raises(DatasetLocked, match="sglbench run me.yaml"):
            _lock(tmp_path / "exp").acquire()
    _lock(tmp_path / "exp").acquire().release()


def test_pid_reused_by_another_process_is_stale(tmp_path: Path) -> None:
    if process_start(os.getpid()) is None:
        pytest.skip("no /proc: pid reuse cannot be told apart")
    _plant(tmp_path, process_start="1")  # our pid, but a process that started at another time
    lock = _lock(tmp_path).acquire()
    assert lock.took_over is not None and "another process" in lock.took_over
    lock.release()


def test_other_host_holds_until_its_lease_expires(tmp_path: Path) -> None:
    _plant(tmp_path, process_space="elsewhere|boot|ns", host="node-7", heartbeat_unix_s=time.time() - 5)
    with pytest.raises(DatasetLocked, match="host node-7"):
        _lock(tmp_path, lease_s=60).acquire()
    _plant(tmp_path, process_space="elsewhere|boot|ns", host="node-7", heartbeat_unix_s=time.time() - 61)
    lock = _lock(tmp_path, lease_s=60).acquire()
    assert lock.took_over is not None and "lease" in lock.took_over
    lock.release()


def test_heartbeat_renews_and_notices_a_take_over(tmp_path: Path) -> None:
    lock = _lock(tmp_path, heartbeat_s=0.05).acquire()
    first = json.loads((tmp_path / LOCK_FILE).read_text())["heartbeat_unix_s"]
    deadline = time.monotonic() + 20
    while json.loads((tmp_path / LOCK_FILE).read_text())["heartbeat_unix_s"] == first:
        assert time.monotonic() < deadline, "the heartbeat thread never renewed the lock"
        time.sleep(0.05)
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()

    lock = _lock(tmp_path, heartbeat_s=3600).acquire()  # renewed by hand below, so the test has no race
    assert lock.renew() and not lock.lost
    _plant(tmp_path, token="someone-else")  # another driver took it over (this one had stalled past the lease)
    assert not lock.renew() and lock.lost
    assert json.loads((tmp_path / LOCK_FILE).read_text())["token"] == "someone-else", "never overwritten"
    lock.release()
    assert (tmp_path / LOCK_FILE).exists(), "release leaves a lock that is no longer ours"


def test_unreadable_lock(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("")  # a driver between create and write, or one that died there
    with pytest.raises(DatasetLocked, match="unreadable"):
        _lock(tmp_path).acquire()
    old = time.time() - 600
    os.utime(tmp_path / LOCK_FILE, (old, old))
    lock = _lock(tmp_path, lease_s=120).acquire()
    assert lock.took_over is not None
    lock.release()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", b"[" * 100000, b'{"pid": "x"}', b"[1, 2]",
                                     b"9" * 5000])
def test_malformed_lock_is_unreadable_never_a_traceback(tmp_path: Path, content: bytes) -> None:
    (tmp_path / LOCK_FILE).write_bytes(content)
    with pytest.raises(DatasetLocked, match="unreadable"):
        _lock(tmp_path).acquire()
    old = time.time() - 600
    os.utime(tmp_path / LOCK_FILE, (old, old))
    lock = _lock(tmp_path, lease_s=120).acquire()  # an unreadable lock past the lease is taken over
    assert lock.took_over is not None
    lock.release()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("over", [{"pid": 10 ** 30}, {"pid": -1}, {"pid": True}, {"started_unix_s": "yesterday"},
                                  {"heartbeat_unix_s": None}, {"command": 7}])
def test_lock_holder_with_wrong_types_is_unreadable(tmp_path: Path, over: dict[str, object]) -> None:
    now = time.time()
    doc: dict[str, object] = {"pid": os.getpid(), "host": "h", "process_space": "elsewhere", "process_start": None,
                              "started_unix_s": now, "heartbeat_unix_s": now, "command": "c", "token": "t"}
    (tmp_path / LOCK_FILE).write_text(json.dumps({**doc, **over}))
    with pytest.raises(DatasetLocked, match="unreadable"):
        _lock(tmp_path).acquire()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "dir", "loop"])
def test_lock_path_that_is_not_a_file_is_named_and_never_hangs(tmp_path: Path, kind: str) -> None:
    path = tmp_path / LOCK_FILE
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    else:
        path.symlink_to(path)
    with pytest.raises(DatasetLocked) as info:
        _lock(tmp_path).acquire()
    assert info.value.path == str(path) and str(path) in str(info.value)


def test_exclusive_clears_a_crashed_writer_and_releases_on_error(tmp_path: Path) -> None:
    spec = parse_spec_text("""
version: 1
name: e
model: {path: sim://m, engine: sim}
variants: [{name: base, baseline: true}]
workloads: [{name: w, input_tokens: 4, output_tokens: 4, num_requests: 2}]
load: {concurrency: [1, 2]}
""")
    p0, p1 = make_plan(spec)[:2]
    store = DatasetStore(str(tmp_path), "e")
    store.write_run(p0, RunRow(status="ok"))
    exp = tmp_path / "e"
    # what a writer killed mid-commit (or an older version) leaves behind
    (exp / "_staging" / f"{p1.run_key}.abc").mkdir(parents=True)
    (exp / "_staging" / f"{p1.run_key}.abc" / "requests.parquet").write_bytes(b"PAR1 partial")
    orphan = exp / "server_metrics" / "variant=base" / f"{p1.run_key}.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"PAR1")
    tmp = exp / "runs" / "variant=base" / f".{p1.run_key}.parquet.dead.tmp"
    tmp.write_bytes(b"PAR1")
    with pytest.raises(RuntimeError, match="boom"):
        with store.exclusive(command="test"):
            assert (exp / LOCK_FILE).exists()
            assert not orphan.exists() and not tmp.exists() and list((exp / "_staging").iterdir()) == []
            assert store.committed_run_keys() == {p0.run_key}
            raise RuntimeError("boom")
    assert not (exp / LOCK_FILE).exists()


def test_object_store_lock_is_best_effort_but_refuses_a_live_holder() -> None:
    fs = pafs._MockFileSystem()
    held = DatasetLock(fs, "bucket/exp", command="first").acquire()
    with pytest.raises(DatasetLocked, match="first"):
        DatasetLock(fs, "bucket/exp", command="second").acquire()
    held.release()
    DatasetLock(fs, "bucket/exp", command="second").acquire().release()
