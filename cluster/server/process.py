"""One engine server as a plain child process in its own process group: start, health wait, log tail, group kill."""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Mapping, Optional, Sequence

from cluster.engines.http_call import ServerAnswerError, call
from cluster.errors import EngineFault, EnvironmentFault
from cluster.config.secrets import scrub_text


class ServerStartError(EngineFault):
    """The server exited or never became healthy; `log_tail` holds the end of its output, `server_exit_code` its
    exit status. Built as ServerStartError(message, log_tail, exit_code) (EngineFault's signature)."""


class PortNotOwnedError(ServerStartError):
    """Something answered health on the server's port, but the listening socket is not our process group's."""


_DECISIVE = re.compile(r"address already in use|errno \d+|error|exception|fatal|killed|out of memory|"
                       r"no such file|not found|permission denied|traceback|crashed", re.IGNORECASE)
"""`crashed`: real SGLang 0.5.23's line for a dead child, "Subprocess scheduler_0 (pid=…) crashed with exit code -9"."""


WATCHDOG_MARK = "[sglbench watchdog]"
"""How cluster.server.watchdog's own lines in a server log begin."""

OWN_LAST_WORDS = 12
"""How many of the server's last lines may outrank the watchdog's note (see decisive_line)."""


def decisive_line(log_tail: str) -> Optional[str]:
    """The log line that says why a server stopped: the final line of its last traceback, else the last line
    naming an error (bind errors included); None when the log says nothing of the kind. A watchdog note
    (WATCHDOG_MARK, "killed by SIGKILL") gives way to the server's own words about its end, when its last
    OWN_LAST_WORDS lines have some (SGLang's "scheduler_0 … crashed" line comes 5 lines before its main pid dies),
    but not to an old warning from its start-up."""
    lines = [ln.rstrip() for ln in log_tail.splitlines() if ln.strip()]
    own = [ln for ln in lines if not ln.startswith(WATCHDOG_MARK)]
    if len(own) < len(lines):
        last_words = decisive_line("\n".join(own[-OWN_LAST_WORDS:]))
        if last_words is not None:
            return last_words
        lines = [ln for ln in lines if ln.startswith(WATCHDOG_MARK)] or lines
    last_tb = max((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")),
                  default=None)
    if last_tb is not None:
        # the exception line: the first line after the traceback that is not indented (frames are)
        for ln in lines[last_tb + 1:]:
            if not ln.startswith((" ", "\t")):
                return ln[:500]
    for ln in reversed(lines):
        if _DECISIVE.search(ln) and not ln.lstrip().startswith("Traceback"):
            return ln.strip()[:500]
    return None


def with_decisive_line(reason: str, log_tail: str) -> str:
    """A failure reason followed by the server log's decisive line, when the log has one."""
    line = decisive_line(log_tail) if log_tail else None
    return f"{reason}: {line}" if line and line not in reason else reason


@dataclass(frozen=True)
class PortHolder:
    """A listening TCP socket on a port: the pid holding it (None when /proc does not show it to us)."""

    pid: Optional[int]
    name: Optional[str]


def port_holders(port: int) -> list[PortHolder]:
    """Every listening TCP socket (IPv4 and IPv6) on this host's `port`, with its process where visible."""
    import psutil

    out = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
            name = None
            if c.pid is not None:
                try:
                    name = psutil.Process(c.pid).name()
                except psutil.Error:
                    pass
            out.append(PortHolder(c.pid, name))
    return out


def foreign_holder(port: int, pgid: int) -> Optional[str]:
    """None when our process group (pgid) holds every listening socket on `port` (and at least one); else who does,
    as words for an error message."""
    holders = port_holders(port)
    if not holders:
        return f"nothing visible listens on port {port}"
    for h in holders:
        if h.pid is None:
            return f"port {port} is held by a process whose pid is not visible to us (another user?)"
        try:
            group = os.getpgid(h.pid)
        except OSError:
            return f"port {port} is held by pid {h.pid}, which is gone"
        if group != pgid:
            return f"port {port} is held by pid {h.pid}" + (f" ({h.name})" if h.name else "") + \
                f", not by the server we launched (process group {pgid})"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def http_get_json(url: str, timeout_s: float = 5.0, headers: Optional[Mapping[str, str]] = None) -> Any:
    """The JSON a GET answers with, within `timeout_s` in all (engines/http_call.py); a refused call, the deadline,
    a non-200 status or a body that is not JSON raise an EngineFault that says which."""
    reply = call(url, "", headers=dict(headers or {}), timeout_s=timeout_s)
    if reply.status != 200:
        raise ServerAnswerError(f"{reply.what}: expected status 200 with JSON, got {reply.status}: "
                                f"{reply.text()[:200].strip()}")
    return reply.json()


def http_post(url: str, body: bytes, timeout_s: float = 30.0, headers: Optional[Mapping[str, str]] = None
              ) -> tuple[int, str]:
    """(status, body text) of a JSON POST within `timeout_s` in all; an HTTP error status is returned, not raised,
    a call that fails (refused, deadline, malformed answer) raises its EngineFault."""
    reply = call(url, "", method="POST", body=body, headers=dict(headers or {}), timeout_s=timeout_s)
    return reply.status, reply.text()


def http_status(url: str, timeout_s: float = 5.0, method: str = "GET") -> int:
    """The status a call answers with within `timeout_s` in all; 0 when no well-formed answer came."""
    try:
        return call(url, "", method=method, body=b"" if method == "POST" else None, timeout_s=timeout_s).status
    except (EngineFault, EnvironmentFault):
        return 0


def _copy_masked(src: IO[bytes], log_path: Path, secrets: frozenset[str]) -> None:
    """Server output → its log file, each line with the secret values masked, until every writer has closed."""
    with open(log_path, "ab") as log:
        for raw in iter(src.readline, b""):
            text = raw.decode("utf-8", errors="surrogateescape")
            log.write(scrub_text(text, secrets).encode("utf-8", errors="surrogateescape"))
            log.flush()
    src.close()


HEALTH_CALL_TIMEOUT_S = 5.0
"""One health call's own limit. SGLang 0.5.23's /health, once the server is up, runs a one-token generation and
sleeps 1 s before it looks (http_server.py health_generate): a limit near 1 s gave up on nearly every answer, and a
start waited out 20-30 s more of them (a tiny CPU server: up at 11:35:42, seen at 11:36:12)."""


@dataclass
class ServerProcess:
    """A server subprocess. It is never daemonized: same session as its parent, own process group (pgid == pid),
    so `stop()` can kill the whole group (SGLang spawns one scheduler process per TP rank) and Ray still reaps
    it as a plain child if the actor dies first."""

    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    proc: Optional[subprocess.Popen[bytes]] = None
    watchdog: bool = True
    """Run the server under cluster.server.watchdog, which kills the group if this process dies."""
    redact: frozenset[str] = frozenset()
    """Secret values (an --api-key the server prints in its own args line): with any, the server's output reaches
    its log through a pipe, line by line, with each value masked, so no moment exists when the file holds one."""
    _pump: Optional[threading.Thread] = None

    def start(self) -> int:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        argv = list(self.argv)
        if self.watchdog:
            argv = [sys.executable, "-m", "cluster.server.watchdog", str(os.getpid()), "--", *argv]
        try:
            self.proc = subprocess.Popen(
                argv,
                env=dict(self.env),
                stdout=subprocess.PIPE if self.redact else log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                process_group=0,
                close_fds=True,
            )
        finally:
            log.close()
        if self.redact and self.proc.stdout is not None:
            self._pump = threading.Thread(target=_copy_masked, args=(self.proc.stdout, self.log_path, self.redact),
                                          name=f"server-log-{self.proc.pid}", daemon=True)
            self._pump.start()
        return self.proc.pid

    @property
    def pid(self) -> Optional[int]:
        """The process-group leader (the watchdog, or the server itself without one)."""
        return self.proc.pid if self.proc else None

    def server_pid(self, wait_s: float = 5.0) -> Optional[int]:
        """The server process itself (the watchdog's child)."""
        if self.proc is None or not self.watchdog:
            return self.pid
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            kids = children_of(self.proc.pid)
            if kids:
                return kids[0]
            time.sleep(0.02)
        return None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> Optional[int]:
        return self.proc.poll() if self.proc else None

    def wait_exit(self, timeout_s: float) -> Optional[int]:
        """The group leader's exit code once it exits within timeout_s; None while it still runs."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, max_bytes: int = 8000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def wait_healthy(self, base_url: str, health_path: str, timeout_s: float, poll_s: float = 0.2,
                     port: Optional[int] = None) -> float:
        """Block until GET health_path answers 200 and, given `port`, our process group is proven to hold its
        listening socket; return seconds waited. Raises ServerStartError (PortNotOwnedError for a stranger)."""
        t0 = time.monotonic()
        while True:
            if not self.alive():
                tail = self.log_tail()
                line = decisive_line(tail)
                raise ServerStartError(
                    f"server exited with code {self.exit_code()} before becoming healthy"
                    + (f": {line}" if line else f" (log: {self.log_path})"),
                    tail,
                    self.exit_code(),
                    log_line=line,
                )
            if http_status(base_url + health_path, timeout_s=HEALTH_CALL_TIMEOUT_S) == 200:
                stranger = foreign_holder(port, self.proc.pid) if port is not None and self.proc else None
                if stranger is None:
                    return time.monotonic() - t0
                raise PortNotOwnedError(f"health answered on port {port}, but {stranger}", self.log_tail())
            if time.monotonic() - t0 > timeout_s:
                tail = self.log_tail()
                line = decisive_line(tail)
                raise ServerStartError(f"server not healthy after {timeout_s:.0f} s"
                                       + (f" (last log line: {line})" if line else f" (log: {self.log_path})"),
                                       tail, log_line=line)
            time.sleep(poll_s)

    def stop(self, grace_s: float = 15.0) -> Optional[int]:
        """SIGTERM the process group, then SIGKILL after grace_s; returns the exit code."""
        if self.proc is None:
            return None
        kill_group(self.proc.pid, grace_s, self.proc)
        if self._pump is not None:
            self._pump.join(grace_s)  # the group is gone: the pipe is at EOF, the log complete
        return self.proc.poll()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_group(pgid: int, grace_s: float = 15.0, proc: Optional[subprocess.Popen[bytes]] = None) -> None:
    """Terminate every process of a group; used by the actor and, after an actor died, by a cleanup task.

    SIGTERM goes to the group leader first (the watchdog, which asks the server's main process alone to stop: see
    watchdog.SERVER_GRACE_S); the rest of the group gets SIGTERM only if the leader is gone already, and SIGKILL
    whatever is left after grace_s."""
    try:
        os.kill(pgid, signal.SIGTERM)  # the leader's pid is the group id (start_new_session)
    except ProcessLookupError:
        try:
            os.killpg(pgid, signal.SIGTERM)  # no leader (it died): the members themselves
        except ProcessLookupError:
            pass
    except OSError as e:  # pragma: no cover - permission problems are reported, not hidden
        if e.errno != errno.ESRCH:
            raise
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not _group_alive(pgid):
            break
        time.sleep(0.05)
    if _group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def group_members(pgid: int) -> list[int]:
    """Pids whose process group is pgid (Linux /proc scan); used to prove nothing outlived a server."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != b"Z":
                out.append(int(name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def wait_group_gone(pgid: int, timeout_s: float, poll_s: float = 0.1) -> list[int]:
    """Poll until no live process of group pgid is left or timeout_s passes; return the pids still alive."""
    deadline = time.monotonic() + timeout_s
    left = group_members(pgid)
    while left and time.monotonic() < deadline:
        time.sleep(poll_s)
        left = group_members(pgid)
    return left


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
