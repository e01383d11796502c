"""server/process.py: the decisive log line of a failed start, and who holds a listening port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from cluster.server.process import decisive_line, foreign_holder, port_holders

TRACEBACK_TAIL = """INFO 05-01 loading weights
Traceback (most recent call last):
  File "/x/launch_server.py", line 12, in <module>
    raise ValueError("old exception")
ValueError: old exception
INFO retrying
Traceback (most recent call last):
  File "/x/engine.py", line 99, in <module>
    load()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
INFO shutting down
"""


def test_decisive_line_is_the_last_tracebacks_exception() -> None:
    assert decisive_line(TRACEBACK_TAIL) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_decisive_line_finds_a_bind_error_without_traceback() -> None:
    tail = "INFO starting\n[Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address " \
           "already in use\nINFO Waiting for application shutdown.\n"
    assert "address already in use" in (decisive_line(tail) or "")


def test_decisive_line_none_when_the_log_says_nothing() -> None:
    assert decisive_line("INFO starting\nINFO ready\n") is None
    assert decisive_line("") is None


def test_port_held_by_us_and_by_a_stranger() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert [h.pid for h in port_holders(port)] == [os.getpid()]
        assert foreign_holder(port, os.getpgid(0)) is None
        # from the point of view of another process group (a server we launched), this socket is a stranger's
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], process_group=0)
        try:
            msg = foreign_holder(port, child.pid)
        finally:
            child.kill()
            child.wait()
    assert msg is not None and f"port {port}" in msg and f"pid {os.getpid()}" in msg


def test_nothing_listening() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening
        assert "nothing visible listens" in (foreign_holder(port, os.getpgid(0)) or "")


# Recorded from real SGLang 0.5.23 on the CPU after SIGKILL of its sglang::scheduler child mid-window.
SCHEDULER_KILLED_TAIL = """[2026-12-01 09:45:53] Prefill batch, #new-seq: 3, #new-token: 48, #cached-token: 0, token usage: 0.01
[2026-12-01 09:45:53] Subprocess scheduler_0 (pid=8045) crashed with exit code -9. Triggering SIGQUIT for cleanup...
[2026-12-01 09:45:53] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
[2026-12-01 09:45:53] Sleeping 5 seconds before crash diagnostics to let GPU activity settle.
[2026-12-01 09:45:58] No live scheduler processes found; skipping py-spy and CUDA coredump.
[2026-12-01 09:45:58] kill_process_tree called: parent_pid=8034, include_parent=True, pid=8034
"""


def test_decisive_line_names_sglangs_crashed_subprocess() -> None:
    line = decisive_line(SCHEDULER_KILLED_TAIL) or ""
    assert "Subprocess scheduler_0 (pid=8045) crashed with exit code -9" in line


def test_death_reason_carries_the_decisive_line() -> None:
    from cluster.server.process import with_decisive_line

    reason = with_decisive_line("server died during the measured window", SCHEDULER_KILLED_TAIL)
    assert reason.startswith("server died during the measured window: ") and "crashed with exit code -9" in reason
    assert with_decisive_line("server died", "INFO ready\n") == "server died"


def test_the_servers_own_line_wins_over_the_watchdogs_note() -> None:
    tail = SCHEDULER_KILLED_TAIL + "[sglbench watchdog] server pid 8034 was killed by SIGKILL\n"
    assert "crashed with exit code -9" in (decisive_line(tail) or "")
    assert decisive_line("INFO ready\n[sglbench watchdog] server pid 1 was killed by SIGKILL\n") == \
        "[sglbench watchdog] server pid 1 was killed by SIGKILL"


def test_an_old_startup_warning_does_not_outrank_the_watchdogs_note() -> None:
    # recorded: SGLang's main pid SIGKILLed mid-window after serving; its only error-like line is from start-up
    tail = ("[10:09:33] OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses init failed "
            "(ModuleNotFoundError: No module named 'openai_harmony')\n"
            + "[10:09:50] Prefill batch, #new-seq: 1, #new-token: 16\n" * 20
            + "[sglbench watchdog] server pid 7 was killed by SIGKILL\n")
    assert decisive_line(tail) == "[sglbench watchdog] server pid 7 was killed by SIGKILL"


def test_wait_exit(tmp_path: Path) -> None:
    from cluster.server.process import ServerProcess

    sp = ServerProcess([sys.executable, "-c", "import time; time.sleep(0.3)"], dict(os.environ),
                       tmp_path / "log", watchdog=False)
    sp.start()
    assert sp.wait_exit(0.01) is None
    assert sp.wait_exit(30) == 0


def test_a_secret_the_server_prints_never_reaches_its_log_file(tmp_path: Path) -> None:
    """While the server still runs (not only after it stopped), its log holds the mask, never the value."""
    import time

    from cluster.server.process import ServerProcess
    from cluster.config.secrets import mask

    secret = "sk-test-4f3c2a1b"
    code = ("import sys, time; print('server_args=ServerArgs(api_key=%r, port=1)' % sys.argv[1], flush=True); "
            "print('half', end='', flush=True); time.sleep(60)")
    sp = ServerProcess([sys.executable, "-c", code, secret], dict(os.environ), tmp_path / "server.log",
                       redact=frozenset({secret}))
    sp.start()
    try:
        deadline = time.monotonic() + 20
        text = ""
        while mask(secret) not in text and time.monotonic() < deadline:
            time.sleep(0.05)
            text = (tmp_path / "server.log").read_text()
        assert sp.alive()
        assert mask(secret) in text and secret not in text, text
    finally:
        sp.stop(5.0)
    final = (tmp_path / "server.log").read_text()
    assert secret not in final and "\nhalf" in final  # an unterminated line is kept too


SLOW_HEALTH_SERVER = """
import http.server, sys, time

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(1.2)  # SGLang 0.5.23's /health sleeps 1 s before it looks at its probe generation
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_health_answer_that_takes_over_a_second_is_seen(tmp_path: Path) -> None:
    """A /health that answers 200 only after 1.2 s (as SGLang's does once started) ends the wait at its first
    answer: each call's limit is longer than that answer, whatever the poll interval."""
    import time

    from cluster.server.process import ServerProcess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sp = ServerProcess([sys.executable, "-c", SLOW_HEALTH_SERVER, str(port)], dict(os.environ), tmp_path / "log",
                       watchdog=False)
    sp.start()
    try:
        t0 = time.monotonic()
        waited = sp.wait_healthy(f"http://127.0.0.1:{port}", "/health", timeout_s=15.0)
        assert waited < 6.0 and time.monotonic() - t0 < 6.0, waited
    finally:
        sp.stop(5.0)
