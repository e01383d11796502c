"""How show, compare and recommend print acceptance health (analysis/acceptance_health.py): one line per
speculative variant, a collapsed one followed by the probe's evidence and what to try; in `--format json`, each
row's (workload, variant) verdict under the key `acceptance_health` (recommend: one list under that key)."""

from __future__ import annotations

import pandas as pd

from cluster.analysis.acceptance_health import (COLLAPSED, AcceptanceHealth, acceptance_health, health_json,
                                                health_lines)
from cluster.analysis.results import Results
from cluster.commands.result_tables import clear_errors, console

HEALTH_KEY = "acceptance_health"


def healths_of(results: Results) -> list[AcceptanceHealth]:
    """Every speculative variant's verdict (none for an experiment without speculation), read errors made clear."""
    with clear_errors():
        return acceptance_health(results)


def print_acceptance_health(results: Results) -> None:
    """Print every speculative variant's acceptance-health lines (nothing for an experiment without speculation)."""
    style = ""
    for line in health_lines(healths_of(results)):
        if not line.startswith("  "):
            style = "red" if f": {COLLAPSED}" in line else ""
        console.print(line, style=style, highlight=False, markup=False)  # wrapped at the width (80 columns piped)


def with_health_column(df: pd.DataFrame, results: Results) -> pd.DataFrame:
    """`df` (rows with workload and variant) with the column HEALTH_KEY: its variant's verdict (health_json), or
    None (a variant not judged at all: no speculation, no histogram)."""
    by_key = {(h.workload, h.variant): health_json(h) for h in healths_of(results)}
    out = df.copy()
    out[HEALTH_KEY] = [by_key.get((w, v)) for w, v in zip(out["workload"], out["variant"])]
    return out
