"""Tables that stay readable at any terminal width (80 columns in a pipe or CI): long cells fold, and a table whose
columns cannot fit side by side prints one block per row instead (as psql's `\\x auto`); a width setting that
makes no sense falls back to a sane one."""

from __future__ import annotations

from typing import MutableMapping, Optional, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

MAX_WRAPPED_COLUMNS = 5
"""A table wider than the terminal with more columns than this prints vertically: wrapping every one of many cells
onto several lines is harder to read than one block per row."""


MIN_COLUMNS = 20
"""Narrower than this, rich prints tables and help one or two letters a line: nothing can be read."""
MAX_COLUMNS = 1000
"""Wider than any screen; rich pads every help line to the width (COLUMNS=10^7 wrote 340 MB of --help)."""
WIDTH_SETTINGS = ("COLUMNS", "TERMINAL_WIDTH", "LINES")
"""What rich (COLUMNS, LINES) and typer's help (TERMINAL_WIDTH) read for the terminal's size."""


def sane_terminal_size(environ: MutableMapping[str, str]) -> None:
    """Make the terminal size settings in `environ` usable before any console reads them: one that is not a whole
    number above 0 is dropped (the terminal's own size is used, 80 columns in a pipe), as rich already drops a
    non-number; a width outside MIN_COLUMNS..MAX_COLUMNS is held to the nearer bound. Before, COLUMNS=0 or
    TERMINAL_WIDTH=-5 made `results list` and `--help` print nothing and exit 0, TERMINAL_WIDTH=abc was a
    traceback inside typer. Presentation only, so no warning: a CI that exports COLUMNS=0 would get one per call."""
    for name in WIDTH_SETTINGS:
        raw = environ.get(name)
        if raw is None:
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if value <= 0:
            del environ[name]
        elif name != "LINES" and not MIN_COLUMNS <= value <= MAX_COLUMNS:
            environ[name] = str(min(max(value, MIN_COLUMNS), MAX_COLUMNS))


def print_table(console: Console, columns: Sequence[str], rows: Sequence[Sequence[str]], *, title: str = "",
                right: Sequence[bool] = (), table: Optional[Table] = None) -> None:
    """Print rows as a table whose cells fold rather than being cut with '…'; print them vertically (a heading
    line from the first two cells, then `column: value` lines) when more than MAX_WRAPPED_COLUMNS columns cannot
    fit the console's width side by side."""
    t = table or Table(title=title or None, title_justify="left")
    for i, col in enumerate(columns):
        t.add_column(col, justify="right" if i < len(right) and right[i] else "left", overflow="fold")
    for row in rows:
        t.add_row(*row)
    width = console.width
    m = Measurement.get(console, console.options.update_width(100_000), t)  # unclamped: what the table wants
    if m.maximum <= width or len(columns) <= MAX_WRAPPED_COLUMNS:  # a few columns wrap (and fold long words)
        console.print(t)
        return
    heading = title or (str(t.title) if t.title else "")  # a passed table carries its own title
    if heading:
        console.print(heading, highlight=False)
    label = max((len(c) for c in columns[2:]), default=0)
    for row in rows:
        console.print(f"── {' · '.join(str(c) for c in row[:2])}", highlight=False, style="bold")
        for col, cell in zip(columns[2:], row[2:]):
            console.print(f"   {col:<{label}}  {cell}", highlight=False)
