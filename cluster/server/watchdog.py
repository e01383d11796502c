"""Process-group leader for one server: runs it as a child and kills the whole group when its owner dies.

`python -m cluster.server.watchdog OWNER_PID -- ARGV...`. Ray reaps an actor's plain children when the actor
exits cleanly, but a SIGKILLed actor, a crashed raylet or a killed driver can leave a server running with
GPUs held. The watchdog polls its owner's pid; when the owner is gone (or sends SIGTERM) it asks the server alone to
stop (SIGTERM to its main process, which shuts its own children down), then terminates what is left of the process
group — SGLang's per-rank scheduler processes included — then exits with the server's code. A server whose main
process exits on its own gets the same: whatever it left in the group is stopped before the watchdog exits. If the
watchdog itself is SIGKILLed (Ray does that to a dead worker's children), the kernel kills the server through
PR_SET_PDEATHSIG.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Optional

from cluster.server.process import WATCHDOG_MARK, group_members

POLL_S = 0.25
GRACE_S = 10.0
SERVER_GRACE_S = 8.0
"""How long the server's main process gets to stop its own children before the whole group is signalled. SGLang
0.5.23 checks for SIGTERM every 5 s (tokenizer_manager.sigterm_watchdog) and then stops its schedulers itself; a
SIGTERM sent to the whole group instead reaches the scheduler too, which SGLang takes for a crash ("Subprocess
scheduler_0 crashed with exit code -15"): it sleeps 5 s for crash diagnostics, may run py-spy or dump requests, and
the log then names a crash that never happened."""
LEFTOVER_GRACE_S = 5.0
"""How long what is left of a group whose server exited gets after SIGTERM, before SIGKILL."""
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the server (before exec): the kernel SIGKILLs it if this watchdog dies, even by SIGKILL.

    Ray kills a dead worker's direct children with SIGKILL — that is this watchdog, which then cannot react — so
    the server must not depend on the watchdog's cleanup code alone. (Safe as a preexec_fn: the watchdog is
    single-threaded.) SGLang's own per-rank processes watch their parent the same way."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - non-Linux: the owner poll below still applies
        pass


def _owner_alive(owner_pid: int) -> bool:
    if os.getppid() != owner_pid:
        return False
    try:
        os.kill(owner_pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _stop_server(child: "subprocess.Popen[bytes]", grace_s: float) -> None:
    """SIGTERM the server's main process alone and give it grace_s to exit (its own shutdown stops its children)."""
    try:
        child.terminate()
        child.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def _stop_leftovers(grace_s: float) -> None:
    """After the server's main process exited on its own: whatever is left of the group (this watchdog aside) gets
    grace_s to exit by itself, then SIGTERM and grace_s more, then SIGKILL. vLLM's EngineCore and Worker outlived
    their api_server this way (reparented to init, memory held) when nothing killed the group. The first wait is
    for the processes that do exit once their parent is gone: SGLang's schedulers, and multiprocessing's resource
    tracker, which ignores SIGTERM and unlinks leaked shared memory when the last user exits (signalled at once it
    only lost that cleanup, and held the stop 5 s)."""
    me = os.getpid()

    def left() -> list[int]:
        return [p for p in group_members(os.getpgid(0)) if p != me]

    pids = left()
    for sig in (0, signal.SIGTERM, signal.SIGKILL):  # 0: no signal, only the wait
        for pid in pids if sig else ():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = left()
        if not pids:
            return


def _kill_group(grace_s: float) -> None:
    pgid = os.getpgid(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)  # kills this watchdog too, as the last member
    except ProcessLookupError:
        pass


def main(argv: Optional[list[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m cluster.server.watchdog OWNER_PID -- ARGV...", file=sys.stderr)
        return 2
    owner = int(args[0])
    if os.getpid() != os.getpgid(0):
        os.setpgid(0, 0)
    child = subprocess.Popen(args[2:], stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    stop = {"requested": False}

    def on_term(signum: int, frame: object) -> None:
        stop["requested"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while True:
        code = child.poll()
        if code is not None:
            if code < 0:  # a SIGKILLed server writes nothing itself: this line is its log's decisive one
                print(f"{WATCHDOG_MARK} server pid {child.pid} was killed by {signal.Signals(-code).name}",
                      file=sys.stderr, flush=True)
            _stop_leftovers(LEFTOVER_GRACE_S)
            return int(code)
        if stop["requested"] or not _owner_alive(owner):
            _stop_server(child, SERVER_GRACE_S)
            _kill_group(GRACE_S)
            return 143
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
