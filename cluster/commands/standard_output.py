"""Standard output that cannot take what sglbench writes: a closed pipe ends quietly, any other failed write is the
environment's fault (exit 3, one line), never a traceback reported as a bug in sglbench.

A closed pipe (`sglbench --help | head -1`): when standard output's reader has gone, sglbench stops writing and
exits with EXIT_PIPE_CLOSED = 141, the status a shell reports for a command SIGPIPE ended (`yes | head -1`), rather
than click's and rich's 1 (which means "some runs failed" here). The Python default (SIGPIPE ignored, EPIPE raised)
is kept instead of restoring SIGPIPE's default action, which would kill `sglbench run` mid-write without its
cleanup; fd 1 is pointed at /dev/null so the interpreter's flush at exit is silent. An EPIPE from anything else (a
socket to a dead server) is not a closed pipe: it goes through the error tree.

Any other failed write to standard output (`> /dev/full`, a full disk under `> results.csv`, EIO) is
OutputWriteError: the console script's sys.stdout is a CheckedStdout, which names itself when a write fails.
"""

from __future__ import annotations

import errno
import io
import os
import select
import sys
from typing import Optional

from cluster.errors import EnvironmentFault

EXIT_PIPE_CLOSED = 141
"""128 + SIGPIPE: what a shell reports when the reader of a command's output closed the pipe early."""


class OutputWriteError(EnvironmentFault):
    """Standard output refused a write (disk full, I/O error): names it and the system's reason."""


class CheckedStdout(io.TextIOWrapper):
    """sys.stdout over the same buffer, whose failed writes and flushes say they were standard output's: an EPIPE
    stays a BrokenPipeError (the closed-pipe rule decides), anything else is OutputWriteError."""

    def write(self, s: str) -> int:
        try:
            return super().write(s)
        except OSError as e:
            raise _named(e) from e

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as e:
            raise _named(e) from e


def _named(e: OSError) -> OSError | OutputWriteError:
    if e.errno == errno.EPIPE:
        return e
    return OutputWriteError(f"cannot write standard output: {e.strerror or e} (errno {e.errno})")


_replaced: list[io.TextIOWrapper] = []
"""The original sys.stdout objects, kept alive: collected, one would close the buffer they share."""


def check_stdout() -> None:
    """Make sys.stdout a CheckedStdout on the same buffer (nothing to do when fd 1 is closed: sys.stdout is None)."""
    out = sys.stdout
    if not isinstance(out, io.TextIOWrapper) or isinstance(out, CheckedStdout):
        return
    out.flush()
    _replaced.append(out)
    sys.stdout = CheckedStdout(out.buffer, encoding=out.encoding, errors=out.errors,
                               line_buffering=out.line_buffering, write_through=out.write_through)


def fd_identity(fd: int) -> Optional[tuple[int, int]]:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _reader_gone(fd: int) -> bool:
    """The pipe or socket at `fd` has no reader left (poll reports an error or hang-up on a write end)."""
    try:
        p = select.poll()
        p.register(fd, 0)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except (OSError, ValueError):
        return False


def stdout_closed(e: BaseException, stdout_at_start: Optional[tuple[int, int]]) -> bool:
    """`e`, or an exception it came from, is EPIPE, and it was standard output's: its reader is gone, or fd 1 is no
    longer what it was at the start (rich's Console.on_broken_pipe replaced it with /dev/null before exiting 1)."""
    seen: set[int] = set()
    cur: Optional[BaseException] = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError) and cur.errno == errno.EPIPE:
            return _reader_gone(1) or (stdout_at_start is not None and fd_identity(1) != stdout_at_start)
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def silence_stdout() -> int:
    """Point standard output (and standard error when it is the same closed pipe) at /dev/null, so nothing more is
    written to the closed pipe, the interpreter's flush at exit included; EXIT_PIPE_CLOSED."""
    same_pipe = fd_identity(1) is not None and fd_identity(1) == fd_identity(2)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        if same_pipe:
            os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass
    return EXIT_PIPE_CLOSED
