"""server/watchdog.py: a server killed by a signal leaves a line in its own log saying so (its decisive line)."""

from __future__ import annotations

import os
import subprocess
import sys

from cluster.server.process import decisive_line


def _watch(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cluster.server.watchdog", str(os.getpid()), "--", sys.executable,
                           "-c", code], capture_output=True, text=True, timeout=60)


def test_server_killed_by_a_signal_is_logged() -> None:
    # a SIGKILLed server writes nothing itself (real SGLang's main pid, measured): the watchdog says what happened
    done = _watch("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert done.returncode != 0
    line = decisive_line(done.stdout + done.stderr) or ""
    assert "killed by SIGKILL" in line and "server pid" in line


def test_clean_exit_logs_nothing() -> None:
    done = _watch("print('bye')")
    assert done.returncode == 0 and "watchdog" not in done.stderr


# A server with one child in its process group, like SGLang's main process and its scheduler: the main process, on
# SIGTERM, tells its child to stop (SIGUSR1) and exits; a SIGTERM reaching the child directly is recorded.
FAMILY = r"""
import os, signal, subprocess, sys, time
notes = sys.argv[1]
def note(s):
    with open(notes, "a") as f:
        f.write(s + "\n")
child_code = '''
import signal, sys, time
notes = sys.argv[1]
def note(s):
    with open(notes, "a") as f:
        f.write(s + "\\n")
signal.signal(signal.SIGTERM, lambda *a: (note("child got SIGTERM from outside"), sys.exit(1)))
signal.signal(signal.SIGUSR1, lambda *a: (note("child stopped by its parent"), sys.exit(0)))
note("child up")
while True:
    time.sleep(0.05)
'''
child = subprocess.Popen([sys.executable, "-c", child_code, notes])
def on_term(*a):
    note("main got SIGTERM")
    child.send_signal(signal.SIGUSR1)
    child.wait(10)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(0.05)
"""


def test_stop_asks_the_server_alone_and_lets_it_stop_its_children(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ServerProcess.stop SIGTERMs the watchdog, which SIGTERMs the server's main process only: before, the whole
    group got it at once and SGLang's scheduler died of a SIGTERM its parent took for a crash (5 s of crash
    diagnostics per stop, and "scheduler_0 crashed with exit code -15" in every log)."""
    import time

    from cluster.server.process import ServerProcess, wait_group_gone

    notes = tmp_path / "notes"
    sp = ServerProcess([sys.executable, "-c", FAMILY, str(notes)], dict(os.environ), tmp_path / "server.log")
    sp.start()
    deadline = time.monotonic() + 30
    while "child up" not in (notes.read_text() if notes.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    sp.stop(grace_s=15)
    took_s = time.monotonic() - t0
    assert wait_group_gone(sp.pid or 0, 5.0, poll_s=0.1) == []
    got = notes.read_text().splitlines()
    assert got == ["child up", "main got SIGTERM", "child stopped by its parent"], got
    assert took_s < 5, f"a server that stops at once took {took_s:.1f} s to stop"


# A server whose main process exits (crash, or a stop it does not pass on) and leaves a child of its process group
# running, as vLLM's api_server left its EngineCore and Worker when it died (found when an interrupted test run left
# both holding 1.7 GB for minutes, reparented to init).
ORPHANING = r"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
print(child.pid, flush=True)
sys.exit(3)
"""


def test_a_server_that_exits_leaves_nothing_of_its_group_behind() -> None:
    import time

    from cluster.server.process import wait_group_gone

    proc = subprocess.Popen([sys.executable, "-m", "cluster.server.watchdog", str(os.getpid()), "--", sys.executable,
                             "-c", ORPHANING], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        leftover = int((proc.stdout.readline() if proc.stdout else "0").strip())
        assert proc.wait(timeout=30) == 3, "the watchdog exits with the server's own code"
        assert wait_group_gone(proc.pid, 5.0, poll_s=0.1) == [], "the server's child outlived it"
    finally:
        try:
            os.killpg(proc.pid, 9)  # this test's own session: whatever the watchdog left
        except ProcessLookupError:
            pass
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{leftover}") or "Z" in open(f"/proc/{leftover}/stat").read().split()[2]


# A leftover that exits by itself once its parent is gone and ignores SIGTERM, as multiprocessing's resource tracker
# does: it is left to finish (and to do its cleanup), never signalled.
LEFTOVER = (
    "import os, signal, sys, time\n"
    "notes = sys.argv[1]\n"
    "signal.signal(signal.SIGTERM, lambda *a: open(notes, 'a').write('got SIGTERM\\n'))\n"
    "t0, parent = time.monotonic(), int(sys.argv[2])\n"
    "while os.getppid() == parent and time.monotonic() - t0 < 60:  # until its parent is gone\n"
    "    time.sleep(0.05)\n"
    "time.sleep(0.5)\n"
    "open(notes, 'a').write('exited by itself\\n')\n"
)
SELF_EXITING = (
    "import os, subprocess, sys\n"
    f"child = subprocess.Popen([sys.executable, '-c', {LEFTOVER!r}, sys.argv[1], str(os.getpid())])\n"
    "sys.exit(0)\n"
)


def test_a_leftover_that_exits_by_itself_is_not_signalled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from cluster.server.process import wait_group_gone

    notes = tmp_path / "notes"
    proc = subprocess.Popen([sys.executable, "-m", "cluster.server.watchdog", str(os.getpid()), "--", sys.executable,
                             "-c", SELF_EXITING, str(notes)], start_new_session=True)
    try:
        assert proc.wait(timeout=30) == 0
        assert wait_group_gone(proc.pid, 5.0, poll_s=0.1) == []
    finally:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    assert notes.read_text().splitlines() == ["exited by itself"]
