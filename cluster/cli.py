"""The `sglbench` command line: thin typer app; each command group lives in cluster/commands/<name>.py."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Benchmark SGLang server variants on a Ray cluster.")

COMMAND_MODULES = ("run", "sim_server", "probe", "results", "submit", "smoke", "tune")
"""Each module under cluster/commands/ exposes `register(app)`; a module that does not exist yet is skipped."""


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"cluster.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"cluster.commands.{name}":
                continue
            raise
        mod.register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
