"""The `sglbench` command line: thin typer app; each command group lives in cluster/commands/<name>.py.

Two things are done here once for every command. Help texts: each command's docstring is reflowed (its line
breaks dropped, blank-line paragraphs kept; a paragraph starting with click's `\\b` stays verbatim) and ends with
an example (EXAMPLES, unless the docstring has its own "Example:"), so no help line breaks mid-sentence at any
width. Standard output that cannot be written (cluster/commands/standard_output.py): a closed pipe
(`sglbench --help | head -1`) ends quietly with EXIT_PIPE_CLOSED = 141, any other failed write (`> /dev/full`) is
an environment error (exit 3, one line), neither a traceback reported as a bug.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any, NoReturn, Optional

import typer
from typer.core import TyperGroup

from cluster.commands.standard_output import (EXIT_PIPE_CLOSED, OutputWriteError, check_stdout, fd_identity,
                                              silence_stdout, stdout_closed)
from cluster.commands.terminal import sane_terminal_size
from cluster.errors import (EXIT_BUG, EXIT_ENGINE, EXIT_ENVIRONMENT, EXIT_USER_ERROR, SglbenchError, report_error)

sane_terminal_size(os.environ)  # before the commands' module-level consoles read COLUMNS (rich does at creation)

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
    "results recommend": "sglbench results recommend demo-sim --format table",
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


_stdout_at_start: Optional[tuple[int, int]] = None
"""What fd 1 was when the command started: rich, on a broken pipe, points fd 1 at /dev/null and exits 1."""


def _output_failed(e: BaseException) -> Optional[int]:
    """The exit code when `e` is standard output failing (closed pipe: quiet 141; a refused write: its one-line
    error, exit 3), None when it is anything else."""
    if stdout_closed(e, _stdout_at_start):
        return silence_stdout()
    if isinstance(e, OutputWriteError):
        code = report_error(e, sys.stderr)
        silence_stdout()  # what is still buffered would fail again in the interpreter's flush at exit
        return code
    return None


class _Group(TyperGroup):
    """Every command runs inside one handler: sglbench's own errors print one line and exit with their code; a
    closed standard output ends quietly with EXIT_PIPE_CLOSED; anything else is a bug in sglbench, printed with
    its traceback (exit code 70)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        global _stdout_at_start
        _prepare_help(self)
        _stdout_at_start = fd_identity(1)
        try:
            return super().main(*args, **kwargs)
        except SystemExit as e:  # click (a help text) and rich (any console) turn EPIPE into exit 1
            code = _output_failed(e) if e.code == 1 else None
            if code is None:
                raise
            raise SystemExit(code) from None
        except OutputWriteError as e:  # a help text, printed before any command is invoked
            raise SystemExit(_output_failed(e)) from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # typer's own exits and usage errors
            raise
        except Exception as e:  # noqa: BLE001 - the error tree maps to exit codes; anything else is a bug
            code = _output_failed(e)
            raise typer.Exit(report_error(e, sys.stderr) if code is None else code) from None


app = typer.Typer(cls=_Group, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Benchmark SGLang server variants on a Ray cluster.", epilog=EPILOG)

COMMAND_MODULES = ("run", "sim_server", "probe", "results", "submit", "smoke", "schema", "init", "doctor")
"""Each module under cluster/commands/ exposes `register(app)`; a missing one is an ImportError, never skipped."""


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"cluster.commands.{name}").register(app)


_register()


def main() -> NoReturn:
    """The console script: standard output checked (its failed writes name it), the app, then a flush of standard
    output here, where a failure can still end as its rule says (left to the interpreter's exit, the flush prints
    "Exception ignored ..." and exits 120)."""
    check_stdout()
    code: Any = 0
    try:
        app()
    except SystemExit as e:
        code = e.code
    try:
        if sys.stdout is not None:  # None: fd 1 was closed at start (`>&-`), nothing was written
            sys.stdout.flush()
    except (OSError, SglbenchError) as e:
        failed = _output_failed(e)
        if failed is None:
            raise
        code = failed
    sys.exit(code)


if __name__ == "__main__":
    main()
