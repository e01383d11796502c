"""How show, compare and recommend print acceptance health (analysis/acceptance_health.py): one line per
speculative variant, a collapsed one followed by the probe's evidence and what to try."""

from __future__ import annotations

from cluster.analysis.acceptance_health import COLLAPSED, acceptance_health, health_lines
from cluster.analysis.results import Results
from cluster.commands.result_tables import clear_errors, console


def print_acceptance_health(results: Results) -> None:
    """Print every speculative variant's acceptance-health lines (nothing for an experiment without speculation)."""
    with clear_errors():
        healths = acceptance_health(results)
    style = ""
    for line in health_lines(healths):
        if not line.startswith("  "):
            style = "red" if f": {COLLAPSED}" in line else ""
        console.print(line, style=style, highlight=False, markup=False)  # wrapped to the terminal
