"""Tables that stay readable at any terminal width (80 columns in a pipe or CI): long cells fold, and a table whose
columns cannot fit side by side prints one block per row instead (as psql's `\\x auto`)."""

from __future__ import annotations

from typing import Optional, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

MAX_WRAPPED_COLUMNS = 5
"""A table wider than the terminal with more columns than this prints vertically: wrapping every one of many cells
onto several lines is harder to read than one block per row."""


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
