"""The `sglbench` command line: thin typer app; each command group lives in cluster/commands/<name>.py.

Two things are done here once for every command. Help texts: each command's docstring is reflowed (its line
breaks dropped, blank-line paragraphs kept; a paragraph starting with click's `\\b` stays verbatim) and ends with
an example (EXAMPLES, unless the docstring has its own "Example:"), so no help line breaks mid-sentence at any
width. A closed pipe (`sglbench --help | head -1`): when standard output's reader has gone, sglbench stops writing
and exits quietly with EXIT_PIPE_CLOSED = 141, the status a shell reports for a command SIGPIPE ended (`yes | head`),
rather than click's 1 (which means "some runs failed" here) or a traceback. The Python default (SIGPIPE ignored,
BrokenPipeError raised) is kept instead of restoring SIGPIPE's default action, which would kill `sglbench run`
mid-write without its cleanup; standard output is pointed at /dev/null so the interpreter's flush at exit is silent.
An EPIPE from anything else (a socket to a dead server) is not a closed pipe and goes through the error tree.
"""

from __future__ import annotations

import errno
import importlib
import inspect
import os
import select
import sys
from typing import Any, NoReturn, Optional

import typer
from typer.core import TyperGroup

from cluster.errors import EXIT_BUG, EXIT_ENGINE, EXIT_ENVIRONMENT, EXIT_USER_ERROR, report_error

EXIT_PIPE_CLOSED = 141
"""128 + SIGPIPE: what a shell reports when the reader of a command's output closed the pipe early."""

EPILOG = (f"Exit codes: 0 ok; 1 some runs failed (or a smoke check missed); {EXIT_USER_ERROR} bad input (the "
          f"message names file, field and what was expected); {EXIT_ENVIRONMENT} the machine or cluster cannot do "
          f"it; {EXIT_ENGINE} an engine server did not start or died; {EXIT_BUG} a bug in sglbench (traceback printed); "
          f"{EXIT_PIPE_CLOSED} the reader of the output closed the pipe (as 128 + SIGPIPE).")

EXAMPLES: dict[str, str] = {
    "": "sglbench run experiments/demo-sim.yaml",
    "validate": "sglbench validate experiments/demo-sim.yaml",
    "plan": "sglbench plan experiments/demo-sim.yaml --port 30000",
    "run": "sglbench run experiments/demo-sim.yaml --output results",
    "probe": "sglbench probe /models/Qwen3.5-397B-A17B-NVFP4 --json",
    "submit": "sglbench submit experiments/demo-sim.yaml --address http://127.0.0.1:8265 --output results",
    "smoke": "sglbench smoke http://127.0.0.1:30000 --timeout 30",
    "schema": "sglbench schema > schema/experiment.schema.json",
    "sim-server": "sglbench sim-server --model-path sim://qwen3.5 --port 30000",
    "results": "sglbench results compare demo-sim --ci",
    "results compare": "sglbench results compare demo-sim --ci --root results",
    "results regress": "sglbench results regress demo-sim demo-sim-new --max-slowdown 5%",
    "results list": "sglbench results list --root results",
    "results show": "sglbench results show demo-sim",
    "results query": 'sglbench results query demo-sim "SELECT variant, count(*) FROM requests GROUP BY variant"',
    "results capacity": "sglbench results capacity capacity-sim --baseline baseline",
    "results report": "sglbench results report demo-sim --out report",
}
"""One runnable example per command path (tests/unit/commands/test_cli_hygiene.py parses each against its
command's own parameters); a new command without one fails that test."""


def reflow(doc: str) -> str:
    """A docstring as help text: dedented, each blank-line-separated paragraph joined into one line (its line breaks
    were the source file's, not the sentence's), a paragraph starting with click's \\b marker kept as written."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs if p.strip())


def with_example(doc: str, path: str) -> str:
    """The reflowed help of the command at `path` (space-separated names; "" for the top level) and its example."""
    text = reflow(doc)
    example = EXAMPLES.get(path)
    return text if example is None or "Example:" in text else f"{text}\n\nExample: {example}"


def _prepare_help(cmd: Any, path: str = "") -> None:
    """Reflow every command's help and give it its example, through the whole command tree (idempotent)."""
    if getattr(cmd, "_sglbench_help", False):
        return
    cmd.help = with_example(cmd.help or "", path)
    cmd._sglbench_help = True
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        _prepare_help(sub, f"{path} {name}".strip())


def _fd_identity(fd: int) -> Optional[tuple[int, int]]:
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


_stdout_at_start: Optional[tuple[int, int]] = None
"""What fd 1 was when the command started: rich, on a broken pipe, points fd 1 at /dev/null and exits 1."""


def _stdout_closed(e: BaseException) -> bool:
    """`e`, or an exception it came from, is EPIPE, and it was standard output's: its reader is gone, or fd 1 is no
    longer what it was at the start (rich's Console.on_broken_pipe replaced it with /dev/null before exiting 1)."""
    seen: set[int] = set()
    cur: Optional[BaseException] = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError) and cur.errno == errno.EPIPE:
            return _reader_gone(1) or (_stdout_at_start is not None and _fd_identity(1) != _stdout_at_start)
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _silence_stdout() -> int:
    """Point standard output (and standard error when it is the same closed pipe) at /dev/null, so nothing more is
    written to the closed pipe, the interpreter's flush at exit included; EXIT_PIPE_CLOSED."""
    same_pipe = _fd_identity(1) is not None and _fd_identity(1) == _fd_identity(2)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        if same_pipe:
            os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass
    return EXIT_PIPE_CLOSED


class _Group(TyperGroup):
    """Every command runs inside one handler: sglbench's own errors print one line and exit with their code; a
    closed standard output ends quietly with EXIT_PIPE_CLOSED; anything else is a bug in sglbench, printed with
    its traceback (exit code 70)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        global _stdout_at_start
        _prepare_help(self)
        _stdout_at_start = _fd_identity(1)
        try:
            return super().main(*args, **kwargs)
        except SystemExit as e:  # click (a help text) and rich (any console) turn EPIPE into exit 1
            if e.code == 1 and _stdout_closed(e):
                raise SystemExit(_silence_stdout()) from None
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # typer's own exits and usage errors
            raise
        except Exception as e:  # noqa: BLE001 - the error tree maps to exit codes; anything else is a bug
            if _stdout_closed(e):
                raise typer.Exit(_silence_stdout()) from None
            raise typer.Exit(report_error(e, sys.stderr)) from None


app = typer.Typer(cls=_Group, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Benchmark SGLang server variants on a Ray cluster.", epilog=EPILOG)

COMMAND_MODULES = ("run", "sim_server", "probe", "results", "submit", "smoke", "schema", "init", "doctor")
"""Each module under cluster/commands/ exposes `register(app)`; a missing one is an ImportError, never skipped."""


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"cluster.commands.{name}").register(app)


_register()


def main() -> NoReturn:
    """The console script: run the app, then flush standard output here, where a closed pipe can still end quietly
    (left to the interpreter's exit, the flush prints "Exception ignored ... BrokenPipeError" and exits 120)."""
    code: Any = 0
    try:
        app()
    except SystemExit as e:
        code = e.code
    try:
        sys.stdout.flush()
    except OSError as e:
        if not _stdout_closed(e):
            raise
        code = _silence_stdout()
    sys.exit(code)


if __name__ == "__main__":
    main()
