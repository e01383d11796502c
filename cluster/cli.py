"""The `sglbench` command line: thin typer app; each command group lives in cluster/commands/<name>.py."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from cluster.errors import EXIT_BUG, EXIT_ENGINE, EXIT_ENVIRONMENT, EXIT_USER_ERROR, report_error

EPILOG = (f"Exit codes: 0 ok; 1 some runs failed (or a smoke check missed); {EXIT_USER_ERROR} bad input (the "
          f"message names file, field and what was expected); {EXIT_ENVIRONMENT} the machine or cluster cannot do "
          f"it; {EXIT_ENGINE} an engine server did not start or died; {EXIT_BUG} a bug in sglbench (traceback printed).")


class _Group(TyperGroup):
    """Every command runs inside one handler: sglbench's own errors print one line and exit with their code;
    anything else is a bug in sglbench, printed with its traceback (exit code 70)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # typer's own exits and usage errors
            raise
        except Exception as e:  # noqa: BLE001 - the error tree maps to exit codes; anything else is a bug
            raise typer.Exit(report_error(e, sys.stderr)) from None


app = typer.Typer(cls=_Group, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Benchmark SGLang server variants on a Ray cluster.", epilog=EPILOG)

COMMAND_MODULES = ("run", "sim_server", "probe", "results", "submit", "smoke", "schema", "init", "doctor")
"""Each module under cluster/commands/ exposes `register(app)`; a missing one is an ImportError, never skipped."""


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"cluster.commands.{name}").register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
