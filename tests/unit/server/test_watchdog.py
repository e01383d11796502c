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
