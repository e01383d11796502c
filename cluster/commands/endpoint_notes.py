"""The lines `results show` and `compare` print under their tables about the deployments: each variant that is an
endpoint already running (its URL, and that sglbench did not launch it, so its GPUs and argv are not sglbench's to
state), and compare's note when the deployments it compares hold different GPU counts."""

from __future__ import annotations

import pandas as pd

from cluster.analysis.per_gpu import note_lines
from cluster.analysis.results import Results


def endpoint_lines(results: Results) -> list[str]:
    """One line per endpoint variant of the experiment's runs (none for a dataset written before endpoints)."""
    runs = results.runs_table()
    if "launched_by_sglbench" not in runs.column_names:
        return []
    seen: dict[str, str] = {}
    for r in runs.select(["variant", "launched_by_sglbench", "endpoint_url"]).to_pylist():
        if r["launched_by_sglbench"] is False:
            seen.setdefault(str(r["variant"]), str(r["endpoint_url"]))
    return [f"{v}: endpoint {url}, already running, not launched by sglbench (its argv and GPUs are not known "
            "here; its /server_info and /v1/models answers are in each run's provenance)" for v, url in sorted(seen.items())]


def print_endpoints(results: Results) -> None:
    """Under `show` and `compare` (tables), what the deployments add: each variant that is an endpoint sglbench did
    not launch, with its URL, then a prefill/decode run's TTFT split (ttft_parts_notes)."""
    from cluster.commands.result_tables import console
    from cluster.commands.ttft_parts_notes import print_ttft_parts

    for line in endpoint_lines(results):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    print_ttft_parts(results)


def print_gpus_notes(table: pd.DataFrame) -> None:
    """Under compare's tables: each distinct note of a point whose deployments hold different (or unknown) GPU
    counts (per_gpu.gpus_note, compare's gpus_note column)."""
    from cluster.commands.result_tables import console

    for line in note_lines(table):
        console.print(f"note {line}", highlight=False, soft_wrap=True, markup=False)
