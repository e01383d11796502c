"""How `sglbench results` commands write a table: the --format choices (rich table, CSV, markdown, JSON), one
precision per column, and the dataset errors a reading command turns into sglbench's own."""

from __future__ import annotations

import enum
import math
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Optional

import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape

from cluster.commands.terminal import print_table
from cluster.engines.registry import is_simulated
from cluster.errors import EnvironmentFault, UserError

console = Console()
err_console = Console(stderr=True)


class Format(str, enum.Enum):
    table = "table"
    csv = "csv"
    markdown = "markdown"
    json = "json"



@contextmanager
def clear_errors() -> Iterator[None]:
    """A dataset root that cannot be read (missing, permissions, an unreachable bucket) is an EnvironmentFault;
    sglbench's own errors (missing experiment, bad SQL, bad baseline) pass through to the CLI's handler."""
    try:
        yield
    except OSError as e:
        raise EnvironmentFault(f"cannot read the dataset: {e}") from e


class NothingToShow(UserError):
    """The dataset holds nothing the command shows (no run recorded, no capacity search, no per-position
    acceptance): exit 2 with one `error:` line naming the experiment, its root and what is missing."""


def no_runs(experiment: str, root: str, what: str = "runs") -> NothingToShow:
    """The refusal of a command that found no (ok) run of `experiment` under `root`."""
    return NothingToShow(f"no {what} recorded for experiment {experiment!r} under {root!r}", file=root,
                         expected=f"an experiment with {what}")


def nonempty_table(build: Callable[[], pd.DataFrame], nothing: NothingToShow) -> pd.DataFrame:
    """The table `build` makes (a user error printed as one line); `nothing` raised when it is empty."""
    with clear_errors():
        df = build()
    if df.empty:
        raise nothing
    return df


def is_missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def cell_text(v: Any, digits: Optional[int] = None) -> str:
    if is_missing(v):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits if digits is not None else (3 if abs(v) < 10 else 1)}f}"
    return str(v)


def column_texts(values: Any) -> list[str]:
    """One precision per column (from its largest magnitude), so 13.9 never stands beside 8.429."""
    vals = list(values)
    floats = [abs(v) for v in vals if isinstance(v, float) and not is_missing(v)]
    digits = None if not floats else (0 if all(v.is_integer() for v in floats) else
                                      3 if max(floats) < 10 else 2 if max(floats) < 100 else 1)
    return [cell_text(v, digits) for v in vals]


def markdown_text(df: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell_text(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def emit(df: pd.DataFrame, fmt: Format, title: str = "") -> None:
    if fmt is Format.csv:
        typer.echo(df.to_csv(index=False), nl=False)
    elif fmt is Format.json:
        typer.echo(df.to_json(orient="records", indent=2))
    elif fmt is Format.markdown:
        typer.echo(markdown_text(df))
    else:
        cols = [[escape(v) for v in column_texts(df[c])] for c in df.columns]  # text: "[no CI]" is not markup
        print_table(console, [str(c) for c in df.columns], list(zip(*cols)) if cols else [], title=title,
                    right=[pd.api.types.is_numeric_dtype(df[c]) for c in df.columns])


def simulated_note(engines: Iterable[object]) -> str:
    """' (simulated engine)' for a table title over runs (their `engine` column) of which any is simulated, else ''."""
    return " (simulated engine)" if any(is_simulated(str(e)) for e in engines) else ""
